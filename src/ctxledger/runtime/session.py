"""The :class:`Session` handle: what an agent host calls on every step.

Every public method is serialised per session (one step at a time) and orchestrates the session's
actors from the caller's thread, so no actor ever blocks on another actor's future.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import pykka
import structlog

from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config
from ctxledger.domain import (
    CompactionPlan,
    CompactionResult,
    ModelView,
    SessionState,
    clear_event,
    fail_compaction,
    is_prompt_too_long,
    retraction_events,
    shown_messages,
)
from ctxledger.errors import (
    ContextOverflowError,
    HostClosedError,
    InvalidMessageError,
    InvalidSeqError,
)
from ctxledger.events import (
    CheckpointCreated,
    CompactionFailed,
    CompactionStarted,
    Event,
    MessagePinned,
    ToolResultSynthesized,
    UsageReported,
    ViewServed,
)
from ctxledger.messages import Message
from ctxledger.replay.loader import load_state
from ctxledger.runtime.actors import BudgetActor, CompactionActor, HistoryActor, ProjectionActor
from ctxledger.storage import RecordedEvent

if TYPE_CHECKING:
    from ctxledger.runtime.host import Host

__all__ = ["INTERRUPTED_RESULT", "Session"]

#: Content of the tool result synthesised for a call that was never answered before a restart.
INTERRUPTED_RESULT = "[interrupted: no result was recorded for this tool call before the restart]"

_STOP_TIMEOUT = 5.0


class _Actors(NamedTuple):
    history: Any
    budget: Any
    projection: Any
    compaction: Any
    refs: tuple[pykka.ActorRef[Any], ...]


class Session:
    """One agent's conversation: durable history, compaction and model views.

    Obtain sessions with :meth:`Host.session`; do not construct them directly.
    """

    def __init__(self, host: Host, session_id: str) -> None:
        self._host = host
        self.id = session_id
        self._lock = threading.RLock()
        self._actors: _Actors | None = None
        self._reactive_attempts = 0
        self._log = structlog.get_logger("ctxledger.runtime.session").bind(session_id=session_id)

    def __repr__(self) -> str:
        return f"<Session {self.id!r}>"

    # --- history --------------------------------------------------------------------------------

    def append(self, message: Message) -> int:
        """Append one message durably; return its seq.

        Raises:
            InvalidMessageError: The message is invalid here (nothing is written).
            HostClosedError: The host is closed.
        """
        return self.append_many([message])[0]

    def append_many(self, messages: Sequence[Message]) -> list[int]:
        """Append messages as one atomic batch; return their seqs.

        Raises:
            InvalidMessageError: A message is invalid here (nothing of the batch is written).
            HostClosedError: The host is closed.
        """
        batch = list(messages)
        if not batch:
            return []
        for message in batch:
            if not isinstance(message, Message):
                raise InvalidMessageError(f"expected a Message, got {type(message).__name__}")
        with self._lock:
            actors = self._ensure_active()
            seqs: list[int] = _get(actors.history.append_messages(batch))
            self._reactive_attempts = 0
            return seqs

    def record_usage(self, prompt_tokens: int, completion_tokens: int = 0) -> None:
        """Record the provider's measured token usage for the prompt just sent.

        Raises:
            ValueError: A count is negative or not an integer.
        """
        for name, value in (
            ("prompt_tokens", prompt_tokens),
            ("completion_tokens", completion_tokens),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        with self._lock:
            last_seq, _ = self._positions()
            self._persist(
                [
                    UsageReported(
                        prompt_tokens=prompt_tokens,
                        completion_tokens=completion_tokens,
                        through_seq=last_seq,
                    )
                ]
            )
            self._reactive_attempts = 0

    def history(self) -> list[Message]:
        """Return every appended message with its seq, unaltered."""
        with self._lock:
            actors = self._ensure_active()
            history, _, _, _ = _get(actors.history.snapshot())
            return list(history)

    def checkpoints(self) -> list[Checkpoint]:
        """Return every checkpoint made so far, oldest first (the last one is active)."""
        with self._lock:
            actors = self._ensure_active()
            checkpoints: list[Checkpoint] = _get(actors.history.checkpoints())
            return checkpoints

    @property
    def config(self) -> Config:
        """The Config in force for this session."""
        with self._lock:
            return _get(self._ensure_active().history.config())  # type: ignore[no-any-return]

    def pin(self, seq: int) -> None:
        """Keep message ``seq`` verbatim in every later view.

        Raises:
            InvalidSeqError: No message has this seq.
        """
        with self._lock:
            last_seq, _ = self._positions()
            if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= last_seq:
                raise InvalidSeqError(f"session {self.id!r} has no message with seq {seq!r}")
            self._persist([MessagePinned(seq=seq)])

    def view_at(self, seq: int) -> ModelView:
        """Return the view served (or that would have been served) while ``seq`` was the newest.

        See :func:`ctxledger.replay.view_at`; forks replay their parent's prefix.

        Raises:
            InvalidSeqError: ``seq`` names no message.
        """
        from ctxledger.replay import view_at

        with self._lock:
            last_seq, _ = self._positions()
            if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= last_seq:
                raise InvalidSeqError(f"session {self.id!r} has no message with seq {seq!r}")
            return view_at(self._host.log, self.id, seq, tokenizer=self._host.tokenizer)

    def fork(self, new_id: str, at_seq: int | None = None) -> Session:
        """Create a new session sharing this one's history up to ``at_seq`` (default: all).

        Later events of this session never change the fork's views.

        Raises:
            SessionExistsError: ``new_id`` is taken.
            InvalidSeqError: ``at_seq`` names no message.
        """
        with self._lock:
            if at_seq is not None:
                last_seq, _ = self._positions()
                if (
                    isinstance(at_seq, bool)
                    or not isinstance(at_seq, int)
                    or not 0 <= at_seq <= last_seq
                ):
                    raise InvalidSeqError(f"session {self.id!r} has no message with seq {at_seq!r}")
            return self._host._fork(self, new_id, at_seq)

    # --- compaction and views -------------------------------------------------------------------

    def compact_if_needed(self, pending: str = "") -> CompactionResult:
        """Compact when the estimate (plus ``pending`` text to be sent) reaches the threshold."""
        with self._lock:
            return self._compact("threshold_exceeded", pending=pending)

    def compact(self, focus: str | None = None) -> CompactionResult:
        """Compact now (manual), optionally telling the summariser what to keep."""
        with self._lock:
            return self._compact("manual", focus=focus)

    def reactive_compact(self, error: object = None) -> CompactionResult:
        """Compact after the provider rejected the prompt as too long; harder on each retry.

        Raises:
            ContextOverflowError: ``max_reactive_retries`` attempts did not shrink the view.
        """
        with self._lock:
            if error is not None and not is_prompt_too_long(error):
                self._log.warning("reactive_compact_unrecognised_error", error=repr(error)[:200])
            limit = self.config.max_reactive_retries
            result: CompactionResult | None = None
            while self._reactive_attempts < limit:
                attempt = self._reactive_attempts
                self._reactive_attempts += 1
                result = self._compact("prompt_too_long", attempt=attempt)
                if result.compacted:
                    return result
            raise ContextOverflowError(
                f"session {self.id!r}: the prompt is still too long after {limit} reactive "
                f"compactions (last outcome: {result.reason if result else 'none'})"
            )

    def build_model_view(self) -> ModelView:
        """Build the bounded view to send to the model, and record that it was served."""
        with self._lock:
            actors = self._ensure_active()
            view: ModelView = _get(actors.projection.build())
            self._persist(
                [
                    ViewServed(
                        through_seq=view.through_seq,
                        estimated_tokens=view.estimated_tokens,
                        view_hash=view.view_hash,
                        checkpoint_id=view.checkpoint_id,
                        message_count=len(view.messages),
                    )
                ]
            )
            self._log.debug(
                "view_served",
                seq=view.through_seq,
                view_hash=view.view_hash,
                tokens=view.estimated_tokens,
            )
            return view

    def prepare_step(self, pending: str = "") -> ModelView:
        """Compact if needed, then build and record the model view for the next LLM call."""
        with self._lock:
            self._compact("threshold_exceeded", pending=pending)
            return self.build_model_view()

    def _compact(
        self, trigger: str, *, pending: str = "", focus: str | None = None, attempt: int = 0
    ) -> CompactionResult:
        actors = self._ensure_active()
        outcome = _get(actors.budget.plan(trigger, pending, focus, attempt))
        if isinstance(outcome, CompactionResult):
            return outcome
        plan: CompactionPlan = outcome
        host = self._host
        compaction_id = host.new_id()
        log = self._log.bind(compaction_id=compaction_id, trigger=trigger)
        self._persist(
            [
                CompactionStarted(
                    compaction_id=compaction_id,
                    reason=plan.reason,
                    retain_from_seq=plan.retain_from_seq,
                    covers_through_seq=plan.covers_through_seq,
                    estimated_tokens=plan.estimated_tokens,
                    focus=plan.focus,
                    attempt=attempt,
                )
            ]
        )
        log.info("compaction_started", seq=plan.covers_through_seq, messages=len(plan.messages))
        config = _get(actors.history.config())
        try:
            summary, detail = actors.compaction.summarize(plan).get(timeout=config.summary_timeout)
        except pykka.Timeout:
            summary, detail = None, f"summarizer timed out after {config.summary_timeout}s"
            self._replace_compaction_actor()
        except pykka.ActorDeadError:
            raise HostClosedError("the host is closed") from None
        if not summary:
            self._persist([CompactionFailed(compaction_id=compaction_id, detail=detail)])
            log.warning("compaction_failed", detail=detail)
            return fail_compaction(plan)
        checkpoint, result = _get(
            actors.budget.complete(plan, summary, host.new_id(), host.clock())
        )
        self._persist([CheckpointCreated(compaction_id=compaction_id, checkpoint=checkpoint)])
        log.info(
            "compaction_finished",
            checkpoint_id=checkpoint.id,
            retain_from_seq=checkpoint.retain_from_seq,
            tokens_before=checkpoint.tokens_before,
            tokens_after=checkpoint.tokens_after,
        )
        return result  # type: ignore[no-any-return]

    # --- async twins ------------------------------------------------------------------------------

    async def aappend(self, message: Message) -> int:
        """Async twin of :meth:`append`; runs in a worker thread, never blocking the loop."""
        return await asyncio.to_thread(self.append, message)

    async def aappend_many(self, messages: Sequence[Message]) -> list[int]:
        """Async twin of :meth:`append_many`."""
        return await asyncio.to_thread(self.append_many, messages)

    async def aprepare_step(self, pending: str = "") -> ModelView:
        """Async twin of :meth:`prepare_step`."""
        return await asyncio.to_thread(self.prepare_step, pending)

    async def areactive_compact(self, error: object = None) -> CompactionResult:
        """Async twin of :meth:`reactive_compact`."""
        return await asyncio.to_thread(self.reactive_compact, error)

    async def acompact(self, focus: str | None = None) -> CompactionResult:
        """Async twin of :meth:`compact`."""
        return await asyncio.to_thread(self.compact, focus)

    async def arecord_usage(self, prompt_tokens: int, completion_tokens: int = 0) -> None:
        """Async twin of :meth:`record_usage`."""
        await asyncio.to_thread(self.record_usage, prompt_tokens, completion_tokens)

    # --- internals -------------------------------------------------------------------------------

    def _persist(self, events: list[Event]) -> list[RecordedEvent]:
        with self._lock:
            return _get(self._ensure_active().history.persist(events))  # type: ignore[no-any-return]

    def _live_state(self) -> Any:
        """Return a copy of the history actor's folded state (for equivalence tests)."""
        with self._lock:
            return _get(self._ensure_active().history.state_copy())

    def _positions(self) -> tuple[int, int]:
        """Return (last message seq, last event seq)."""
        with self._lock:
            last_seq, last_event_seq = _get(self._ensure_active().history.positions())
            return last_seq, last_event_seq

    def _ensure_active(self) -> _Actors:
        host = self._host
        host._check_open()
        if self._actors is not None:
            host._touched(self)
            return self._actors
        state, last_event_seq = load_state(host.log, self.id)
        if host._first_activation(self.id):
            last_event_seq = self._recover(state, last_event_seq)
        tokenizer = host.tokenizer
        projection = ProjectionActor.start(state.copy(), tokenizer)
        budget = BudgetActor.start(state.copy(), tokenizer)
        compaction = CompactionActor.start(self.id, host.summarizer)
        history = HistoryActor.start(state, last_event_seq, host.log, [projection, budget])
        self._actors = _Actors(
            history=history.proxy(),
            budget=budget.proxy(),
            projection=projection.proxy(),
            compaction=compaction.proxy(),
            refs=(history, budget, projection, compaction),
        )
        host._activated(self)
        return self._actors

    def _recover(self, state: Any, last_event_seq: int) -> int:
        """Answer tool calls left open by a crash with synthetic ``interrupted`` results."""
        open_calls = list(state.open_tool_calls().values())
        if open_calls:
            synthetic = state.check_append(
                [
                    Message(
                        role="tool",
                        content=INTERRUPTED_RESULT,
                        tool_call_id=call.id,
                        name=call.name,
                        metadata={"synthetic": "interrupted"},
                    )
                    for call in open_calls
                ]
            )
            events = [ToolResultSynthesized(message=message) for message in synthetic]
            records = self._host.log.append(self.id, events, expected_seq=last_event_seq)
            for record in records:
                state.apply(record.event)
            last_event_seq = records[-1].seq
        self._log.info(
            "recovery", seq=state.last_seq, events=last_event_seq, synthesized=len(open_calls)
        )
        return last_event_seq

    def _replace_compaction_actor(self) -> None:
        actors = self._actors
        if actors is None:
            return
        old = actors.refs[3]
        old.stop(block=False)  # its late answer is discarded with it
        fresh = CompactionActor.start(self.id, self._host.summarizer)
        self._actors = actors._replace(compaction=fresh.proxy(), refs=(*actors.refs[:3], fresh))

    def _try_passivate(self) -> bool:
        """Stop this session's actors if it is idle; return whether it was passivated."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            self._stop_actors()
            return True
        finally:
            self._lock.release()

    def _stop_actors(self) -> None:
        actors, self._actors = self._actors, None
        if actors is None:
            return
        history, budget, projection, compaction = actors.refs
        compaction.stop(block=False)
        for ref in (projection, budget, history):
            try:
                ref.stop(block=True, timeout=_STOP_TIMEOUT)
            except pykka.Timeout:
                self._log.warning("actor_stop_timeout", actor=type(ref).__name__)


    # --- withdrawing messages (issue 18) ------------------------------------------------------
    # One block, to be ported into the rewritten Session: retraction and clearing are events
    # (MessageRetracted, HistoryCleared; semantics in ctxledger.domain.withdrawal), and
    # current_messages reads what is still in the conversation. Each method works on a copy of
    # the authoritative state taken under the session lock, so nothing can append in between.

    def retract_last(self, replacement: Sequence[Message] = ()) -> Message:
        """Withdraw the newest message still shown from every later view; return it.

        History keeps the message (a ``MessageRetracted`` event is recorded); replay,
        ``view_at`` and verify reproduce the views without it. A retracted tool result re-opens
        its call; a retracted assistant message withdraws its calls, whose ids may be used again.

        Args:
            replacement: Messages appended in the same atomic batch, validated as if appended
                right after the retraction (an agent framework that removes one part of a
                grouped message puts the rest back this way).

        Returns:
            The retracted message, as recorded.

        Raises:
            InvalidSeqError: No message is shown (all retracted or cleared), or the newest one
                is covered by the active checkpoint's summary; nothing is written.
            InvalidMessageError: A replacement message does not fit; nothing is written.
            HostClosedError: The host is closed.
        """
        batch = list(replacement)
        for message in batch:
            if not isinstance(message, Message):
                raise InvalidMessageError(f"expected a Message, got {type(message).__name__}")
        with self._lock:
            state: SessionState = _get(self._ensure_active().history.state_copy())
            seq = state.retraction_target()
            retracted = state.message(seq)
            self._persist(retraction_events(state, batch))
            self._reactive_attempts = 0
            self._log.debug("retracted", seq=seq, replaced=len(batch))
            return retracted

    def clear(self) -> int:
        """Withdraw every message so far: later views start empty; return the last seq withdrawn.

        History and checkpoints stay in the log (a ``HistoryCleared`` event is recorded). After
        the clear, views show no earlier message, summary, pin or head system message; tool calls
        left open are closed and every tool-call id may be used again. System messages appended
        before the next user message head the views again.

        Raises:
            HostClosedError: The host is closed.
        """
        with self._lock:
            state: SessionState = _get(self._ensure_active().history.state_copy())
            event = clear_event(state)
            self._persist([event])
            self._reactive_attempts = 0
            self._log.debug("cleared", seq=event.through_seq)
            return event.through_seq

    def current_messages(self, limit: int | None = None) -> list[Message]:
        """Return the messages still in the conversation, oldest first (raw, never masked).

        Unlike :meth:`history` (every message ever appended), retracted and cleared messages are
        left out; messages covered by a checkpoint are included.

        Args:
            limit: Return only the newest ``limit`` messages.

        Raises:
            ValueError: ``limit`` is not a non-negative integer.
            HostClosedError: The host is closed.
        """
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            raise ValueError(f"limit must be a non-negative integer or None, got {limit!r}")
        with self._lock:
            state: SessionState = _get(self._ensure_active().history.state_copy())
            return shown_messages(state, limit)

    async def aretract_last(self, replacement: Sequence[Message] = ()) -> Message:
        """Async twin of :meth:`retract_last`."""
        return await asyncio.to_thread(self.retract_last, replacement)

    async def aclear(self) -> int:
        """Async twin of :meth:`clear`."""
        return await asyncio.to_thread(self.clear)

    async def acurrent_messages(self, limit: int | None = None) -> list[Message]:
        """Async twin of :meth:`current_messages`."""
        return await asyncio.to_thread(self.current_messages, limit)

    # --- end of withdrawing messages (issue 18) -------------------------------------------------


def _get(future: Any) -> Any:
    try:
        return future.get()
    except pykka.ActorDeadError:
        raise HostClosedError("the host is closed") from None

