"""The commands of :class:`~ctxledger.testing.DomainSession` that record without compacting
(append, usage, pin, Config, retraction, clearing, reverting a compaction): each runs the pure
function of :mod:`ctxledger.domain.commands` that the host's history actor runs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ctxledger.actors.arguments import append_command, check_seq, check_text, message_batch
from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config
from ctxledger.domain.commands import (
    AppendMessages,
    ClearHistory,
    Command,
    Configure,
    PinMessage,
    RetractLast,
    RevertCompaction,
    usage_of,
)
from ctxledger.messages import Message

__all__ = ["HistoryCommands"]


class HistoryCommands:
    """The history commands of :class:`~ctxledger.testing.DomainSession` (``Session``'s)."""

    if TYPE_CHECKING:  # DomainSession's

        @property
        def id(self) -> str: ...

        def _execute(self, command: Command) -> Any: ...

    def append(self, message: Message) -> int:
        """Append one message; return its seq (``Session.append``).

        Raises:
            InvalidMessageError: The message is invalid here (nothing is recorded).
        """
        seqs: list[int] = self._execute(AppendMessages(messages=message_batch((message,))))
        return seqs[0]

    def append_many(self, messages: Sequence[Message], *, usage: object = None) -> list[int]:
        """Append messages as one atomic batch, after ``usage`` (the usage of the call that
        answered with them) if given; return their seqs (``Session.append_many``).

        Raises:
            InvalidMessageError: A message is invalid here; nothing of the batch is recorded.
            InvalidUsageError: ``usage`` is no usage report; nothing is recorded.
        """
        batch = message_batch(messages)
        if not batch and usage is None:
            return []
        seqs: list[int] = self._execute(append_command(batch, usage))
        return seqs

    def extend(self, messages: Iterable[Message]) -> list[int]:
        """Append messages one at a time (one batch each); return their seqs."""
        return [self.append(message) for message in messages]

    def record_usage(
        self,
        prompt_tokens: int | object,
        completion_tokens: int = 0,
        *,
        cached_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> None:
        """Record the provider's usage for the prompt built at the current seq, and the
        calibration step it brings (``Session.record_usage``: counts or a usage object).

        Raises:
            InvalidUsageError: A count is invalid, or the object is no usage report.
        """
        self._execute(usage_of(prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens))

    def pin(self, seq: int) -> None:
        """Keep message ``seq`` verbatim in every later view (``Session.pin``).

        Raises:
            InvalidSeqError: No message has this seq, or it was retracted or cleared.
        """
        check_seq(self.id, seq)
        self._execute(PinMessage(seq=seq))

    def change_config(self, config: Config | None = None, *, system: str | None = None) -> None:
        """State the Config and system prompt, as ``Host.session(id, config=, system=)`` does
        for an existing session: ``ConfigChanged`` is recorded when ``config`` differs from the
        one in force; ``system`` is appended while the conversation is empty, else checked.

        Raises:
            SystemPromptMismatchError: ``system`` differs from the recorded system prompt.
        """
        if system is not None:
            system = Message.system(system).content  # checked as the host checks it
        self._execute(Configure(config=config, system=system))

    def retract_last(self, replacement: Sequence[Message] = ()) -> Message:
        """Withdraw the newest message still shown; return it (``Session.retract_last``).

        Raises:
            InvalidSeqError: No message is shown, or the newest is covered by the active
                checkpoint; nothing is recorded.
            InvalidMessageError: A replacement message does not fit; nothing is recorded.
        """
        retracted: Message = self._execute(RetractLast(replacement=message_batch(replacement)))
        return retracted

    def clear(self) -> int:
        """Withdraw every message so far; return the last seq withdrawn (``Session.clear``)."""
        through: int = self._execute(ClearHistory())
        return through

    def revert_compaction(
        self, checkpoint_id: str | None = None, *, reason: str = ""
    ) -> Checkpoint | None:
        """Undo the active checkpoint; return the one active again (``Session.revert_compaction``).

        Raises:
            InvalidCheckpointError: Nothing to revert (no checkpoint, not the active one, or
                reverting twice).
            InvalidArgumentError: ``checkpoint_id`` or ``reason`` is not text.
        """
        check_text("checkpoint_id", checkpoint_id, optional=True)
        check_text("reason", reason)
        command = RevertCompaction(checkpoint_id=checkpoint_id, reason=reason)
        restored: Checkpoint | None = self._execute(command)
        return restored
