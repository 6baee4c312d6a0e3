"""The :class:`Session` handle: what an agent calls on every step.

A handle holds no state and no thread. Each call is a command to the history actor that owns the
session, carried out one at a time per session, in the order the calls were made; the caller
waits for the answer on its own thread, or awaits it on its event loop (the ``a``-prefixed
twins), without a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

import msgspec

from ctxledger._logging import get_logger
from ctxledger.actors.arguments import (
    check_limit,
    check_seq,
    check_text,
    message_batch,
)
from ctxledger.actors.messages import Command, Decide, DecideStep, Execute, Query, Read, Settle
from ctxledger.actors.waiters import LoopWaiter, Reply, Waiter
from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config
from ctxledger.domain import (
    INTERRUPTED_RESULT,
    Compact,
    CompactionResult,
    ModelView,
    Serve,
    SessionState,
    Tokenizer,
    is_prompt_too_long,
)
from ctxledger.domain.audit import LossReport, audit_checkpoint
from ctxledger.domain.commands import (
    AppendMessages,
    ClearHistory,
    PinMessage,
    RetractLast,
    RevertCompaction,
    usage_of,
)
from ctxledger.domain.commands import Command as DomainCommand
from ctxledger.domain.cost import Pricing
from ctxledger.domain.placement import Placement
from ctxledger.domain.usage import UsageTotals
from ctxledger.errors import InvalidArgumentError, InvalidSeqError, InvalidSessionIdError
from ctxledger.messages import Message
from ctxledger.replay.loading import fold_view_at, state_at_checkpoint
from ctxledger.replay.recall_index import DEFAULT_RECALL_LIMIT, RecallHit, answer_tool_call, recall
from ctxledger.storage import EventLog
from ctxledger.storage import check_session_id as check_stored_id

__all__ = ["INTERRUPTED_RESULT", "Session", "check_session_id"]

_log = get_logger(__name__)


class _Host(Protocol):
    """What a session needs of its host (the host imports this module, never the reverse)."""

    log: EventLog
    tokenizer: Tokenizer

    def _tell(self, session_id: str, command: Command) -> None: ...

    def _call(self, session_id: str, command: Command) -> Any: ...

    def _fork(self, parent: Session, new_id: str, at_seq: int | None) -> Session: ...


def check_session_id(session_id: object) -> None:
    """Check that ``session_id`` can name a session (:func:`ctxledger.storage.check_session_id`).

    Raises:
        InvalidSessionIdError: It is not a string, or breaks one of the rules for ids.
    """
    if not isinstance(session_id, str):
        raise InvalidSessionIdError(
            f"session id must be a string, got {type(session_id).__name__}", limit="a string"
        )
    check_stored_id(session_id)


class Session:
    """One agent's conversation: durable history, compaction and model views.

    Obtain sessions with :meth:`Host.session`; do not construct them directly. A handle may be
    used from any thread or event loop; calls on one session are carried out one at a time.
    """

    def __init__(self, host: _Host, session_id: str) -> None:
        self._host = host
        self.id = session_id

    def __repr__(self) -> str:
        return f"<Session {self.id!r}>"

    # --- history -------------------------------------------------------------------------------

    def append(self, message: Message) -> int:
        """Append one message durably; return its seq.

        Raises:
            InvalidMessageError: The message is invalid here (nothing is written).
            HostClosedError: The host is closed.
        """
        seqs: list[int] = self._execute(AppendMessages(messages=message_batch((message,))))
        return seqs[0]

    def append_many(self, messages: Sequence[Message]) -> list[int]:
        """Append messages as one atomic batch; return their seqs.

        Raises:
            InvalidMessageError: A message is invalid here; nothing of the batch is written.
            HostClosedError: The host is closed.
        """
        batch = message_batch(messages)
        if not batch:
            return []
        seqs: list[int] = self._execute(AppendMessages(messages=batch))
        return seqs

    def record_usage(
        self,
        prompt_tokens: int | object,
        completion_tokens: int = 0,
        *,
        cached_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> None:
        """Record the provider's measured token usage for the prompt just sent.

        Pass the counts, or the provider's usage object as it came back: an OpenAI response's
        ``usage`` (``prompt_tokens``, ``completion_tokens``,
        ``prompt_tokens_details.cached_tokens``) or an Anthropic response's (``input_tokens``,
        ``output_tokens``, ``cache_read_input_tokens``, ``cache_creation_input_tokens``), as a
        dict or as the SDK's object (see :func:`ctxledger.domain.parse_usage`).

        Args:
            prompt_tokens: Every input token of the call (cached ones included), or a usage
                object (then pass nothing else).
            completion_tokens: Output tokens.
            cached_tokens: Of ``prompt_tokens``, those read from the prompt cache.
            cache_write_tokens: Of ``prompt_tokens``, those written to the prompt cache.

        Raises:
            InvalidUsageError: A count is negative, not an integer or more than
                :data:`~ctxledger.domain.validation.MAX_USAGE_TOKENS`, or the object is not a
                usage report (a ``ValueError``; nothing is recorded).
        """
        self._execute(usage_of(prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens))

    def usage(self) -> UsageTotals:
        """Return the session's cumulative usage as the provider reported it.

        Input tokens (cached and cache writes included, and each broken out), output tokens and
        the number of model calls, summed over every ``record_usage`` of the session (a fork's
        include its parent's up to the fork point).
        """
        totals: UsageTotals = self._read(Query(what="usage"))
        return totals

    def cost(self, pricing: Pricing) -> float:
        """Return what the session's reported usage costs under ``pricing``, in dollars.

        Cached input, cache writes, other input and output tokens each at their price (see
        :class:`ctxledger.Pricing`; ``pricing.uncached()`` prices a provider without caching).
        """
        if not isinstance(pricing, Pricing):
            raise InvalidArgumentError(
                "pricing", f"expected a ctxledger.Pricing, got {type(pricing).__name__}"
            )
        return pricing.cost(self.usage())

    def history(self) -> list[Message]:
        """Return every appended message with its seq, unaltered."""
        history: list[Message] = self._read(Query(what="history"))
        return history

    def checkpoints(self) -> list[Checkpoint]:
        """Return every checkpoint made so far, oldest first (the last one is active)."""
        checkpoints: list[Checkpoint] = self._read(Query(what="checkpoints"))
        return checkpoints

    @property
    def config(self) -> Config:
        """The Config in force for this session."""
        config: Config = self._read(Query(what="config"))
        return config

    def pin(self, seq: int) -> None:
        """Keep message ``seq`` verbatim in every later view.

        Raises:
            InvalidSeqError: No message has this seq, or it was retracted or cleared; nothing
                is written.
        """
        check_seq(self.id, seq)
        self._execute(PinMessage(seq=seq))

    def view_at(self, seq: int) -> ModelView:
        """Return the view served (or that would have been served) while ``seq`` was the newest.

        See :func:`ctxledger.replay.view_at`; forks replay their parent's prefix.

        Raises:
            InvalidSeqError: ``seq`` names no message.
        """
        check_seq(self.id, seq)
        last_seq, _ = self._positions()
        if not 0 <= seq <= last_seq:
            raise InvalidSeqError(f"session {self.id!r} has no message with seq {seq!r}")
        host = self._host
        return fold_view_at(host.log, self.id, seq, tokenizer=host.tokenizer)

    def fork(self, new_id: str, at_seq: int | None = None) -> Session:
        """Create a new session sharing this one's history up to ``at_seq`` (default: all).

        Later events of this session never change the fork's views.

        Raises:
            SessionExistsError: ``new_id`` is taken.
            InvalidSeqError: ``at_seq`` names no message.
        """
        check_session_id(new_id)
        if at_seq is not None:
            check_seq(self.id, at_seq)
            last_seq, _ = self._positions()
            if not 0 <= at_seq <= last_seq:
                raise InvalidSeqError(f"session {self.id!r} has no message with seq {at_seq!r}")
        return self._host._fork(self, new_id, at_seq)

    # --- compaction and views ------------------------------------------------------------------

    def compact_if_needed(self, pending: str = "") -> CompactionResult:
        """Compact when the estimate (plus ``pending`` text to be sent) reaches the threshold.

        Raises:
            InvalidArgumentError: ``pending`` is not a string.
        """
        result: CompactionResult = self._decide(Serve(pending=_pending(pending), view=False))
        return result

    def compact(self, focus: str | None = None) -> CompactionResult:
        """Compact now (manual), optionally telling the summariser what to keep.

        Raises:
            InvalidArgumentError: ``focus`` is not None or a string of valid UTF-8.
        """
        result: CompactionResult = self._decide(_manual(focus))
        return result

    def reactive_compact(self, error: object = None) -> CompactionResult:
        """Compact after the provider rejected the prompt as too long; harder on each retry.

        Raises:
            ContextOverflowError: ``max_reactive_retries`` attempts did not shrink the view.
        """
        _check_reactive_error(error)
        result: CompactionResult = self._decide(Compact(trigger="prompt_too_long"), reactive=True)
        return result

    def build_model_view(self, pending: str = "") -> ModelView:
        """Build the bounded view to send to the model, and record that it was served.

        Raises:
            InvalidArgumentError: ``pending`` is not a string.
        """
        view: ModelView = self._decide(Serve(pending=_pending(pending), compact=False))
        return view

    def prepare_step(self, pending: str = "") -> ModelView:
        """Compact if needed, then build and record the model view for the next LLM call.

        With background compaction on (``Config.prepare_threshold``), a summary prepared ahead
        of need is activated here without calling the summariser.

        Raises:
            InvalidArgumentError: ``pending`` is not a string.
        """
        view: ModelView = self._decide(Serve(pending=_pending(pending)))
        return view

    def step(self, messages: Sequence[Message] = (), pending: str = "") -> ModelView:
        """Append an agent step's new messages and serve the view for its next LLM call.

        The same events, answers and errors as :meth:`append_many` then :meth:`prepare_step`,
        in one commit when no compaction is due (one fsync per step instead of two). When one
        is due, the messages are durable before the summariser runs. The view's
        ``appended_seqs`` are the seqs the messages got.

        Args:
            messages: The new messages (user input, the model's answer, tool results), appended
                as one atomic batch; none: the same as :meth:`prepare_step`.
            pending: Text about to be sent with the view (counted in the estimate).

        Raises:
            InvalidMessageError: A message is invalid here; nothing of the step is written and
                no view is served.
            InvalidArgumentError: ``pending`` is not a string.
            BudgetExceededError: The session reached ``Config.max_total_tokens``; the messages
                are appended (as by :meth:`append_many`), no view is served.
            ContextOverflowError: The view cannot fit the window; the messages are appended.
            HostClosedError: The host is closed.
        """
        batch = message_batch(messages)
        view: ModelView = self._call(_step_command(self.id, Waiter(), batch, pending))
        return _appended(view, len(batch))

    def wait_background(self) -> None:
        """Block until no summary is being prepared in the background for this session.

        Background compaction (``Config.prepare_threshold``) records its events while the
        agent goes on; this waits until they are recorded (or there are none to come), so that
        the log and the live state can be compared at a quiet point. Useful in tests and before
        taking a session's log elsewhere.
        """
        self._call(Settle(self.id, Waiter()))

    # --- async twins ---------------------------------------------------------------------------

    async def aappend(self, message: Message) -> int:
        """Async twin of :meth:`append`: awaits durability on the caller's loop."""
        batch = message_batch((message,))
        seqs: list[int] = await self._aexecute(AppendMessages(messages=batch))
        return seqs[0]

    async def aappend_many(self, messages: Sequence[Message]) -> list[int]:
        """Async twin of :meth:`append_many`."""
        batch = message_batch(messages)
        if not batch:
            return []
        seqs: list[int] = await self._aexecute(AppendMessages(messages=batch))
        return seqs

    async def arecord_usage(
        self,
        prompt_tokens: int | object,
        completion_tokens: int = 0,
        *,
        cached_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> None:
        """Async twin of :meth:`record_usage`."""
        command = usage_of(prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens)
        await self._aexecute(command)

    async def aprepare_step(self, pending: str = "") -> ModelView:
        """Async twin of :meth:`prepare_step` (a coroutine summariser runs on this loop)."""
        view: ModelView = await self._adecide(Serve(pending=_pending(pending)))
        return view

    async def astep(self, messages: Sequence[Message] = (), pending: str = "") -> ModelView:
        """Async twin of :meth:`step` (a coroutine summariser runs on this loop)."""
        batch = message_batch(messages)
        view: ModelView = await self._acall(_step_command(self.id, _loop_reply(), batch, pending))
        return _appended(view, len(batch))

    async def abuild_model_view(self, pending: str = "") -> ModelView:
        """Async twin of :meth:`build_model_view`."""
        view: ModelView = await self._adecide(Serve(pending=_pending(pending), compact=False))
        return view

    async def acompact_if_needed(self, pending: str = "") -> CompactionResult:
        """Async twin of :meth:`compact_if_needed`."""
        request = Serve(pending=_pending(pending), view=False)
        result: CompactionResult = await self._adecide(request)
        return result

    async def acompact(self, focus: str | None = None) -> CompactionResult:
        """Async twin of :meth:`compact`."""
        result: CompactionResult = await self._adecide(_manual(focus))
        return result

    async def await_background(self) -> None:
        """Async twin of :meth:`wait_background`."""
        await self._acall(Settle(self.id, _loop_reply()))

    async def areactive_compact(self, error: object = None) -> CompactionResult:
        """Async twin of :meth:`reactive_compact`."""
        _check_reactive_error(error)
        request = Compact(trigger="prompt_too_long")
        result: CompactionResult = await self._adecide(request, reactive=True)
        return result

    # --- internals -----------------------------------------------------------------------------

    def _call(self, command: Command) -> Any:
        return self._host._call(self.id, command)

    async def _acall(self, command: Command) -> Any:
        self._host._tell(self.id, command)
        reply = command.reply
        assert isinstance(reply, LoopWaiter)
        return await reply.wait()

    def _decide(self, request: Serve | Compact, *, reactive: bool = False) -> Any:
        return self._call(Decide(self.id, Waiter(), request, reactive))

    async def _adecide(self, request: Serve | Compact, *, reactive: bool = False) -> Any:
        return await self._acall(Decide(self.id, _loop_reply(), request, reactive))

    def _execute(self, command: DomainCommand) -> Any:
        return self._call(Execute(self.id, Waiter(), command))

    async def _aexecute(self, command: DomainCommand) -> Any:
        return await self._acall(Execute(self.id, _loop_reply(), command))

    def _read(self, query: Query) -> Any:
        return self._call(Read(self.id, Waiter(), query))

    def _positions(self) -> tuple[int, int]:
        """Return (last message seq, last event seq)."""
        positions: tuple[int, int] = self._read(Query(what="positions"))
        return positions

    def _live_state(self) -> SessionState:
        """Return a copy of the owner's folded state (for equivalence tests)."""
        state: SessionState = self._read(Query(what="state"))
        return state

    # --- what compactions did: audit, explain, revert, recall -----------------------------------
    # The substance is pure domain code (ctxledger.domain.audit / placement / revert), the folds
    # in ctxledger.replay.loading and the index in ctxledger.replay.recall_index, which the offline
    # ctxledger.replay functions of the same names call too: the answers are identical live,
    # after recovery and offline.

    def audit(self, checkpoint_id: str | None = None) -> LossReport:
        """Report what a compaction lost: the facts of its covered messages its view lacks.

        The same report as :func:`ctxledger.replay.audit` on the log (a pure function of it).

        Args:
            checkpoint_id: The checkpoint to audit; the active one when omitted.

        Raises:
            InvalidCheckpointError: The session has no checkpoint, or none with that id.
            InvalidArgumentError: ``checkpoint_id`` is not None or a string.
        """
        check_text("checkpoint_id", checkpoint_id, optional=True)
        self._positions()  # everything asked of the session so far is in the log
        return audit_checkpoint(state_at_checkpoint(self._host.log, self.id, checkpoint_id))

    def explain(self, seq: int) -> Placement:
        """Say where message ``seq`` is in the current view: raw, masked, truncated, pinned or
        summarised (and by which checkpoint, with its reason and time).

        Raises:
            InvalidSeqError: No message has that seq.
        """
        check_seq(self.id, seq)
        placement: Placement = self._read(Query(what="explain", seq=seq))
        return placement

    def revert_compaction(
        self, checkpoint_id: str | None = None, *, reason: str = ""
    ) -> Checkpoint | None:
        """Undo the active checkpoint: the checkpoint before it becomes active again.

        Records ``CheckpointReverted``; the view becomes the one the restored checkpoint gives
        for the current history (the full history when the first checkpoint is reverted), and
        the next compaction (say, :meth:`compact` with a focus) extends it. History and the
        reverted checkpoint stay in the log.

        Args:
            checkpoint_id: The checkpoint to revert; it must be the active one (default).
            reason: Why, for the record.

        Returns:
            The checkpoint that is active again, or None when the first one was reverted.

        Raises:
            InvalidCheckpointError: Nothing to revert: no checkpoint, not the active one, or the
                active one was restored by a revert (reverting twice).
            InvalidArgumentError: ``checkpoint_id`` is not None or a string, or ``reason`` is
                not a string of valid UTF-8.
        """
        check_text("checkpoint_id", checkpoint_id, optional=True)
        check_text("reason", reason)
        command = RevertCompaction(checkpoint_id=checkpoint_id, reason=reason)
        restored: Checkpoint | None = self._execute(command)
        return restored

    def recall(self, query: str, *, limit: int = DEFAULT_RECALL_LIMIT) -> list[RecallHit]:
        """Search the messages the view no longer shows raw (summarised, masked or truncated).

        Ranked by SQLite FTS5's BM25 over an index that is a projection of the log (see
        :mod:`ctxledger.replay.recall_index`).

        Args:
            query: Free text: words, a command, a file name, error text.
            limit: The most hits (1 to 50).

        Raises:
            InvalidQueryError: ``query`` is not text or ``limit`` is out of range.
        """
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

    # --- withdrawing messages: retraction and clearing ---------------------------------------
    # Retraction and clearing are events (MessageRetracted, HistoryCleared; semantics in
    # ctxledger.domain.withdrawal), decided by the owner on the session's current state.

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
        retracted: Message = self._execute(RetractLast(replacement=message_batch(replacement)))
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
        through: int = self._execute(ClearHistory())
        return through

    def current_messages(self, limit: int | None = None) -> list[Message]:
        """Return the messages still in the conversation, oldest first (raw, never masked).

        Unlike :meth:`history` (every message ever appended), retracted and cleared messages are
        left out; messages covered by a checkpoint are included.

        Args:
            limit: Return only the newest ``limit`` messages.

        Raises:
            InvalidArgumentError: ``limit`` is not a non-negative integer (a ``ValueError``).
            HostClosedError: The host is closed.
        """
        check_limit(limit)
        shown: list[Message] = self._read(Query(what="shown", limit=limit))
        return shown

    async def aretract_last(self, replacement: Sequence[Message] = ()) -> Message:
        """Async twin of :meth:`retract_last`."""
        command = RetractLast(replacement=message_batch(replacement))
        retracted: Message = await self._aexecute(command)
        return retracted

    async def aclear(self) -> int:
        """Async twin of :meth:`clear`."""
        through: int = await self._aexecute(ClearHistory())
        return through

    async def acurrent_messages(self, limit: int | None = None) -> list[Message]:
        """Async twin of :meth:`current_messages`."""
        check_limit(limit)
        command = Read(self.id, _loop_reply(), Query(what="shown", limit=limit))
        shown: list[Message] = await self._acall(command)
        return shown


def _pending(pending: object) -> str:
    check_text("pending", pending, utf8=False)  # measured, never recorded
    return pending  # type: ignore[return-value]  # checked just above


def _step_command(
    session_id: str, reply: Reply, batch: tuple[Message, ...], pending: object
) -> DecideStep:
    return DecideStep(session_id, reply, Serve(pending=_pending(pending)), messages=batch)


def _appended(view: ModelView, count: int) -> ModelView:
    """``view`` with the seqs of the ``count`` messages its step appended.

    A session's commands run one at a time and a step's view is decided right after its
    messages are appended (a background compaction appends none), so they end at the view's
    newest seq.
    """
    if not count:
        return view
    last = view.through_seq
    return msgspec.structs.replace(view, appended_seqs=tuple(range(last - count + 1, last + 1)))


def _manual(focus: object) -> Compact:
    check_text("focus", focus, optional=True)  # recorded with the compaction and checkpoint
    return Compact(trigger="manual", focus=focus)  # type: ignore[arg-type]  # checked above


def _check_reactive_error(error: object) -> None:
    if error is not None and not is_prompt_too_long(error):
        _log.warning("reactive_compact_unrecognised_error", error=repr(error)[:200])


def _loop_reply() -> Reply:
    return LoopWaiter(asyncio.get_running_loop())
