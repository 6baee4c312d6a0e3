"""Argument checks and helpers shared by every :class:`~ctxledger.storage.EventLog` backend."""

from __future__ import annotations

from collections.abc import Sequence

from ctxledger.events.types import EVENT_TYPES, Event
from ctxledger.storage.protocol import RecordedEvent

__all__ = ["check_append", "check_range", "check_snapshot", "recorded_batch"]

_EVENT_CLASSES = tuple(EVENT_TYPES)


def check_append(session_id: str, events: Sequence[Event], expected_seq: int) -> list[Event]:
    """Validate the arguments of ``append`` and return the batch as a list.

    Raises:
        TypeError: An argument has the wrong type or a batch item is not an event.
        ValueError: ``session_id`` is empty or ``expected_seq`` is negative.
    """
    _check_session_id(session_id)
    if isinstance(expected_seq, bool) or not isinstance(expected_seq, int):
        raise TypeError(f"expected_seq must be an int, got {expected_seq!r}")
    if expected_seq < 0:
        raise ValueError(f"expected_seq must be >= 0, got {expected_seq}")
    batch = list(events)
    for event in batch:
        if not isinstance(event, _EVENT_CLASSES):
            raise TypeError(f"expected an event, got {type(event).__name__}")
    return batch


def check_range(from_seq: int, to_seq: int | None, limit: int | None) -> tuple[int, int | None]:
    """Validate a read range; return ``(first, last)`` with ``first >= 1`` (``last`` may be None).

    Raises:
        ValueError: ``limit`` is negative.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    return max(from_seq, 1), to_seq


def check_snapshot(session_id: str, seq: int) -> None:
    """Validate the position of a snapshot.

    Raises:
        TypeError: ``session_id`` is not a string or ``seq`` not an int.
        ValueError: ``session_id`` is empty or ``seq`` is negative.
    """
    _check_session_id(session_id)
    if isinstance(seq, bool) or not isinstance(seq, int):
        raise TypeError(f"snapshot seq must be an int, got {seq!r}")
    if seq < 0:
        raise ValueError(f"snapshot seq must be >= 0, got {seq}")


def _check_session_id(session_id: str) -> None:
    if not isinstance(session_id, str):
        raise TypeError(f"session_id must be a string, got {type(session_id).__name__}")
    if not session_id:
        raise ValueError("session_id must not be empty")


def recorded_batch(
    session_id: str, batch: Sequence[Event], first_seq: int, first_position: int, timestamp: float
) -> list[RecordedEvent]:
    """The records of an appended ``batch``: consecutive seqs and positions, one commit time."""
    return [
        RecordedEvent(
            session_id=session_id,
            seq=first_seq + index,
            position=first_position + index,
            timestamp=timestamp,
            event=event,
        )
        for index, event in enumerate(batch)
    ]
