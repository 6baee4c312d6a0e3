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

from collections.abc import Iterator, Sequence
from functools import partial

from ctxledger._logging import get_logger
from ctxledger.checkpoints import Checkpoint
from ctxledger.domain import ModelView, SessionState, Tokenizer, build_view
from ctxledger.errors import (
    CorruptRecordError,
    EventDecodeError,
    InvalidCheckpointError,
    InvalidSeqError,
    UnknownSessionError,
)
from ctxledger.events import (
    CheckpointCreated,
    CheckpointReverted,
    Event,
    SessionForked,
    SessionOpened,
    ViewServed,
    carried_message,
)
from ctxledger.messages import Message
from ctxledger.storage import EventLog, RecordedEvent

__all__ = [
    "append_event_seq",
    "event_seq_before_message",
    "fold_session",
    "fold_view_at",
    "message_before",
    "read_checkpoints",
    "read_messages",
    "snapshot_due",
    "snapshots_to_drop",
    "state_at_checkpoint",
    "view_span_end",
]

_logger = get_logger(__name__)
_PROBE_PAGE = 16  # events read at a time while looking for the next message append


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
    """
    try:
        return _fold(log, session_id, through_event_seq, use_snapshots)
    except CorruptRecordError as exc:
        raise _placed(log, session_id, exc)  # noqa: B904  (chained by after_message)


def _placed(log: EventLog, session_id: str, error: CorruptRecordError) -> CorruptRecordError:
    """``error`` naming the last message before the damaged record too, when it can be read."""
    if error.session_id != session_id or error.seq is None or error.after_message_seq is not None:
        return error
    try:
        return error.after_message(message_before(log, session_id, error.seq))
    except EventDecodeError:
        return error


def message_before(log: EventLog, session_id: str, event_seq: int) -> int:
    """The seq of the last message a session holds before its event ``event_seq`` (0: none).

    Reads backwards a few events at a time; a fork's first messages are its parent's.

    Raises:
        EventDecodeError: A record before ``event_seq`` cannot be read either.
    """
    end = event_seq - 1
    while end >= 1:
        page = log.read(session_id, max(1, end - _PROBE_PAGE + 1), end)
        for record in reversed(page):
            message = carried_message(record.event)
            if message is not None and message.seq is not None:
                return message.seq
            if isinstance(record.event, SessionForked):
                return record.event.at_seq
        end -= _PROBE_PAGE
    return 0


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
    fork = _fork_of(log, session_id)
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


def _message_seq(event: Event) -> int | None:
    message = carried_message(event)
    return None if message is None else message.seq


def append_event_seq(log: EventLog, session_id: str, message_seq: int) -> int | None:
    """Return the event seq of the session's own append of ``message_seq``, if it has one.

    Binary search over event seqs: each probe reads forward to the next message-carrying event,
    so the cost is logarithmic in the session's length.
    """
    low, high = 1, log.last_seq(session_id)
    while low <= high:
        middle = (low + high) // 2
        probe = _next_message(log, session_id, middle, high)
        if probe is None:
            high = middle - 1
            continue
        event_seq, seq = probe
        if seq == message_seq:
            return event_seq
        if seq < message_seq:
            low = event_seq + 1
        else:
            high = middle - 1
    return None


def _next_message(log: EventLog, session_id: str, start: int, end: int) -> tuple[int, int] | None:
    # Small pages: a probe usually stops within a few events, and iter_events would decode a
    # whole 512-event chunk for each of the search's ~log2(events) probes.
    while start <= end:
        page = log.read(session_id, start, end, limit=_PROBE_PAGE)
        for record in page:
            seq = _message_seq(record.event)
            if seq is not None:
                return record.seq, seq
        if len(page) < _PROBE_PAGE:
            return None
        start = page[-1].seq + 1
    return None


def event_seq_before_message(log: EventLog, session_id: str, message_seq: int) -> tuple[str, int]:
    """Find where a fork at ``message_seq - 1`` must branch off.

    Returns:
        ``(owner_session_id, event_seq)``: the session whose own log holds the append of message
        ``message_seq`` and the event seq just before that append. When the message was
        inherited from a fork parent, the owner is that ancestor.

    Raises:
        InvalidSeqError: No message ``message_seq`` exists.
    """
    fork = _fork_of(log, session_id)
    if fork is not None and message_seq <= fork.at_seq:
        return event_seq_before_message(log, fork.parent_id, message_seq)
    event_seq = append_event_seq(log, session_id, message_seq)
    if event_seq is None:
        raise InvalidSeqError(f"session {session_id!r} has no message with seq {message_seq}")
    return session_id, event_seq - 1


def _fork_of(log: EventLog, session_id: str) -> SessionForked | None:
    for record in log.read(session_id, 1, 2):
        if isinstance(record.event, SessionForked):
            return record.event
    return None


def view_span_end(log: EventLog, session_id: str, seq: int) -> tuple[str, int]:
    """Where to fold to rebuild the view served while message ``seq`` was the newest.

    The span is every event after the append of ``seq`` and before the append of ``seq + 1``.
    If a ``ViewServed`` lies in it, the fold ends at the last one (the view that *was* served);
    otherwise at the end of the span (the view that *would have been* served).

    Returns:
        ``(owner_session_id, event_seq)`` to pass to :func:`fold_session`.

    Raises:
        InvalidSeqError: ``seq`` names no message.
    """
    fork = _fork_of(log, session_id)
    if fork is not None and seq < fork.at_seq:
        return view_span_end(log, fork.parent_id, seq)
    last_event = log.last_seq(session_id)
    if last_event == 0:
        raise UnknownSessionError(f"unknown session {session_id!r}")
    start = append_event_seq(log, session_id, seq) if seq > 0 else None
    if start is None:
        # seq 0 or the fork point itself: the span starts with the session's own first events.
        if seq != 0 and not (fork is not None and seq == fork.at_seq):
            raise InvalidSeqError(f"session {session_id!r} has no message with seq {seq}")
        start = 1
    next_append = append_event_seq(log, session_id, seq + 1)
    end = last_event if next_append is None else next_append - 1
    served = [
        record.seq
        for record in _span(log, session_id, start, end)
        if isinstance(record.event, ViewServed) and record.event.through_seq == seq
    ]
    return session_id, served[-1] if served else end


def fold_view_at(log: EventLog, session_id: str, seq: int, *, tokenizer: Tokenizer) -> ModelView:
    """Return the view served (or that would have been served) while message ``seq`` was newest.

    Folds the span found by :func:`view_span_end`; see :func:`ctxledger.replay.view_at`.

    Raises:
        InvalidSeqError: ``seq`` names no message.
    """
    owner, end = view_span_end(log, session_id, seq)
    state, _ = fold_session(log, owner, through_event_seq=end)
    return build_view(state, tokenizer=tokenizer)


def _span(log: EventLog, session_id: str, start: int, end: int) -> Iterator[RecordedEvent]:
    return log.iter_events(session_id, start, end)


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
    """
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
