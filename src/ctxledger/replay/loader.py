"""Folding a session's events into its state, forks included.

A fork's log starts with ``SessionOpened`` and ``SessionForked``; its state is the parent's events
up to ``parent_event_seq`` (recursively, for forks of forks) followed by its own events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ctxledger.domain import SessionState
from ctxledger.errors import CorruptRecordError, InvalidSeqError, UnknownSessionError
from ctxledger.events import (
    MessageAppended,
    SessionForked,
    SessionOpened,
    ToolResultSynthesized,
)
from ctxledger.storage import EventLog, RecordedEvent

__all__ = ["event_seq_before_message", "fold_session", "load_state"]


def fold_session(
    log: EventLog,
    session_id: str,
    *,
    through_event_seq: int | None = None,
    stop: Callable[[RecordedEvent], bool] | None = None,
) -> tuple[SessionState, int]:
    """Fold a session's events (and its fork ancestry) into a fresh state.

    Args:
        log: The event log.
        session_id: The session to fold.
        through_event_seq: Fold the session's own events up to this event seq (inclusive).
        stop: Optional predicate; folding stops *before* the first own event it accepts.

    Returns:
        The state and the last own event seq that was folded.

    Raises:
        UnknownSessionError: The session has no events.
        CorruptRecordError: The log does not start with ``SessionOpened``, or a record is damaged.
    """
    records = log.iter_events(session_id, 1, through_event_seq)
    first = next(records, None)
    if first is None:
        raise UnknownSessionError(f"unknown session {session_id!r}")
    opened = first.event
    if not isinstance(opened, SessionOpened):
        raise CorruptRecordError(
            f"first event is {type(opened).__name__}, not SessionOpened",
            session_id=session_id,
            seq=first.seq,
        )
    state = SessionState.new(session_id, opened.config)
    state.apply(opened)
    last = first.seq
    for record in records:
        if stop is not None and stop(record):
            break
        event = record.event
        if isinstance(event, SessionForked):
            state, _ = fold_session(
                log, event.parent_id, through_event_seq=event.parent_event_seq
            )
            state.rebase(session_id, opened.config)
        state.apply(event)
        last = record.seq
    return state, last


def load_state(log: EventLog, session_id: str) -> tuple[SessionState, int]:
    """Fold every event of ``session_id``; return the state and its last event seq."""
    return fold_session(log, session_id)


def event_seq_before_message(
    log: EventLog, session_id: str, message_seq: int
) -> tuple[str, int]:
    """Find where a fork at ``message_seq - 1`` must branch off.

    Returns:
        ``(owner_session_id, event_seq)``: the session whose own log holds the append of message
        ``message_seq`` and the event seq just before that append. When the message was
        inherited from a fork parent, the owner is that ancestor.

    Raises:
        InvalidSeqError: No message ``message_seq`` exists.
    """
    for record in _own_events(log, session_id):
        event = record.event
        if isinstance(event, SessionForked):
            if message_seq <= event.at_seq:
                return event_seq_before_message(log, event.parent_id, message_seq)
        elif isinstance(event, MessageAppended | ToolResultSynthesized):
            if event.message.seq == message_seq:
                return session_id, record.seq - 1
    raise InvalidSeqError(f"session {session_id!r} has no message with seq {message_seq}")


def _own_events(log: EventLog, session_id: str) -> Iterator[RecordedEvent]:
    return log.iter_events(session_id, 1, None)
