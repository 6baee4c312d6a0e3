"""What a session's fold keeps: the record of its events and the indices over it.

:class:`StateRecord` holds the plain record (history, checkpoints, pins, usage, config) and small
indices (round starts, cut points, tool calls and their answers) so that planning and projection
never scan history; their entries before the active checkpoint leave memory
(:mod:`ctxledger.domain.indices`). It answers questions about the record (derived facts); the
fold (:mod:`ctxledger.domain.fold`) changes it, the snapshot codec
(:mod:`ctxledger.domain.snapshot`) encodes it, and :class:`~ctxledger.domain.state.SessionState`
puts them together.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

import msgspec

from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config
from ctxledger.domain.indices import SeqList, SeqMap
from ctxledger.domain.readers import Checkpoints, History
from ctxledger.domain.usage import Accounting
from ctxledger.errors import InvalidMessageError, InvalidSeqError
from ctxledger.events.types import CompactionStarted, SummaryPrepared
from ctxledger.messages import Message, ToolCall

__all__ = ["StateRecord", "Usage"]


class Usage(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The provider's last measured prompt size.

    Attributes:
        prompt_tokens: Prompt tokens the provider counted.
        completion_tokens: Completion tokens of that call.
        through_seq: The newest message seq when the measured prompt was built.
        epoch: How many checkpoints existed when it was reported; a newer checkpoint makes the
            figure stale, because it describes a prompt that compaction has since replaced.
    """

    prompt_tokens: int
    completion_tokens: int = 0
    through_seq: int = 0
    epoch: int = 0


