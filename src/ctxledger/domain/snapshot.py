"""The snapshot codec: a session's state as deterministic msgpack, and back.

A snapshot lets recovery fold at most ``snapshot_interval`` events past it (see
:mod:`ctxledger.replay.loading`). Its size does not grow with the session: full history chunks,
checkpoints and index entries before the active checkpoint stay in the log, represented by counts
and hash chains. The format is versioned (:data:`SNAPSHOT_VERSION`); any other version is refused
and the fold falls back to the events.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config
from ctxledger.domain.indices import HASH_SIZE, SeqList, SeqMap
from ctxledger.domain.readers import CheckpointReader, Checkpoints, History, HistoryReader
from ctxledger.domain.record import StateRecord, Usage
from ctxledger.domain.usage import Accounting
from ctxledger.errors import EventDecodeError
from ctxledger.events.types import CompactionStarted, SummaryPrepared
from ctxledger.messages import Message, ToolCall

__all__ = ["SNAPSHOT_VERSION", "decode_snapshot", "encode_snapshot"]

R = TypeVar("R", bound=StateRecord)

#: Version of the :func:`encode_snapshot` format; other versions are refused (the fold
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


def encode_snapshot(state: StateRecord) -> bytes:
    """Encode the state (deterministic msgpack with a version field).

    Two states that folded the same events encode to the same bytes, so
    ``snapshot + tail == full replay`` can be checked byte for byte. The size does not grow
    with the history's messages or checkpoints: full history chunks and checkpoints before
    the active one are left out (they are in the log), represented by their count and a hash
    chain over them, so states with different histories still encode differently. So are the
    index entries before the active checkpoint (counted; tool-call ids as 8-byte hashes).
    """
    base = state.index_base
    user_before, user_seqs = state.user_seqs.window(base)
    boundaries_before, boundaries = state.boundaries.window(base)
    tool_before, tool_seqs = state.tool_seqs.window(base)
    return _snapshot_encoder.encode(
        _Snapshot(
            version=SNAPSHOT_VERSION,
            session_id=state.session_id,
            config=state.config,
            history_length=len(state.history),
            history_digest=state.history.digest(),
            history_tail=state.history.tail,
            checkpoint_count=len(state.checkpoints),
            checkpoints_digest=state.checkpoints.digest(),
            # The newest recorded, in force or not (cleared_checkpoints says which).
            active_checkpoint=state.checkpoints[-1] if len(state.checkpoints) else None,
            pins=sorted(state.pins),
            usage=state.usage,
            checkpoint_seq=state.checkpoint_seq,
            forked_from=state.forked_from,
            fork_seq=state.fork_seq,
            last_view_seq=state.last_view_seq,
            last_view_hash=state.last_view_hash,
            events_applied=state.events_applied,
            compactions_started=state.compactions_started,
            compactions_failed=state.compactions_failed,
            retracted=sorted(state.retracted),
            cleared_through=state.cleared_through,
            cleared_checkpoints=state.cleared_checkpoints,
            accounting=state.accounting,
            mask_count=state.mask_count,
            mask_undo=state.mask_undo,
            served_masked=state.served_masked,
            served_checkpoint_id=state.served_checkpoint_id,
            first_user_seq=state.first_user_seq,
            head=state.head,
            index_base=base,
            user_seqs_before=user_before,
            user_seqs=user_seqs,
            boundaries_before=boundaries_before,
            boundaries=boundaries,
            tool_seqs_before=tool_before,
            tool_seqs=tool_seqs,
            assistant_count=state.assistant_count,
            calls=state._calls.recent,
            call_hashes=bytes(state._calls.hashes or b""),
            answers=state._answers.recent,
            answers_before=state._answers.older,
            open_calls=list(state._open.values()),
            background=state.background,
            prepared=state.prepared,
            background_failures=state.background_failures,
            background_retry_seq=state.background_retry_seq,
            active_restored=state.active_restored,
        )
    )


def decode_snapshot(
    cls: type[R],
    data: bytes,
    history: HistoryReader | None = None,
    checkpoints: CheckpointReader | None = None,
) -> R:
    """Decode a state written by :func:`encode_snapshot`.

    Args:
        cls: The state class to build (:class:`~ctxledger.domain.state.SessionState`).
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
