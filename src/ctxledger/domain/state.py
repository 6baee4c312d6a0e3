"""The session fold: :class:`SessionState` evolves by one event at a time, deterministically.

Every decision input (config, usage figures, checkpoints, pins, synthesized results) comes from an
event, so replaying a log through :meth:`SessionState.apply` rebuilds the identical state. Besides
the plain record (history, checkpoints, pins, usage) the state keeps small indices (round starts,
cut points, tool calls and their answers) so that planning and projection never scan history;
their entries before the active checkpoint leave memory (:mod:`ctxledger.domain.indices`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, overload

import msgspec

from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config
from ctxledger.domain.indices import HASH_SIZE, SeqList, SeqMap
from ctxledger.domain.limits import min_gain_tokens
from ctxledger.domain.usage import Accounting, Calibration, ReportedUsage
from ctxledger.domain.validation import validate_append
from ctxledger.errors import EventDecodeError, InvalidMessageError, InvalidSeqError
from ctxledger.events.types import (
    BudgetExhausted,
    CheckpointCreated,
    CheckpointReverted,
    CompactionFailed,
    CompactionStarted,
    ConfigChanged,
    Event,
    HistoryCleared,
    MessageAppended,
    MessagePinned,
    MessageRetracted,
    RecordLost,
    SessionForked,
    SessionOpened,
    SummaryPrepared,
    TokenizerCalibrated,
    ToolResultSynthesized,
    UsageReported,
    ViewServed,
)
from ctxledger.messages import Message, ToolCall

__all__ = [
    "BACKGROUND_BACKOFF",
    "HISTORY_CHUNK",
    "SNAPSHOT_VERSION",
    "CheckpointReader",
    "Checkpoints",
    "History",
    "HistoryReader",
    "SessionState",
    "Usage",
]

#: Version of the :meth:`SessionState.to_snapshot` format; other versions are refused (the fold
#: falls back to the events). 4 added background compaction, withdrawals and reverts, and its
#: checkpoint digest covers the checkpoints' new fields, so a version-3 snapshot cannot resume
#: to the same bytes: an old session's first activation folds its events once. 5 added the
#: accounting (usage totals, the cap, the calibration), which a version-4 snapshot lacks. 6 added
#: what the last served view masked (``served_masked``, ``served_checkpoint_id``), which a
#: version-5 snapshot lacks. 7 records Configs of schema 4 (the two marks: ``schema_version``,
#: ``compaction_target``, derived sizes as None), which a version-6 snapshot's Config decodes
#: without; and it holds the newest recorded checkpoint even when none is in force (after a
#: clear, or the revert of the only one), which a version-6 snapshot could not resume from.
SNAPSHOT_VERSION = 7

#: Appended messages before a failed background compaction is retried, doubled per consecutive
#: failure (capped at ``BACKGROUND_BACKOFF << 5``).
BACKGROUND_BACKOFF = 4

#: Characters of the mask placeholder besides the tool's name (``[Previous: used <name>]``).
_MASK_OVERHEAD = len("[Previous: used ]")

#: Messages per history chunk. A snapshot holds only the last, partial chunk; full chunks are
#: read back from the log's append events when a seq in them is touched (consecutive missing
#: chunks in one read). Chunks are not stored apart, so the size only sets the snapshot's tail
#: (< 256 messages) and the granularity of read-backs.
HISTORY_CHUNK = 256

#: Reads messages ``first..last`` (seqs, inclusive) back from where they were recorded.
HistoryReader = Callable[[int, int], list[Message]]

#: Reads back every checkpoint recorded up to the snapshot a state was resumed from, oldest first.
CheckpointReader = Callable[[], list[Checkpoint]]


class Checkpoints(Sequence[Checkpoint]):
    """A session's checkpoints, oldest first, list-like.

    A state resumed from a snapshot knows only the active checkpoint (and those made since);
    the earlier ones are read back through ``reader`` the first time one is touched. The fold,
    planning and views only need the active one and the count.
    """

    __slots__ = ("_before", "_digest", "_digested", "_earlier", "_known", "_reader")

    def __init__(self) -> None:
        self._before = 0  # checkpoints before _known, not in memory unless _earlier is set
        self._earlier: list[Checkpoint] | None = None
        self._known: list[Checkpoint] = []
        self._reader: CheckpointReader | None = None
        self._digest = b""  # hash chain over the encoded checkpoints ...
        self._digested = 0  # ... of the first this many (caught up lazily, in digest())

    @classmethod
    def resumed(
        cls, count: int, active: Checkpoint | None, digest: bytes, reader: CheckpointReader | None
    ) -> Checkpoints:
        """Return ``count`` checkpoints of which only the last, ``active``, is in memory."""
        if (active is None) != (count == 0):
            raise ValueError(f"{count} checkpoints, active checkpoint {active!r}")
        checkpoints = cls()
        if active is not None:
            checkpoints._before = count - 1
            checkpoints._known = [active]
        checkpoints._reader = reader
        checkpoints._digest = digest
        checkpoints._digested = count
        return checkpoints

    def copy(self) -> Checkpoints:
        """Return an independent copy (checkpoints are immutable and shared)."""
        other = Checkpoints()
        other._before = self._before
        other._earlier = self._earlier
        other._known = self._known.copy()
        other._reader = self._reader
        other._digest = self._digest
        other._digested = self._digested
        return other

    def append(self, checkpoint: Checkpoint) -> None:
        """Record the newest checkpoint."""
        self._known.append(checkpoint)

    def __len__(self) -> int:
        return self._before + len(self._known)

    def _load_earlier(self) -> list[Checkpoint]:
        if self._earlier is None:
            if self._reader is None:
                raise InvalidSeqError("earlier checkpoints are not loaded and have no reader")
            earlier = self._reader()[: self._before]
            if len(earlier) != self._before:
                raise EventDecodeError(
                    f"read back {len(earlier)} earlier checkpoints, expected {self._before}"
                )
            self._earlier = earlier
        return self._earlier

    @overload
    def __getitem__(self, index: int) -> Checkpoint: ...

    @overload
    def __getitem__(self, index: slice) -> list[Checkpoint]: ...

    def __getitem__(self, index: int | slice) -> Checkpoint | list[Checkpoint]:
        if isinstance(index, slice):
            return list(self)[index]
        length = len(self)
        if index < 0:
            index += length
        if not 0 <= index < length:
            raise IndexError("checkpoint index out of range")
        if index >= self._before:
            return self._known[index - self._before]
        return self._load_earlier()[index]

    def __iter__(self) -> Iterator[Checkpoint]:
        if self._before:
            yield from self._load_earlier()
        yield from self._known

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Checkpoints | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Checkpoints(count={len(self)})"

    def digest(self) -> bytes:
        """Return the hash chain over every checkpoint: equal sequences, equal digests."""
        while self._digested < len(self):
            encoded = _snapshot_encoder.encode(self[self._digested])
            self._digest = hashlib.blake2b(self._digest + encoded, digest_size=16).digest()
            self._digested += 1
        return self._digest


class History(Sequence[Message]):
    """A session's messages, list-like: ``history[i].seq == i + 1``.

    Kept in chunks of :data:`HISTORY_CHUNK` messages. A state decoded from a snapshot knows only
    the last, partial chunk; the full chunks before it are read through ``reader`` the first time
    a seq in them is touched, and then kept. Full chunks never change (messages are immutable).
    """

    __slots__ = ("_chunks", "_digest", "_digested", "_length", "_reader", "_tail")

    def __init__(self) -> None:
        self._chunks: list[list[Message] | None] = []  # full chunks; None = not read yet
        self._tail: list[Message] = []
        self._length = 0
        self._reader: HistoryReader | None = None
        self._digest = b""  # hash chain over the encoded full chunks ...
        self._digested = 0  # ... of the first this many (caught up lazily, in digest())

    @classmethod
    def resumed(
        cls, length: int, tail: list[Message], digest: bytes, reader: HistoryReader | None
    ) -> History:
        """Return a history of ``length`` messages whose full chunks are read lazily."""
        history = cls()
        full = length // HISTORY_CHUNK
        if len(tail) != length - full * HISTORY_CHUNK:
            raise ValueError(f"history tail holds {len(tail)} messages, length is {length}")
        history._chunks = [None] * full
        history._tail = list(tail)
        history._length = length
        history._reader = reader
        history._digest = digest
        history._digested = full
        return history

    def copy(self) -> History:
        """Return an independent copy (chunks and messages are immutable and shared)."""
        other = History()
        other._chunks = self._chunks.copy()
        other._tail = self._tail.copy()
        other._length = self._length
        other._reader = self._reader
        other._digest = self._digest
        other._digested = self._digested
        return other

    def digest(self) -> bytes:
        """Return the hash chain over every full chunk: equal histories, equal digests.

        Chunks filled since the last call are hashed now (they are in memory: a resumed history
        starts with its snapshot's digest), so the fold itself never encodes a message.
        """
        while self._digested < len(self._chunks):
            encoded = _snapshot_encoder.encode(self._chunk(self._digested))
            self._digest = hashlib.blake2b(self._digest + encoded, digest_size=16).digest()
            self._digested += 1
        return self._digest

    @property
    def tail(self) -> list[Message]:
        """The messages after the last full chunk (what a snapshot stores)."""
        return self._tail

    def append(self, message: Message) -> None:
        """Append the next message (the caller checks its seq)."""
        tail = self._tail
        tail.append(message)
        self._length += 1
        if len(tail) == HISTORY_CHUNK:
            self._chunks.append(tail)
            self._tail = []

    def __len__(self) -> int:
        return self._length

    def _chunk(self, number: int) -> list[Message]:
        chunks = self._chunks
        if number == len(chunks):
            return self._tail
        chunk = chunks[number]
        if chunk is None:
            self._fill(number, number + 1)
            chunk = chunks[number]
            assert chunk is not None
        return chunk

    def _fill(self, start: int, stop: int) -> None:
        """Read back the missing full chunks ``start <= number < stop``, one read per run."""
        chunks = self._chunks
        stop = min(stop, len(chunks))
        number = start
        while number < stop:
            if chunks[number] is not None:
                number += 1
                continue
            end = number
            while end < stop and chunks[end] is None:
                end += 1
            first = number * HISTORY_CHUNK + 1
            if self._reader is None:
                raise InvalidSeqError(f"messages {first}.. are not loaded and have no reader")
            messages = self._reader(first, end * HISTORY_CHUNK)
            if len(messages) != (end - number) * HISTORY_CHUNK or messages[0].seq != first:
                raise EventDecodeError(
                    f"history chunks from seq {first} read back {len(messages)} messages"
                )
            for index in range(number, end):
                offset = (index - number) * HISTORY_CHUNK
                chunks[index] = messages[offset : offset + HISTORY_CHUNK]
            number = end

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._length)
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            out: list[Message] = []
            if start < stop:
                self._fill(start // HISTORY_CHUNK, (stop - 1) // HISTORY_CHUNK + 1)
            while start < stop:
                number, offset = divmod(start, HISTORY_CHUNK)
                chunk = self._chunk(number)
                take = min(stop - start, len(chunk) - offset)
                out.extend(chunk[offset : offset + take])
                start += take
            return out
        length = self._length
        if index < 0:
            index += length
        if not 0 <= index < length:
            raise IndexError("history index out of range")
        number, offset = divmod(index, HISTORY_CHUNK)
        return self._chunk(number)[offset]

    def __iter__(self) -> Iterator[Message]:
        self._fill(0, len(self._chunks))
        for number in range(len(self._chunks)):
            yield from self._chunk(number)
        yield from self._tail

    def __eq__(self, other: object) -> bool:
        if isinstance(other, History | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"History(length={self._length}, loaded={self.loaded_chunks()})"

    def loaded_chunks(self) -> int:
        """Return how many full chunks are in memory."""
        return sum(chunk is not None for chunk in self._chunks)


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


class _Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    # The record and its indices; history only as its length and last, partial chunk (the full
    # chunks are read back from the log's append events when touched).
    version: int
    session_id: str
    config: Config
    history_length: int
    history_digest: bytes  # see History.digest
    history_tail: list[Message]
    checkpoint_count: int
    checkpoints_digest: bytes  # see Checkpoints.digest
    active_checkpoint: Checkpoint | None
    pins: list[int]
    usage: Usage | None
    checkpoint_seq: int
    forked_from: str | None
    fork_seq: int | None
    last_view_seq: int
    last_view_hash: str | None
    events_applied: int
    compactions_started: int
    compactions_failed: int
    first_user_seq: int | None
    head: list[Message]
    # The indices after index_base (and a few before, see domain.indices): entries counted in
    # *_before and ids hashed in *_hashes are read back from history when touched.
    index_base: int
    user_seqs_before: int
    user_seqs: list[int]
    boundaries_before: int
    boundaries: list[int]
    tool_seqs_before: int
    tool_seqs: list[int]
    assistant_count: int
    calls: dict[str, int]
    call_hashes: bytes
    answers: dict[str, int]
    answers_before: int
    open_calls: list[ToolCall]
    background: CompactionStarted | None = None
    prepared: SummaryPrepared | None = None
    background_failures: int = 0
    background_retry_seq: int = 0
    active_restored: bool = False
    # Withdrawn messages (version 4): retracted seqs after the last clear, the last clear's
    # through_seq and how many checkpoints existed then.
    retracted: list[int] = []
    cleared_through: int = 0
    cleared_checkpoints: int = 0
    accounting: Accounting = Accounting()
    mask_count: int = 0
    mask_undo: list[tuple[int, int]] = []
    served_masked: int = 0
    served_checkpoint_id: str | None = None


class _Version(msgspec.Struct):
    version: int = -1


_snapshot_encoder = msgspec.msgpack.Encoder(order="deterministic")
_snapshot_decoder = msgspec.msgpack.Decoder(_Snapshot)
_version_decoder = msgspec.msgpack.Decoder(_Version)


class SessionState:
    """Everything the domain knows about one session, folded from its events.

    A mutable accumulator owned by one actor; :meth:`apply` is deterministic and does no I/O.

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
        cache: list[tuple[int, SessionState]] = []

        def before() -> SessionState:
            base = self.index_base
            if cache and cache[0][0] <= base:
                built, scratch = cache[0]
            else:
                built, scratch = self.cleared_through, SessionState(self.session_id, self.config)
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
    def new(cls, session_id: str, config: Config) -> SessionState:
        """Return the empty state of a new session."""
        return cls(session_id, config)

    def copy(self) -> SessionState:
        """Return an independent copy (messages and checkpoints are immutable and shared)."""
        other = SessionState.__new__(SessionState)
        for name, value in self.__dict__.items():
            if isinstance(value, list | set | dict | History | Checkpoints | SeqList | SeqMap):
                value = value.copy()
            other.__dict__[name] = value
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

    def to_snapshot(self) -> bytes:
        """Encode the state (deterministic msgpack with a version field).

        Two states that folded the same events encode to the same bytes, so
        ``snapshot + tail == full replay`` can be checked byte for byte. The size does not grow
        with the history's messages or checkpoints: full history chunks and checkpoints before
        the active one are left out (they are in the log), represented by their count and a hash
        chain over them, so states with different histories still encode differently. So are the
        index entries before the active checkpoint (counted; tool-call ids as 8-byte hashes).
        """
        base = self.index_base
        user_before, user_seqs = self.user_seqs.window(base)
        boundaries_before, boundaries = self.boundaries.window(base)
        tool_before, tool_seqs = self.tool_seqs.window(base)
        return _snapshot_encoder.encode(
            _Snapshot(
                version=SNAPSHOT_VERSION,
                session_id=self.session_id,
                config=self.config,
                history_length=len(self.history),
                history_digest=self.history.digest(),
                history_tail=self.history.tail,
                checkpoint_count=len(self.checkpoints),
                checkpoints_digest=self.checkpoints.digest(),
                # The newest recorded, in force or not (cleared_checkpoints says which).
                active_checkpoint=self.checkpoints[-1] if len(self.checkpoints) else None,
                pins=sorted(self.pins),
                usage=self.usage,
                checkpoint_seq=self.checkpoint_seq,
                forked_from=self.forked_from,
                fork_seq=self.fork_seq,
                last_view_seq=self.last_view_seq,
                last_view_hash=self.last_view_hash,
                events_applied=self.events_applied,
                compactions_started=self.compactions_started,
                compactions_failed=self.compactions_failed,
                retracted=sorted(self.retracted),
                cleared_through=self.cleared_through,
                cleared_checkpoints=self.cleared_checkpoints,
                accounting=self.accounting,
                mask_count=self.mask_count,
                mask_undo=self.mask_undo,
                served_masked=self.served_masked,
                served_checkpoint_id=self.served_checkpoint_id,
                first_user_seq=self.first_user_seq,
                head=self.head,
                index_base=base,
                user_seqs_before=user_before,
                user_seqs=user_seqs,
                boundaries_before=boundaries_before,
                boundaries=boundaries,
                tool_seqs_before=tool_before,
                tool_seqs=tool_seqs,
                assistant_count=self.assistant_count,
                calls=self._calls.recent,
                call_hashes=bytes(self._calls.hashes or b""),
                answers=self._answers.recent,
                answers_before=self._answers.older,
                open_calls=list(self._open.values()),
                background=self.background,
                prepared=self.prepared,
                background_failures=self.background_failures,
                background_retry_seq=self.background_retry_seq,
                active_restored=self.active_restored,
            )
        )

    @classmethod
    def from_snapshot(
        cls,
        data: bytes,
        history: HistoryReader | None = None,
        checkpoints: CheckpointReader | None = None,
    ) -> SessionState:
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
        try:
            version = _version_decoder.decode(data).version
        except (msgspec.DecodeError, ValueError) as exc:
            raise EventDecodeError(f"session snapshot does not decode: {exc}") from None
        if version != SNAPSHOT_VERSION:
            raise EventDecodeError(
                f"session snapshot version {version} is not supported (expected {SNAPSHOT_VERSION})"
            )
        try:
            snap = _snapshot_decoder.decode(data)
        except (msgspec.DecodeError, ValueError) as exc:
            raise EventDecodeError(f"session snapshot does not decode: {exc}") from None
        state = cls(snap.session_id, snap.config)
        try:
            state.history = History.resumed(
                snap.history_length, snap.history_tail, snap.history_digest, history
            )
            state.checkpoints = Checkpoints.resumed(
                snap.checkpoint_count, snap.active_checkpoint, snap.checkpoints_digest, checkpoints
            )
        except ValueError as exc:
            raise EventDecodeError(f"session snapshot is inconsistent: {exc}") from None
        # The decoded containers belong to ``snap`` alone, which is dropped: no copies.
        state.first_user_seq = snap.first_user_seq
        state.head = snap.head
        state.index_base = snap.index_base
        state.user_seqs = SeqList(snap.user_seqs, snap.user_seqs_before)
        state.boundaries = SeqList(snap.boundaries, snap.boundaries_before)
        state.tool_seqs = SeqList(snap.tool_seqs, snap.tool_seqs_before)
        state.assistant_count = snap.assistant_count
        calls, answers = SeqMap.in_seq_order(snap.calls), SeqMap.in_seq_order(snap.answers)
        state._calls = SeqMap(calls, len(snap.call_hashes) // HASH_SIZE, snap.call_hashes)
        state._answers = SeqMap(answers, snap.answers_before)
        state._bind_indices()
        state._open = {call.id: call for call in snap.open_calls}
        state.pins = set(snap.pins)
        state.usage = snap.usage
        state.checkpoint_seq = snap.checkpoint_seq
        state.forked_from = snap.forked_from
        state.fork_seq = snap.fork_seq
        state.last_view_seq = snap.last_view_seq
        state.last_view_hash = snap.last_view_hash
        state.events_applied = snap.events_applied
        state.compactions_started = snap.compactions_started
        state.compactions_failed = snap.compactions_failed
        state.background = snap.background
        state.prepared = snap.prepared
        state.background_failures = snap.background_failures
        state.background_retry_seq = snap.background_retry_seq
        state.active_restored = snap.active_restored
        state.retracted = set(snap.retracted)
        state.cleared_through = snap.cleared_through
        state.cleared_checkpoints = snap.cleared_checkpoints
        state.accounting = snap.accounting
        state.mask_count = snap.mask_count
        state.mask_undo = snap.mask_undo
        state.served_masked = snap.served_masked
        state.served_checkpoint_id = snap.served_checkpoint_id
        return state

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SessionState):
            return NotImplemented
        return self.to_snapshot() == other.to_snapshot()

    def __repr__(self) -> str:
        return (
            f"SessionState(session_id={self.session_id!r}, last_seq={self.last_seq}, "
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
            used_ids=self._calls.keys(),
            answered_ids=self._answers.keys(),
        )

    def check_pin(self, seq: int) -> None:
        """Validate pinning message ``seq``.

        Raises:
            InvalidSeqError: No message has that seq, or it was retracted or cleared.
        """
        self.message(seq)
        if self.is_withdrawn(seq):
            raise InvalidSeqError(f"session {self.session_id!r}: message {seq} was withdrawn")

    # --- the fold ---------------------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        """Evolve the state by one recorded event (unknown event types are ignored).

        Raises:
            InvalidMessageError: An appended message does not carry the next seq (a gap or a
                repeat in the log).
        """
        self.events_applied += 1
        kind = type(event)
        # Appends, served views and usage reports are nearly every event of a log (about 50, 25
        # and 25 %): test for them first, by exact type (event types are final).
        if kind is MessageAppended or kind is ToolResultSynthesized:
            self._append(event.message)  # type: ignore[union-attr, arg-type]
            if event.message.role == "tool":  # type: ignore[union-attr]
                self._advance_mask()
        elif kind is ViewServed:
            self.last_view_seq = event.through_seq  # type: ignore[union-attr]
            self.last_view_hash = event.view_hash  # type: ignore[union-attr]
            self.served_masked = self.masked_results()
            self.served_checkpoint_id = event.checkpoint_id  # type: ignore[union-attr]
            if event.view_chars:  # type: ignore[union-attr]
                self.accounting = msgspec.structs.replace(
                    self.accounting,
                    view_seq=event.through_seq,  # type: ignore[union-attr]
                    view_chars=event.view_chars,  # type: ignore[union-attr]
                )
        elif kind is UsageReported:
            last = len(self.history)
            through = event.through_seq or last  # type: ignore[union-attr]
            self.usage = Usage(
                prompt_tokens=event.prompt_tokens,  # type: ignore[union-attr]
                completion_tokens=event.completion_tokens,  # type: ignore[union-attr]
                through_seq=min(through, last),
                epoch=len(self.checkpoints),
            )
            reported = ReportedUsage(
                prompt_tokens=event.prompt_tokens,  # type: ignore[union-attr]
                completion_tokens=event.completion_tokens,  # type: ignore[union-attr]
                cached_tokens=event.cached_tokens,  # type: ignore[union-attr]
                cache_write_tokens=event.cache_write_tokens,  # type: ignore[union-attr]
            )
            accounting = self.accounting
            self.accounting = msgspec.structs.replace(
                accounting, totals=accounting.totals.add(reported)
            )
        elif kind is TokenizerCalibrated:
            self.accounting = msgspec.structs.replace(
                self.accounting,
                paired_seq=self.accounting.view_seq,
                calibration=Calibration(
                    samples=event.samples,  # type: ignore[union-attr]
                    mean_chars=event.mean_chars,  # type: ignore[union-attr]
                    mean_tokens=event.mean_tokens,  # type: ignore[union-attr]
                    m2_chars=event.m2_chars,  # type: ignore[union-attr]
                    m2_tokens=event.m2_tokens,  # type: ignore[union-attr]
                    co_moment=event.co_moment,  # type: ignore[union-attr]
                    chars_per_token=event.chars_per_token,  # type: ignore[union-attr]
                ),
            )
        elif kind is BudgetExhausted:
            self.accounting = msgspec.structs.replace(
                self.accounting,
                exhausted_cap=event.cap,  # type: ignore[union-attr]
            )
        elif isinstance(event, CheckpointCreated):
            self.checkpoints.append(event.checkpoint)
            self.checkpoint_seq = self.last_seq
            # No retraction reaches results before the checkpoint in force until now (a revert
            # of the new one restores that one): their boundary moves cannot be undone.
            floor = self.tool_seqs.before
            self.mask_undo = [entry for entry in self.mask_undo if entry[0] > floor]
            self.active_restored = False
            self._advance_index_base(event.checkpoint)
            # A new checkpoint ends any prepared summary: it was activated, or it extends a
            # checkpoint that is no longer the active one.
            self.prepared = None
        elif isinstance(event, CheckpointReverted):
            # The restored checkpoint is active again (or, when the only one was reverted, none
            # is: the full history is shown, as after a clear of the checkpoints only); index
            # entries the reverted one moved out of memory are read back when touched. No
            # checkpoint is current at this position, so a compaction (say, with a focus) may
            # follow at once. A prepared summary extended the reverted checkpoint: it no longer
            # applies.
            if event.restored is None:
                self.cleared_checkpoints = len(self.checkpoints)
            else:
                self.checkpoints.append(event.restored)
            self.checkpoint_seq = -1
            self.active_restored = True
            self.prepared = None
        elif isinstance(event, CompactionStarted):
            self.compactions_started += 1
            if event.background:
                self.background = event
        elif isinstance(event, SummaryPrepared):
            if self.background is not None and self.background.compaction_id == event.compaction_id:
                self.background = None
            self.prepared = event
            self.background_failures = 0
        elif isinstance(event, CompactionFailed):
            self.compactions_failed += 1
            if event.background:
                if self.background is not None and (
                    self.background.compaction_id == event.compaction_id
                ):
                    self.background = None
                if event.reason != "interrupted":
                    self.background_failures += 1
                    backoff = BACKGROUND_BACKOFF << min(self.background_failures - 1, 5)
                    self.background_retry_seq = self.last_seq + backoff
        elif isinstance(event, MessagePinned):
            if not self.is_withdrawn(event.seq):  # a withdrawn message stays out of views
                self.pins.add(event.seq)
        elif isinstance(event, MessageRetracted):
            self._retract(event.seq)
            if event.mask_count is not None:
                self.mask_count = event.mask_count
        elif isinstance(event, HistoryCleared):
            self._clear(event.through_seq)
        elif isinstance(event, ConfigChanged):
            self.config = event.config
            self.render_cache.clear()
        elif isinstance(event, SessionOpened):
            # A fork's own SessionOpened follows its parent's prefix: keep that history.
            self.config = event.config
            self.render_cache.clear()
        elif isinstance(event, SessionForked):
            self.forked_from = event.parent_id
            self.fork_seq = event.at_seq
        elif isinstance(event, RecordLost) and event.message is not None:
            # Salvage's stand-in for a lost message: appended like the message it replaces.
            self._append(event.message)
            if event.message.role == "tool":
                self._advance_mask()

    def _append(self, message: Message) -> None:
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

    def mask_target(self) -> int:
        """How many of the oldest tool results micro masking makes candidates, by batch.

        Once more than ``micro_keep_recent`` results exist, the oldest
        ``((n - keep) // batch) * batch`` (see :func:`ctxledger.domain.render_policy`).
        """
        config = self.config
        aged = len(self.tool_seqs) - config.micro_keep_recent
        return (aged // config.micro_batch) * config.micro_batch if aged > 0 else 0

    def masked_results(self) -> int:
        """How many of the oldest tool results are masking candidates in a view served now.

        :meth:`mask_target`, held back under the gain rule to :attr:`mask_count` (see
        :func:`ctxledger.domain.render_policy`).
        """
        masked = self.mask_target()
        if min_gain_tokens(self.config) > 0:
            masked = min(masked, self.mask_count)
        return masked

    def mask_after_retraction(self) -> int | None:
        """Under the gain rule: :attr:`mask_count` once the newest shown message is retracted,
        when that moves it back (the message is a tool result whose append moved the boundary);
        None otherwise. Recorded on ``MessageRetracted.mask_count``, so that an append retracted at
        once leaves the view as it was.

        Raises:
            InvalidSeqError: Nothing can be retracted (see :meth:`retraction_target`).
        """
        seq = self.retraction_target()
        if self.history[seq - 1].role != "tool":
            return None
        remaining = len(self.tool_seqs) - 1
        restored = self.mask_count
        for count, before in reversed(self.mask_undo):
            if count <= remaining:
                break
            restored = before
        return None if restored == self.mask_count else restored

    def _advance_mask(self) -> None:
        """Move the re-masking boundary under the gain rule (``min_compaction_gain_tokens``).

        A re-mask rewrites the view from the first newly masked result on (the provider's
        cached prefix ends there), so it waits until the results it would mask save at least
        the gain: their characters beyond the placeholder, // 3.
        """
        target = self.mask_target()
        current = min(self.mask_count, target)
        gain = min_gain_tokens(self.config)
        if target <= current or gain <= 0:
            self.mask_count = target
            return
        config = self.config
        saved = 0
        for seq in self.tool_seqs[current:target]:
            message = self.history[seq - 1]
            if len(message.content) <= config.micro_min_chars or seq in self.pins:
                continue
            name = self.tool_name(message)
            if name not in config.micro_preserve_tools:
                saved += max(0, len(message.content) - len(name) - _MASK_OVERHEAD)
        if saved // 3 >= gain:
            # Retracting these results can move the boundary back (mask_after_retraction).
            self.mask_undo.append((len(self.tool_seqs), self.mask_count))
            self.mask_count = target
        else:
            self.mask_count = current

    def _retract(self, seq: int) -> None:
        """Withdraw message ``seq`` (the newest shown): undo what :meth:`_index` entered."""
        try:
            target = self.retraction_target()
        except InvalidSeqError as exc:
            raise InvalidSeqError(f"cannot retract message {seq}: {exc}") from None
        if seq != target:
            raise InvalidSeqError(
                f"session {self.session_id!r}: cannot retract message {seq}, the newest message "
                f"still shown is {target}"
            )
        message = self.history[seq - 1]
        role = message.role
        if role == "tool":
            _drop_last(self.tool_seqs.items, seq)
            undo = self.mask_undo
            while undo and undo[-1][0] > len(self.tool_seqs):
                undo.pop()
            call_id = message.tool_call_id or ""
            if self._answers.recent.get(call_id) == seq:
                del self._answers.recent[call_id]
            call_seq = self._calls.get(call_id)
            if call_seq is not None:  # the call is shown again without its result: open
                for call in self.history[call_seq - 1].tool_calls:
                    if call.id == call_id:
                        self._open[call_id] = call
        else:
            _drop_last(self.boundaries.items, seq)
            if role == "assistant":
                self.assistant_count -= 1
                calls = self._calls.recent
                for call in message.tool_calls:  # its results, if any, were retracted before it
                    if calls.get(call.id) == seq:
                        del calls[call.id]
                    self._open.pop(call.id, None)
            elif role == "user":
                _drop_last(self.user_seqs.items, seq)
                if self.first_user_seq == seq:
                    self.first_user_seq = None
            elif role == "system" and self.head and self.head[-1].seq == seq:
                self.head.pop()
        self.pins.discard(seq)
        self.retracted.add(seq)
        if self.prepared is not None and self.prepared.covers_through_seq >= seq:
            self.prepared = None  # it summarises the withdrawn message
        if self.usage is not None and self.usage.through_seq >= seq:
            self.usage = None  # it measured a prompt that showed the message

    def _clear(self, through_seq: int) -> None:
        """Withdraw every message up to ``through_seq`` (the newest): views start afresh."""
        if not self.cleared_through <= through_seq == self.last_seq:
            raise InvalidSeqError(
                f"session {self.session_id!r}: a clear must run through the newest message "
                f"{self.last_seq}, not {through_seq}"
            )
        self.cleared_through = through_seq
        self.cleared_checkpoints = len(self.checkpoints)
        self.prepared = None  # it summarises messages no view shows any more
        self.retracted = set()
        self.pins = set()
        self.usage = None
        self._reset_indices()  # open calls closed, ids free again, no head, no rounds
        self.index_base = through_seq
        self.mask_undo = []  # no retraction reaches back past a clear

    def recent_tool_results(self, count: int) -> Sequence[Message]:
        """Return the last ``count`` tool results, oldest first."""
        return [self.history[seq - 1] for seq in self.tool_seqs[-count:]] if count > 0 else []


def _drop_last(items: list[int], seq: int) -> None:
    """Remove ``seq`` from the end of a sorted index list, if it is there."""
    if items and items[-1] == seq:
        items.pop()
