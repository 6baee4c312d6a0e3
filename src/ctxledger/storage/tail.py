"""Following a log: every event of all sessions, in commit order, as it is committed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from ctxledger.storage.protocol import EventLog, RecordedEvent

__all__ = ["PositionWaiter", "tail"]


@runtime_checkable
class PositionWaiter(Protocol):
    """A log that can block until it grows (:class:`~ctxledger.storage.PostgresEventLog`)."""

    def wait_for_position(self, after_position: int, timeout: float) -> int:
        """Block until the log holds an event past ``after_position``, or ``timeout`` seconds;
        return the last position."""
        ...


def tail(
    log: EventLog,
    after_position: int = 0,
    *,
    stop: threading.Event,
    batch: int = 512,
    poll: float = 0.1,
) -> Iterator[RecordedEvent]:
    """Yield every event after ``after_position``, in commit order, until ``stop`` is set.

    Pages through :meth:`EventLog.read_all` (positions are dense and in commit order, so
    resuming after the last position seen never skips or repeats an event). When the reader
    has caught up it waits for the log to grow: through ``wait_for_position`` where the log has
    it (PostgreSQL, woken by its writers in any process), otherwise by polling every ``poll``
    seconds. ``stop`` is checked between pages and at least every ``poll`` seconds.

    Args:
        log: Any event log.
        after_position: The last position already seen (0: from the start).
        stop: Set it to end the iteration.
        batch: Events per read.
        poll: Seconds between checks while idle.
    """
    position = after_position
    waiter = log if isinstance(log, PositionWaiter) else None
    while not stop.is_set():
        page = log.read_all(position, limit=batch)
        if page:
            yield from page
            position = page[-1].position
        elif waiter is not None:
            waiter.wait_for_position(position, poll)
        else:
            stop.wait(poll)
