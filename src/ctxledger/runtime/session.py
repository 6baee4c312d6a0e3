"""The :class:`Session` handle: what an agent host calls on every step.

Every public method is serialised per session (one step at a time) and orchestrates the session's
actors from the caller's thread, so no actor ever blocks on another actor's future.
"""

from __future__ import annotations

import asyncio
import threading
import time
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
    fail_compaction,
    is_prompt_too_long,
)
from ctxledger.domain.audit import LossReport
from ctxledger.domain.placement import Placement, place_message
from ctxledger.domain.revert import revert_checkpoint
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
from ctxledger.runtime.recall import DEFAULT_RECALL_LIMIT, RecallHit, answer_tool_call, recall
from ctxledger.storage import RecordedEvent
from ctxledger.summarizers import describe_summarizer

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
        """Return every checkpoint made so far, oldest first (the last one is active).

        A checkpoint that :meth:`revert_compaction` made active again is listed again.
        """
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
        started = time.perf_counter()
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
        seconds = time.perf_counter() - started
        label = describe_summarizer(host.summarizer)
        checkpoint, result = _get(
            actors.budget.complete(plan, summary, host.new_id(), host.clock(), label, seconds)
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

    # --- issue 16: audit, explain, revert, recall --------------------------------------------
    # Thin on purpose: the substance is pure domain code (ctxledger.domain.audit / placement /
    # revert), the offline folds in ctxledger.replay.audit and the index in runtime/recall.py,
    # so these methods port unchanged to another Session.

    def audit(self, checkpoint_id: str | None = None) -> LossReport:
        """Report what a compaction lost: the facts of its covered messages its view lacks.

        The same report as :func:`ctxledger.replay.audit` on the log (a pure function of it).

        Args:
            checkpoint_id: The checkpoint to audit; the active one when omitted.

        Raises:
            InvalidCheckpointError: The session has no checkpoint, or none with that id.
        """
        from ctxledger.replay.audit import audit_log

        with self._lock:
            self._ensure_active()
            return audit_log(self._host.log, self.id, checkpoint_id)

    def explain(self, seq: int) -> Placement:
        """Say where message ``seq`` is in the current view: raw, masked, truncated, pinned or
        summarised (and by which checkpoint, with its reason and time).

        Raises:
            InvalidSeqError: No message has that seq.
        """
        with self._lock:
            return place_message(self._live_state(), seq)

    def revert_compaction(
        self, checkpoint_id: str | None = None, *, reason: str = ""
    ) -> Checkpoint:
        """Undo the active checkpoint: the checkpoint before it becomes active again.

        Records ``CheckpointReverted``; the view becomes the one the restored checkpoint gives
        for the current history, and the next compaction (say, :meth:`compact` with a focus)
        extends it. History and the reverted checkpoint stay in the log.

        Args:
            checkpoint_id: The checkpoint to revert; it must be the active one (default).
            reason: Why, for the record.

        Returns:
            The checkpoint that is active again.

        Raises:
            InvalidCheckpointError: Nothing to revert: no checkpoint, not the active one, the
                active one was restored by a revert (reverting twice), or it is the first one.
        """
        with self._lock:
            event = revert_checkpoint(self._live_state(), checkpoint_id, reason=reason)
            self._persist([event])
            self._log.info("checkpoint_reverted", checkpoint_id=event.checkpoint_id)
            return event.restored

    def recall(self, query: str, *, limit: int = DEFAULT_RECALL_LIMIT) -> list[RecallHit]:
        """Search the messages the view no longer shows raw (summarised, masked or truncated).

        Ranked by SQLite FTS5's BM25 over an index that is a projection of the log (see
        :mod:`ctxledger.runtime.recall`).

        Args:
            query: Free text: words, a command, a file name, error text.
            limit: The most hits (1 to 50).

        Raises:
            InvalidQueryError: ``query`` is not text or ``limit`` is out of range.
        """
        with self._lock:
            return recall(self._host.log, self._live_state(), query, limit=limit)

    def call_tool(self, name: str, arguments: str | dict[str, Any]) -> str:
        """Answer a model's call of a ctxledger tool (see :mod:`ctxledger.tools`).

        Args:
            name: The tool the model called (``"recall"``).
            arguments: Its arguments, as JSON text (as providers deliver them) or decoded.

        Returns:
            The text to append as the tool result (``Message.tool(answer, call_id, name)``).

        Raises:
            InvalidToolCallError: No such tool, or invalid arguments (answer the call with
                ``str(error)`` so the model can correct it).
        """
        return answer_tool_call(self.recall, name, arguments)


def _get(future: Any) -> Any:
    try:
        return future.get()
    except pykka.ActorDeadError:
        raise HostClosedError("the host is closed") from None