class StateRecord:
    """A session's record and indices, with the facts derived from them.

    The attributes are documented on :class:`~ctxledger.domain.state.SessionState`, the class
    the rest of the code uses. This base is what the fold, the snapshot codec and the masking
    policy work on, so that they depend on it and :class:`SessionState` on them, never the
    other way round.
    """

    def __init__(self, session_id: str, config: Config) -> None:
        """Create an empty state; prefer :meth:`new`."""
        self.session_id = session_id
        self.config = config
        self.history: History = History()
        self.checkpoints: Checkpoints = Checkpoints()
        self.pins: set[int] = set()
        self.usage: Usage | None = None
        self.checkpoint_seq = 0
        self.forked_from: str | None = None
        self.fork_seq: int | None = None
        self.last_view_seq = 0
        self.last_view_hash: str | None = None
        self.events_applied = 0
        self.compactions_started = 0
        self.compactions_failed = 0
        self.background: CompactionStarted | None = None
        self.prepared: SummaryPrepared | None = None
        self.background_failures = 0
        self.background_retry_seq = 0
        # How tool results are shown, by seq (see ctxledger.domain.render), and the last draft of
        # the view (see ctxledger.domain.view.draft_view): caches, not state.
        self.render_cache: dict[int, tuple[Message, bool, Message]] = {}
        self.draft_memo: tuple[Any, Any] | None = None
        # The last served view's messages and their encodings, and with view hash version 2
        # their digests (see ctxledger.domain.view.Draft.view): a cache, not state; one tuple
        # never changed once made, so copies may share it.
        self.view_encodings: Any = None
        # Events folded that may change how a message in history is shown (the caches below
        # hold as of one of them).
        self.shown_epoch = 0
        # The active view's rendered tail and its characters, as of one (epoch, start), masking
        # boundary and history length (see ctxledger.domain.projection.assemble_counted); its
        # list is changed in place, so a copy of the state starts without it.
        self.tail_memo: tuple[tuple[int, int], int, int, list[Message], int] | None = None
        # The candidates of a new checkpoint's fact block and what its view shows, as of one
        # (epoch, last seq, checkpoint) (see ctxledger.domain.compaction.finish_checkpoint): a
        # cache, for the shorter blocks tried at the threshold.
        self.fact_memo: tuple[Any, Any] | None = None
        # What each message shows in a cut's tail, for one version of the state (see
        # ctxledger.domain.cuts.ShownChars): a cache, extended in place.
        self.cut_memo: Any = None
        # The head and tail of a view retaining from one cut, as of one number of events folded
        # (see ctxledger.domain.projection.assemble_counted): a cache, for one decision.
        self.cut_parts_memo: tuple[Any, Any] | None = None
        self.active_restored = False
        self.retracted: set[int] = set()
        self.cleared_through = 0
        self.cleared_checkpoints = 0
        self.accounting = Accounting()
        self.mask_count = 0
        self.mask_undo: list[tuple[int, int]] = []
        self.served_masked = 0
        self.served_checkpoint_id: str | None = None
        # The calibrated tokenizer for the calibration in force (see ctxledger.domain.calibration):
        # a cache, not state.
        self.tokenizer_memo: tuple[Any, Any] | None = None
        self._reset_indices()

    def _reset_indices(self) -> None:
        self.first_user_seq: int | None = None
        self.head: list[Message] = []  # system messages before the first user message
        # Index entries up to index_base (the message before the active checkpoint's retained
        # part) may be out of memory: see ctxledger.domain.indices.
        self.index_base = 0
        self.user_seqs = SeqList()
        self.boundaries = SeqList()  # seqs at which a cut is allowed
        self.tool_seqs = SeqList()
        self.assistant_count = 0
        self._calls = SeqMap(hashes=b"")  # call id -> seq of the assistant message
        self._answers = SeqMap()  # call id -> seq of its (first) result
        self._open: dict[str, ToolCall] = {}
        self._bind_indices()

    def _bind_indices(self) -> None:
        """Let the indices read their entries before ``index_base`` back from this history.

        They are rebuilt by indexing messages ``cleared_through + 1..index_base`` in a scratch
        state (which never forgets an entry: it sees no checkpoint), retracted ones skipped, as
        the fold left them. The scratch is kept: when the base has moved on, only the messages in
        between are indexed, so a live session that reads old entries back after each
        checkpoint (an old pin, a hash hit) pays for the new messages, not for its whole history
        again. A clear resets the indices and binds them anew.
        """
        cache: list[tuple[int, StateRecord]] = []

        def before() -> StateRecord:
            base = self.index_base
            if cache and cache[0][0] <= base:
                built, scratch = cache[0]
            else:
                built, scratch = self.cleared_through, StateRecord(self.session_id, self.config)
            retracted = self.retracted
            for message in self.history[built:base]:
                if message.seq not in retracted:
                    scratch._index(message)
            cache[:] = [(base, scratch)]
            return scratch

        self.user_seqs.load = lambda: before().user_seqs.items
        self.boundaries.load = lambda: before().boundaries.items
        self.tool_seqs.load = lambda: before().tool_seqs.items
        self._calls.load = lambda: dict(before()._calls.recent)
        self._answers.load = lambda: dict(before()._answers.recent)

    def _advance_index_base(self, checkpoint: Checkpoint) -> None:
        base = checkpoint.retain_from_seq - 1
        if base <= self.index_base:
            return
        self.index_base = base
        for index in (self.user_seqs, self.boundaries, self.tool_seqs):
            index.forget(base)
        self._calls.forget(base)
        self._answers.forget(base)
        cache = self.render_cache
        self.render_cache = {seq: shown for seq, shown in cache.items() if seq > base}

    # --- construction -----------------------------------------------------------------------------

    @classmethod
    def new(cls, session_id: str, config: Config) -> Self:
        """Return the empty state of a new session."""
        return cls(session_id, config)

    def copy(self) -> Self:
        """Return an independent copy (messages and checkpoints are immutable and shared)."""
        cls = type(self)
        other = cls.__new__(cls)
        for name, value in self.__dict__.items():
            if isinstance(value, list | set | dict | History | Checkpoints | SeqList | SeqMap):
                value = value.copy()
            other.__dict__[name] = value
        # Caches changed in place (projection.kept_tail; fact_block's memo of what the view
        # shows): a copy, which may be folded on another thread, starts without them.
        other.tail_memo = other.fact_memo = other.cut_memo = other.cut_parts_memo = None
        other._bind_indices()  # read back from the copy's own history
        return other

    def rebase(self, session_id: str, config: Config) -> None:
        """Make a parent's folded prefix the start of fork ``session_id`` with ``config``.

        A background compaction the parent had running is the parent's: it never finishes in
        the fork's log. A summary the parent had prepared describes the shared prefix and stays.
        """
        self.session_id = session_id
        self.config = config
        self.background = None
        self.render_cache.clear()
        self.draft_memo = None
        self.view_encodings = None
        self.tail_memo = None
        self.fact_memo = None
        self.cut_memo = None
        self.cut_parts_memo = None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(session_id={self.session_id!r}, last_seq={self.last_seq}, "
            f"checkpoints={len(self.checkpoints)}, pins={sorted(self.pins)})"
        )

    # --- derived facts ----------------------------------------------------------------------------

    @property
    def last_seq(self) -> int:
        """The newest message seq (0 when history is empty)."""
        return len(self.history)

    @property
    def active_checkpoint(self) -> Checkpoint | None:
        """The checkpoint in force: the newest one, unless a clear came after it (then none)."""
        checkpoints = self.checkpoints
        return checkpoints[-1] if len(checkpoints) > self.cleared_checkpoints else None

    @property
    def usage_is_current(self) -> bool:
        """Whether the last usage figure still describes the current view (no checkpoint since)."""
        return self.usage is not None and self.usage.epoch == len(self.checkpoints)

    def message(self, seq: int) -> Message:
        """Return message ``seq``.

        Raises:
            InvalidSeqError: No message has that seq.
        """
        if not 1 <= seq <= len(self.history):
            raise InvalidSeqError(f"session {self.session_id!r} has no message with seq {seq}")
        return self.history[seq - 1]

    def is_head(self, message: Message) -> bool:
        """Whether ``message`` is a shown system message before the first user message."""
        seq = message.seq
        if message.role != "system" or seq is None or self.is_withdrawn(seq):
            return False
        return self.first_user_seq is None or seq < self.first_user_seq

    def is_withdrawn(self, seq: int) -> bool:
        """Whether message ``seq`` was retracted or cleared (no view shows it any more)."""
        return seq <= self.cleared_through or seq in self.retracted

    def retraction_target(self) -> int:
        """Return the seq that a retraction withdraws now: the newest message still shown.

        Raises:
            InvalidSeqError: No message is shown (all were retracted or cleared), or the newest
                one is covered by the checkpoint in force (its summary already tells of it).
        """
        seq = self.last_seq
        while seq > self.cleared_through and seq in self.retracted:
            seq -= 1
        if seq <= self.cleared_through:
            raise InvalidSeqError(f"session {self.session_id!r} has no message to retract")
        active = self.active_checkpoint
        if active is not None and seq < active.retain_from_seq:
            raise InvalidSeqError(
                f"session {self.session_id!r}: message {seq}, the newest still shown, is covered "
                f"by checkpoint {active.id!r} and cannot be retracted"
            )
        return seq

    def open_tool_calls(self) -> dict[str, ToolCall]:
        """Return the tool calls not answered yet, by id, oldest first."""
        return dict(self._open)

    def tool_name(self, message: Message) -> str:
        """Return the tool name of a tool message (its own ``name`` or its call's)."""
        if message.name:
            return message.name
        call_id = message.tool_call_id or ""
        seq = self._calls.get(call_id)
        if seq is None:
            return "tool"
        for call in self.history[seq - 1].tool_calls:
            if call.id == call_id:
                return call.name
        return "tool"

    def tool_ordinal(self, seq: int) -> int:
        """Return how many tool results precede message ``seq`` in history."""
        return self.tool_seqs.bisect_left(seq)

    def boundary_at_or_before(self, seq: int) -> int | None:
        """Return the latest allowed cut seq ``<= seq``, if any."""
        index = self.boundaries.bisect_right(seq)
        return self.boundaries[index - 1] if index else None

    def boundaries_between(self, low: int, high: int) -> list[int]:
        """Return the allowed cut seqs ``s`` with ``low <= s <= high``, ascending."""
        boundaries = self.boundaries
        return boundaries[boundaries.bisect_left(low) : boundaries.bisect_right(high)]

    def pin_group(self, seq: int) -> tuple[int, ...]:
        """Return the seqs shown together with pinned message ``seq``, ascending.

        A pinned tool exchange (the assistant message or one of its results) is shown whole, so
        that a view never holds a tool result without its call or a call without its results.
        """
        message = self.history[seq - 1]
        if message.role == "tool":
            call_seq = self._calls.get(message.tool_call_id or "")
            if call_seq is None:
                return (seq,)
            message = self.history[call_seq - 1]
        if message.role != "assistant" or not message.tool_calls:
            return (seq,)
        assert message.seq is not None
        answers = (self._answers.get(call.id) for call in message.tool_calls)
        return (message.seq, *sorted(answer for answer in answers if answer is not None))

    # --- the indices -----------------------------------------------------------------------------

    def _append(self, message: Message) -> None:
        """Add an appended message to history and the indices (the fold's part of an append).

        Raises:
            InvalidMessageError: The message does not carry the next seq.
        """
        history = self.history
        seq = len(history) + 1
        if message.seq != seq:
            raise InvalidMessageError(
                f"session {self.session_id!r}: appended message carries seq {message.seq}, "
                f"expected {seq}"
            )
        history.append(message)
        self._index(message)

    def _index(self, message: Message) -> None:
        """Enter an appended message into the indices (round starts, cuts, tool calls, head)."""
        seq = message.seq
        assert seq is not None
        role = message.role
        if role == "tool":
            self.tool_seqs.items.append(seq)
            call_id = message.tool_call_id or ""
            # An open call has no answer yet (a validated log never reuses an id), so only a
            # result for a call that is not open needs the lookup, which may read ids back.
            if self._open.pop(call_id, None) is not None or call_id not in self._answers:
                self._answers.recent[call_id] = seq
            return
        if not self._open and (role == "user" or role == "assistant"):
            self.boundaries.items.append(seq)
        if role == "assistant":
            self.assistant_count += 1
            if message.tool_calls:
                calls, open_calls = self._calls.recent, self._open
                for call in message.tool_calls:
                    calls[call.id] = seq
                    open_calls[call.id] = call
        elif role == "user":
            self.user_seqs.items.append(seq)
            if self.first_user_seq is None:
                self.first_user_seq = seq
        elif role == "system" and self.first_user_seq is None:
            self.head.append(message)

    def recent_tool_results(self, count: int) -> Sequence[Message]:
        """Return the last ``count`` tool results, oldest first."""
        return [self.history[seq - 1] for seq in self.tool_seqs[-count:]] if count > 0 else []
