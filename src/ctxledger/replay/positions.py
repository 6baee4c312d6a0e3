"""Finding positions in a session's log: which event appended a message, where a view's span ends.

Binary searches over event seqs, each probe reading a few events: the cost is logarithmic in the
session's length. A fork's first messages are its parent's, so the searches follow the fork
ancestry. :mod:`ctxledger.replay.loading` folds to the positions found here.
"""

from __future__ import annotations

from collections.abc import Iterator

from ctxledger.errors import InvalidSeqError, UnknownSessionError
from ctxledger.events import Event, SessionForked, ViewServed, carried_message
from ctxledger.storage import EventLog, RecordedEvent

__all__ = [
    "append_event_seq",
    "event_seq_before_message",
    "fork_of",
    "message_before",
    "view_span_end",
]

_PROBE_PAGE = 16  # events read at a time while looking for the next message append


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
    fork = fork_of(log, session_id)
    if fork is not None and message_seq <= fork.at_seq:
        return event_seq_before_message(log, fork.parent_id, message_seq)
    event_seq = append_event_seq(log, session_id, message_seq)
    if event_seq is None:
        raise InvalidSeqError(f"session {session_id!r} has no message with seq {message_seq}")
    return session_id, event_seq - 1


def fork_of(log: EventLog, session_id: str) -> SessionForked | None:
    """The ``SessionForked`` event a fork's log starts with, or None for a session of its own."""
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
    fork = fork_of(log, session_id)
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


def _span(log: EventLog, session_id: str, start: int, end: int) -> Iterator[RecordedEvent]:
    return log.iter_events(session_id, start, end)
