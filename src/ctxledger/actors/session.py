"""The :class:`Session` handle: what an agent calls on every step.

A handle holds no state and no thread. Each call is a command to the history actor that owns the
session, carried out one at a time per session, in the order the calls were made; the caller
waits for the answer on its own thread, or awaits it on its event loop (the ``a``-prefixed
twins), without a worker thread.

:class:`Session` holds the commands (appends, usage, pins, forks, compactions, steps,
retraction); its reads and its async twins come from two private bases, ``SessionReads``
(``_session_reads``) and ``AsyncSession`` (``_session_async``), over the handle's plumbing in
``_session_base``. Every method is ``Session``'s, documented where it is defined.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ctxledger.actors._session_async import AsyncSession
from ctxledger.actors._session_base import (
    SessionHost,
    check_reactive_error,
    check_session_id,
    defer_flag,
    manual_request,
    pending_text,
    step_command,
    with_appended_seqs,
)
from ctxledger.actors._session_reads import SessionReads
from ctxledger.actors.arguments import append_command, check_seq, check_text, message_batch
from ctxledger.actors.messages import Settle
from ctxledger.actors.waiters import Waiter
from ctxledger.checkpoints import Checkpoint
from ctxledger.domain import INTERRUPTED_RESULT, Compact, CompactionResult, ModelView, Serve
from ctxledger.domain.commands import (
    AppendMessages,
    ClearHistory,
    PinMessage,
    RetractLast,
    RevertCompaction,
    usage_of,
)
from ctxledger.errors import InvalidSeqError
from ctxledger.messages import Message

__all__ = ["INTERRUPTED_RESULT", "Session", "check_session_id"]


class _Host(SessionHost, Protocol):
    """What a session needs of its host: also the fork (the host imports this module, never
    the reverse)."""

    def _fork(self, parent: Session, new_id: str, at_seq: int | None) -> Session: ...


class Session(SessionReads, AsyncSession):
    """One agent's conversation: durable history, compaction and model views.

    Obtain sessions with :meth:`Host.session`; do not construct them directly. A handle may be
    used from any thread or event loop; calls on one session are carried out one at a time.
    """

    _host: _Host

    def __init__(self, host: _Host, session_id: str) -> None:
        super().__init__(host, session_id)

    # --- history -------------------------------------------------------------------------------

    def append(self, message: Message) -> int:
        """Append one message durably; return its seq.

        Raises:
            InvalidMessageError: The message is invalid here (nothing is written).
            HostClosedError: The host is closed.
        """
        if not isinstance(message, Message):  # message_batch's check, without its call
            message_batch((message,))  # raises, naming what was given
        seqs: list[int] = self._execute(AppendMessages(messages=(message,)))
        return seqs[0]

    def append_many(self, messages: Sequence[Message], *, usage: object = None) -> list[int]:
        """Append messages as one atomic batch; return their seqs.

        Args:
            messages: The messages, oldest first.
            usage: The provider's usage of the model call that answered with ``messages``
                (what :meth:`record_usage` takes as its one argument: the usage object, a dict
                of one, a :class:`~ctxledger.domain.ReportedUsage`); recorded just before them,
                in the same commit: the events of ``record_usage(usage)`` then
                ``append_many(messages)``, one fsync instead of two.

        Raises:
            InvalidMessageError: A message is invalid here; nothing of the batch is written.
            InvalidUsageError: ``usage`` is no usage report, or a count is invalid; nothing is
                written.
            HostClosedError: The host is closed.
        """
        batch = message_batch(messages)
        if not batch and usage is None:
            return []
        seqs: list[int] = self._execute(append_command(batch, usage))
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

    def pin(self, seq: int) -> None:
        """Keep message ``seq`` verbatim in every later view.

        Raises:
            InvalidSeqError: No message has this seq, or it was retracted or cleared; nothing
                is written.
        """
        check_seq(self.id, seq)
        self._execute(PinMessage(seq=seq))

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
        result: CompactionResult = self._decide(Serve(pending=pending_text(pending), view=False))
        return result

    def compact(self, focus: str | None = None) -> CompactionResult:
        """Compact now (manual), optionally telling the summariser what to keep.

        Raises:
            InvalidArgumentError: ``focus`` is not None or a string of valid UTF-8.
        """
        result: CompactionResult = self._decide(manual_request(focus))
        return result

    def reactive_compact(self, error: object = None) -> CompactionResult:
        """Compact after the provider rejected the prompt as too long; harder on each retry.

        Raises:
            ContextOverflowError: ``max_reactive_retries`` attempts did not shrink the view.
        """
        check_reactive_error(error)
        result: CompactionResult = self._decide(Compact(trigger="prompt_too_long"), reactive=True)
        return result

    def build_model_view(self, pending: str = "") -> ModelView:
        """Build the bounded view to send to the model, and record that it was served.

        Raises:
            InvalidArgumentError: ``pending`` is not a string.
        """
        view: ModelView = self._decide(Serve(pending=pending_text(pending), compact=False))
        return view

    def prepare_step(self, pending: str = "", *, defer_record: bool = False) -> ModelView:
        """Compact if needed, then build and record the model view for the next LLM call.

        With background compaction on (``Config.prepare_threshold``), a summary prepared ahead
        of need is activated here without calling the summariser.

        Args:
            pending: Text about to be sent with the view (counted in the estimate).
            defer_record: When no compaction is needed, return the view at once and record its
                ``ViewServed`` with the session's next write (say, the append of the user
                message the model call comes after): one commit fewer, and the same events in
                the same order in the log. Any other command of the session, its eviction and
                the host's close record it first. Until then it is not durable: a process killed
                in between leaves no record of the view. Use it only when the model is called
                after the session's next append, as the OpenAI Agents SDK does.

        Raises:
            InvalidArgumentError: ``pending`` is not a string, or ``defer_record`` not a bool.
        """
        request = Serve(pending=pending_text(pending))
        view: ModelView = self._decide(request, defer_record=defer_flag(defer_record))
        return view

    def step(
        self, messages: Sequence[Message] = (), pending: str = "", *, usage: object = None
    ) -> ModelView:
        """Append an agent step's new messages and serve the view for its next LLM call.

        The same events, answers and errors as :meth:`append_many` then :meth:`prepare_step`,
        in one commit when no compaction is due (one fsync per step instead of two). When one
        is due, the messages are durable before the summariser runs. The view's
        ``appended_seqs`` are the seqs the messages got.

        Args:
            messages: The new messages (user input, the model's answer, tool results), appended
                as one atomic batch; none: the same as :meth:`prepare_step`.
            pending: Text about to be sent with the view (counted in the estimate).
            usage: The usage of the model call whose answer begins ``messages``, recorded just
                before them in the same commit (as :meth:`append_many`'s ``usage``).

        Raises:
            InvalidMessageError: A message is invalid here; nothing of the step is written and
                no view is served.
            InvalidUsageError: ``usage`` is no usage report; nothing is written.
            InvalidArgumentError: ``pending`` is not a string.
            BudgetExceededError: The session reached ``Config.max_total_tokens``; the messages
                are appended (as by :meth:`append_many`), no view is served.
            ContextOverflowError: The view cannot fit the window; the messages are appended.
            HostClosedError: The host is closed.
        """
        batch = message_batch(messages)
        view: ModelView = self._call(step_command(self.id, Waiter(), batch, pending, usage))
        return with_appended_seqs(view, len(batch))

    def wait_background(self) -> None:
        """Block until no summary is being prepared in the background for this session.

        Background compaction (``Config.prepare_threshold``) records its events while the
        agent goes on; this waits until they are recorded (or there are none to come), so that
        the log and the live state can be compared at a quiet point. Useful in tests and before
        taking a session's log elsewhere.
        """
        self._call(Settle(self.id, Waiter()))

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
