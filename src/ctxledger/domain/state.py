"""The session state: :class:`SessionState` evolves by one event at a time, deterministically.

Every decision input (config, usage figures, checkpoints, pins, synthesized results) comes from an
event, so replaying a log through :meth:`SessionState.apply` rebuilds the identical state. The
parts live in modules of their own: the record, its indices and derived facts
(:mod:`ctxledger.domain.record`), the lazily read history and checkpoints
(:mod:`ctxledger.domain.readers`), the fold (:mod:`ctxledger.domain.fold`), the snapshot codec
(:mod:`ctxledger.domain.snapshot`) and the masking policy (:mod:`ctxledger.domain.masking`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Self

from ctxledger.domain import fold, masking
from ctxledger.domain.fold import BACKGROUND_BACKOFF
from ctxledger.domain.readers import CheckpointReader, Checkpoints, History, HistoryReader
from ctxledger.domain.record import StateRecord, Usage
from ctxledger.domain.snapshot import SNAPSHOT_VERSION, decode_snapshot, encode_snapshot
from ctxledger.domain.validation import validate_append
from ctxledger.errors import InvalidSeqError
from ctxledger.messages import Message

# The names this module held before the split stay importable from it (for code outside the
# project; the project imports them from their own modules).
__all__ = [
    "BACKGROUND_BACKOFF",
    "SNAPSHOT_VERSION",
    "CheckpointReader",
    "Checkpoints",
    "History",
    "HistoryReader",
    "SessionState",
    "Usage",
]


class SessionState(StateRecord):
    """Everything the domain knows about one session, folded from its events.

    A mutable accumulator owned by one actor; :meth:`apply` is deterministic and does no I/O.
    The record and its derived facts are :class:`~ctxledger.domain.record.StateRecord`'s; the fold
    is :mod:`ctxledger.domain.fold`, the snapshot codec :mod:`ctxledger.domain.snapshot`, the
    masking policy :mod:`ctxledger.domain.masking`.

    Attributes:
        session_id: The session this state belongs to.
        config: The Config in force (the latest ``SessionOpened`` or ``ConfigChanged``).
        history: Every appended message, synthesized results included; ``history[i].seq == i + 1``
            (a :class:`History`: list-like, read back in chunks when resumed from a snapshot).
        checkpoints: Every checkpoint activation, oldest first; the last one is active (a
            :class:`Checkpoints`: list-like, earlier ones read back when resumed). A
            ``CheckpointReverted`` appends the checkpoint it restores, so a restored checkpoint
            appears twice.
        pins: Seqs of pinned messages.
        usage: The provider's last usage figure, if any (see :attr:`usage_is_current`).
        checkpoint_seq: ``last_seq`` when the active checkpoint was recorded.
        forked_from: The parent session id if this session is a fork.
        fork_seq: The parent's last message seq at the fork point.
        last_view_seq: ``through_seq`` of the last served view (0 if none).
        last_view_hash: Hash of the last served view.
        events_applied: Number of events folded so far.
        shown_epoch: Number of events folded that may change how a message in history is
            shown (all but appends, served views, usage, calibration, background summaries,
            failures and exports); a memo of the view made at one epoch holds for it.
        compactions_started: Number of ``CompactionStarted`` events.
        compactions_failed: Number of ``CompactionFailed`` events.
        background: The background compaction running (started, not yet prepared or failed).
        prepared: The newest prepared summary not activated yet (it may be stale: see
            :func:`ctxledger.domain.decide`).
        background_failures: Background compactions failed in a row (0 after one succeeds).
        background_retry_seq: No background compaction starts before this message seq.
        active_restored: The active checkpoint became active again by a ``CheckpointReverted``
            (it cannot be reverted in turn; see :func:`ctxledger.domain.revert_checkpoint`).
        retracted: Seqs of retracted messages after the last clear (``MessageRetracted``).
        cleared_through: ``through_seq`` of the last ``HistoryCleared`` (0 if none): messages up
            to it are shown in no later view.
        cleared_checkpoints: How many checkpoints existed at the last clear, or at the revert of
            the only checkpoint in force; those are not in force after it (see
            :attr:`active_checkpoint`).
        accounting: Usage totals, the cap reached, the tokenizer calibration
            (:class:`~ctxledger.domain.usage.Accounting`).
        mask_count: Under the gain rule of a one-mark Config (``min_compaction_gain_tokens``,
            schema 3 only): how many of the oldest tool results are masking candidates (the
            boundary moves only when the results it would newly mask save at least that many
            tokens); see :func:`ctxledger.domain.render_policy`. A Config of schema 4 masks by
            its masking settings alone.
        mask_undo: Under the gain rule, each move of :attr:`mask_count` since the checkpoint
            before the active one: the tool results counted after it and the count before it,
            so that retracting those results can restore it (:meth:`mask_after_retraction`).
        served_masked: :meth:`masked_results` when the last view was served (see
            :func:`ctxledger.domain.remask_of`).
        served_checkpoint_id: The checkpoint id of the last served view.
    """

    __hash__ = None  # type: ignore[assignment]  # mutable: equal states must not share dict slots

    # --- validation -------------------------------------------------------------------------------

    def check_append(self, messages: Iterable[Message]) -> list[Message]:
        """Validate a batch of messages against this state without changing it.

        Args:
            messages: The messages to append, oldest first; any preset ``seq`` is replaced.

        Returns:
            The messages carrying the seqs they will get.

        Raises:
            InvalidMessageError: A message cannot be appended here; the error names it and why.
        """
        return validate_append(
            messages,
            last_seq=self.last_seq,
            open_calls=self._open,
            used_ids=self._calls,  # ``in`` reads their ids, as ``keys()`` would
            answered_ids=self._answers,
        )

    def check_pin(self, seq: int) -> None:
        """Validate pinning message ``seq``.

        Raises:
            InvalidSeqError: No message has that seq, or it was retracted or cleared.
        """
        self.message(seq)
        if self.is_withdrawn(seq):
            raise InvalidSeqError(f"session {self.session_id!r}: message {seq} was withdrawn")

    # --- the fold and the snapshot codec ----------------------------------------------------------

    #: Evolve the state by one recorded event: :func:`ctxledger.domain.fold.apply` itself, bound
    #: as a method (no extra call on the hottest path of replay).
    apply = fold.apply

    def to_snapshot(self) -> bytes:
        """Encode the state (see :func:`ctxledger.domain.snapshot.encode_snapshot`).

        Two states that folded the same events encode to the same bytes, so
        ``snapshot + tail == full replay`` can be checked byte for byte.
        """
        return encode_snapshot(self)

    @classmethod
    def from_snapshot(
        cls,
        data: bytes,
        history: HistoryReader | None = None,
        checkpoints: CheckpointReader | None = None,
    ) -> Self:
        """Decode a state written by :meth:`to_snapshot`.

        Args:
            data: The snapshot.
            history: Reads back messages of full history chunks (not in the snapshot) when they
                are touched; without it, touching them raises :class:`InvalidSeqError`.
            checkpoints: Reads back the checkpoints before the active one (the snapshot holds
                only the active one) when they are touched; likewise.

        Raises:
            EventDecodeError: The bytes do not decode, or come from another snapshot version.
        """
        return decode_snapshot(cls, data, history, checkpoints)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SessionState):
            return NotImplemented
        return self.to_snapshot() == other.to_snapshot()

    # --- masking ------------------------------------------------------------------------------

    def mask_target(self) -> int:
        """How many of the oldest tool results micro masking makes candidates, by batch (see
        :func:`ctxledger.domain.masking.mask_target`)."""
        return masking.mask_target(self)

    def masked_results(self) -> int:
        """How many of the oldest tool results are masking candidates in a view served now (see
        :func:`ctxledger.domain.masking.masked_results`)."""
        return masking.masked_results(self)

    def mask_after_retraction(self) -> int | None:
        """:attr:`mask_count` once the newest shown message is retracted, when that moves it back
        under the gain rule; None otherwise (see
        :func:`ctxledger.domain.masking.mask_after_retraction`).

        Raises:
            InvalidSeqError: Nothing can be retracted (see :meth:`retraction_target`).
        """
        return masking.mask_after_retraction(self)
