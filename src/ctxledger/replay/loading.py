"""Folding a session's events into its state: snapshots, forks and spans.

The runtime activates sessions with it, and the offline replay (:mod:`ctxledger.replay`) folds
through the same code, so a live state and a replayed one cannot differ.

A fork's log starts with ``SessionOpened`` and ``SessionForked``; its state is the parent's events
up to ``parent_event_seq`` (recursively, for forks of forks) followed by its own events.

Projection snapshots are taken every ``snapshot_interval`` events (see
:func:`snapshot_due`); folding starts from the newest valid snapshot at or before the bound, so it
reads at most ``snapshot_interval`` events past it. A snapshot that fails its checksum (skipped by
the log) or comes from an incompatible version is ignored and the fold falls back to the events.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from ctxledger._arguments import check_flag, check_text
from ctxledger._logging import get_logger
from ctxledger.checkpoints import Checkpoint
from ctxledger.domain import ModelView, SessionState, Tokenizer, build_view
from ctxledger.errors import (
    CorruptRecordError,
    EventDecodeError,
    InvalidCheckpointError,
    UnknownSessionError,
)
from ctxledger.events import (
    CheckpointCreated,
    CheckpointReverted,
    SessionForked,
    SessionOpened,
    carried_message,
)
from ctxledger.messages import Message
from ctxledger.replay._arguments import check_event_seq, check_log, check_session_id
from ctxledger.replay.positions import (
    append_event_seq,
    event_seq_before_message,
    fork_of,
    message_before,
    view_span_end,
)
from ctxledger.storage import EventLog

__all__ = [
    "append_event_seq",
    "event_seq_before_message",
    "fold_session",
    "fold_view_at",
    "fork_point",
    "message_before",
    "read_checkpoints",
    "read_messages",
    "snapshot_due",
    "snapshots_to_drop",
    "state_at_checkpoint",
    "view_span_end",
]

_logger = get_logger(__name__)


#: Snapshots within this many intervals of the newest are all kept: recovery and ``view_at``
#: anywhere in a session's recent events fold at most one interval.
DENSE_SNAPSHOTS = 10


def snapshots_to_drop(seqs: Sequence[int], interval: int) -> list[int]:
    """Return the snapshots (by seq) a session no longer needs to keep.

    Kept: every snapshot within :data:`DENSE_SNAPSHOTS` intervals of the newest, and beyond that
    one per doubling of age (ages ``[s, 2s)``, ``[2s, 4s)``, ... with ``s`` the dense span, the
    oldest of each), so the set grows with the logarithm of the session's length while a fold to
    any older point still starts from a snapshot at most as far back as that point is old. The
    newest snapshot beyond the dense span is kept too: a fold to the oldest events of the span
    starts from it.
    """
    if not seqs:
        return []
    newest = max(seqs)
    span = DENSE_SNAPSHOTS * interval
    edge = max((seq for seq in seqs if newest - seq >= span), default=None)
    kept_buckets: set[int] = set()
    drop: list[int] = []
    for seq in sorted(seqs):  # oldest first: the oldest of each bucket is the one kept
        age = newest - seq
        if age < span or seq == edge:
            continue
        bucket = (age // span).bit_length()
        if bucket in kept_buckets:
            drop.append(seq)
        else:
            kept_buckets.add(bucket)
    return drop


def snapshot_due(previous_event_seq: int, new_event_seq: int, interval: int) -> bool:
    """Whether an append moving a session from one event seq to another crosses a snapshot point."""
    return new_event_seq // interval > previous_event_seq // interval


def fold_session(
    log: EventLog,
    session_id: str,
    *,
    through_event_seq: int | None = None,
    use_snapshots: bool = True,
) -> tuple[SessionState, int]:
    """Fold a session's events (and its fork ancestry) into a fresh state.

    Args:
        log: The event log.
        session_id: The session to fold.
        through_event_seq: Fold the session's own events up to this event seq (inclusive).
        use_snapshots: Start from the newest valid snapshot at or before the bound.

    Returns:
        The state and the last own event seq that was folded.

    Raises:
        UnknownSessionError: The session has no events.
        CorruptRecordError: The log does not start with ``SessionOpened``, or a record is damaged
            (the error names its event seq and the last message folded before it).
        InvalidSessionIdError: ``session_id`` is not a string.
        InvalidArgumentError: ``log`` is not an event log, ``through_event_seq`` is not None
            or an int >= 0, or ``use_snapshots`` is not a bool.
    """
    check_log(log)
    check_session_id(session_id)
    check_event_seq("through_event_seq", through_event_seq)
    check_flag("use_snapshots", use_snapshots)
    try:
        return _fold(log, session_id, through_event_seq, use_snapshots)
    except CorruptRecordError as exc:
        raise _placed(log, session_id, exc)  # noqa: B904  (chained by after_message)


def fork_point(
    log: EventLog, session_id: str, at_seq: int | None, last_seq: int, last_event_seq: int
) -> tuple[str, int, int, SessionState]:
    """Where a fork of ``session_id`` at message ``at_seq`` (None: its newest) branches off.

    ``last_seq`` and ``last_event_seq`` are the session's newest message and event seqs (all
    it holds is in ``log``). Returns ``(owner, at, parent_event_seq, prefix)``: the session whose
    own events hold the fork point (an ancestor when message ``at_seq`` was inherited), the
    message the fork shares last, the owner's last event it shares, and the state there (its
    Config is the fork's), what ``SessionForked`` records and the fork's state starts from.

    Raises:
        InvalidSeqError: No message ``at_seq`` exists.
    """
    if at_seq is None or at_seq == last_seq:
        owner, parent_event_seq, at = session_id, last_event_seq, last_seq
    else:
        owner, parent_event_seq = event_seq_before_message(log, session_id, at_seq + 1)
        at = at_seq
    prefix, _ = fold_session(log, owner, through_event_seq=parent_event_seq)
    return owner, at, parent_event_seq, prefix


def _placed(log: EventLog, session_id: str, error: CorruptRecordError) -> CorruptRecordError:
    """``error`` naming the last message before the damaged record too, when it can be read."""
    if error.session_id != session_id or error.seq is None or error.after_message_seq is not None:
        return error
    try:
        return error.after_message(message_before(log, session_id, error.seq))
    except EventDecodeError:
        return error


def _fold(
    log: EventLog,
    session_id: str,
    through_event_seq: int | None,
    use_snapshots: bool,
) -> tuple[SessionState, int]:
    if use_snapshots:
        resumed = _from_snapshot(log, session_id, through_event_seq)
        if resumed is not None:
            state, start = resumed
            apply, last = state.apply, start
            for seq, event in log.iter_bodies(session_id, start + 1, through_event_seq):
                apply(event)
                last = seq
            return state, last
    records = log.iter_bodies(session_id, 1, through_event_seq)
    first = next(records, None)
    if first is None:
        raise UnknownSessionError(f"unknown session {session_id!r}")
    last, opened = first
    if not isinstance(opened, SessionOpened):
        raise CorruptRecordError(
            f"first event is {type(opened).__name__}, not SessionOpened",
            session_id=session_id,
            seq=last,
        )
    state = SessionState.new(session_id, opened.config)
    state.apply(opened)
    apply = state.apply
    for seq, event in records:
        if type(event) is SessionForked:  # event types are final
            state, _ = fold_session(
                log,
                event.parent_id,
                through_event_seq=event.parent_event_seq,
                use_snapshots=use_snapshots,
            )
            state.rebase(session_id, opened.config)
            apply = state.apply
        apply(event)
        last = seq
    return state, last


def _from_snapshot(
    log: EventLog, session_id: str, bound: int | None
) -> tuple[SessionState, int] | None:
    found = log.load_snapshot(session_id, bound)
    if found is None:
        return None
    seq, data = found
    try:
        state = SessionState.from_snapshot(
            data,
            partial(read_messages, log, session_id),
            partial(read_checkpoints, log, session_id, seq),
        )
    except EventDecodeError as exc:
        _logger.info("snapshot_ignored", session_id=session_id, seq=seq, error=str(exc))
        return None
    if state.session_id != session_id:
        _logger.warning("snapshot_ignored", session_id=session_id, seq=seq, error="foreign")
        return None
    return state, seq


def read_messages(log: EventLog, session_id: str, first: int, last: int) -> list[Message]:
    """Return the session's messages ``first..last`` (seqs, inclusive) from their append events.

    Messages a fork inherited are read from its ancestors' logs. This is how a state resumed from
    a snapshot reads back the history chunks the snapshot leaves out; the cost is a binary search
    (logarithmic in the session's length) plus the events spanned by the messages.
    """
    messages: list[Message] = []
    if first > last:
        return messages
    fork = fork_of(log, session_id)
    if fork is not None and first <= fork.at_seq:
        messages = read_messages(log, fork.parent_id, first, min(last, fork.at_seq))
        first = fork.at_seq + 1
        if first > last:
            return messages
    start = append_event_seq(log, session_id, first)
    if start is None:
        return messages
    try:
        for record in log.iter_events(session_id, start):
            message = carried_message(record.event)
            if message is not None:
                if message.seq is not None and message.seq > last:
                    break
                messages.append(message)
                if message.seq == last:
                    break
    except CorruptRecordError as exc:
        raise _placed(log, session_id, exc)  # noqa: B904  (chained by after_message)
    return messages


def read_checkpoints(log: EventLog, session_id: str, through_event_seq: int) -> list[Checkpoint]:
    """Return the checkpoint activations a fold through ``through_event_seq`` holds, oldest first.

    Reads every event up to the bound (a fork's inherited ones from its ancestors): a state
    resumed from a snapshot calls it only when a checkpoint before the active one is touched.
    """
    found: list[Checkpoint] = []
    for record in log.iter_events(session_id, 1, through_event_seq):
        event = record.event
        if isinstance(event, SessionForked):
            found = read_checkpoints(log, event.parent_id, event.parent_event_seq)
        elif isinstance(event, CheckpointCreated):
            found.append(event.checkpoint)
        elif isinstance(event, CheckpointReverted) and event.restored is not None:
            found.append(event.restored)  # an activation, as SessionState.apply records it
    return found


def fold_view_at(log: EventLog, session_id: str, seq: int, *, tokenizer: Tokenizer) -> ModelView:
    """Return the view served (or that would have been served) while message ``seq`` was newest.

    Folds the span found by :func:`view_span_end`; see :func:`ctxledger.replay.view_at`.

    Raises:
        InvalidSeqError: ``seq`` names no message.
    """
    owner, end = view_span_end(log, session_id, seq)
    state, _ = fold_session(log, owner, through_event_seq=end)
    return build_view(state, tokenizer=tokenizer)


def state_at_checkpoint(
    log: EventLog, session_id: str, checkpoint_id: str | None = None
) -> SessionState:
    """Fold the session up to (and including) the event that recorded a checkpoint.

    Args:
        log: The event log.
        session_id: The session (a fork finds checkpoints it inherited in its ancestors' logs).
        checkpoint_id: The checkpoint; the active one when omitted.

    Raises:
        UnknownSessionError: The session is not in the log.
        InvalidCheckpointError: The session has no checkpoint, or none with that id.
        InvalidSessionIdError: ``session_id`` is not a string.
        InvalidArgumentError: ``log`` is not an event log, or ``checkpoint_id`` is not None or
            a string.
    """
    check_text("checkpoint_id", checkpoint_id, optional=True, utf8=False)
    state, _ = fold_session(log, session_id)
    if checkpoint_id is None:
        checkpoint = state.active_checkpoint
        if checkpoint is None:
            raise InvalidCheckpointError(f"session {session_id!r} has no checkpoint")
    else:
        found = [c for c in state.checkpoints if c.id == checkpoint_id]
        if not found:
            raise InvalidCheckpointError(
                f"session {session_id!r} has no checkpoint {checkpoint_id!r}"
            )
        checkpoint = found[0]
    owner, event_seq = _created_at(log, session_id, checkpoint, None)
    at, _ = fold_session(log, owner, through_event_seq=event_seq)
    return at


def _created_at(
    log: EventLog, session_id: str, checkpoint: Checkpoint, bound: int | None
) -> tuple[str, int]:
    """``(owner, event seq)`` of the ``CheckpointCreated`` that recorded ``checkpoint``.

    The event follows the append of the last message it covers, so the scan starts there
    (found by binary search); a fork looks in its own log first, then in its parent's up to the
    fork point.
    """
    first = log.read(session_id, 1, 2)
    fork = next((r.event for r in first if isinstance(r.event, SessionForked)), None)
    start = 1
    if fork is None or checkpoint.covers_through_seq > fork.at_seq:
        start = append_event_seq(log, session_id, checkpoint.covers_through_seq) or 1
    for record in log.iter_events(session_id, start, bound):
        event = record.event
        if isinstance(event, CheckpointCreated) and event.checkpoint.id == checkpoint.id:
            return session_id, record.seq
    if fork is not None:
        return _created_at(log, fork.parent_id, checkpoint, fork.parent_event_seq)
    raise InvalidCheckpointError(
        f"session {session_id!r}: no event records checkpoint {checkpoint.id!r}"
    )
