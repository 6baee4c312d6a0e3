"""Progress on stderr for verbs that read a whole log (``verify``, ``whatif``, ``export``, ...).

The library functions behind those verbs take an :class:`~ctxledger.storage.EventLog`; the verb
hands them a :class:`CountingLog` around the real one, which moves a progress bar as events are
read. So one mechanism serves every verb, and the library needs no progress parameter.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

import click

from ctxledger.events import Event
from ctxledger.storage import AppendCallback, EventLog, RecordedEvent

__all__ = ["CountingLog", "reading_progress"]

_T = TypeVar("_T")
_EVERY = 2048  # events between two updates of the bar: an update costs a redraw


class CountingLog:
    """An :class:`EventLog` that reports how many events are read through it.

    Args:
        log: The log every call goes to.
        tick: Called with the number of events read since its last call.
    """

    def __init__(self, log: EventLog, tick: Callable[[int], None]) -> None:
        self._log = log
        self._tick = tick

    def _counted(self, items: Iterator[_T]) -> Iterator[_T]:
        count = 0
        try:
            for item in items:
                count += 1
                if count == _EVERY:
                    self._tick(count)
                    count = 0
                yield item
        finally:
            if count:
                self._tick(count)

    def append(
        self, session_id: str, events: Sequence[Event], *, expected_seq: int
    ) -> list[RecordedEvent]:
        """See :meth:`EventLog.append`."""
        return self._log.append(session_id, events, expected_seq=expected_seq)

    async def aappend(
        self, session_id: str, events: Sequence[Event], *, expected_seq: int
    ) -> list[RecordedEvent]:
        """See :meth:`EventLog.aappend`."""
        return await self._log.aappend(session_id, events, expected_seq=expected_seq)

    def submit(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        callback: AppendCallback,
    ) -> None:
        """See :meth:`EventLog.submit`."""
        self._log.submit(session_id, events, expected_seq=expected_seq, callback=callback)

    def read(
        self,
        session_id: str,
        from_seq: int = 1,
        to_seq: int | None = None,
        *,
        limit: int | None = None,
    ) -> list[RecordedEvent]:
        """See :meth:`EventLog.read`; counted."""
        records = self._log.read(session_id, from_seq, to_seq, limit=limit)
        if records:
            self._tick(len(records))
        return records

    def iter_events(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None
    ) -> Iterator[RecordedEvent]:
        """See :meth:`EventLog.iter_events`; counted."""
        return self._counted(self._log.iter_events(session_id, from_seq, to_seq))

    def iter_bodies(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None
    ) -> Iterator[tuple[int, Event]]:
        """See :meth:`EventLog.iter_bodies`; counted."""
        return self._counted(self._log.iter_bodies(session_id, from_seq, to_seq))

    def last_seq(self, session_id: str) -> int:
        """See :meth:`EventLog.last_seq`."""
        return self._log.last_seq(session_id)

    def sessions(self) -> list[str]:
        """See :meth:`EventLog.sessions`."""
        return self._log.sessions()

    def read_all(self, after_position: int = 0, *, limit: int | None = None) -> list[RecordedEvent]:
        """See :meth:`EventLog.read_all`; counted."""
        records = self._log.read_all(after_position, limit=limit)
        if records:
            self._tick(len(records))
        return records

    def last_position(self) -> int:
        """See :meth:`EventLog.last_position`."""
        return self._log.last_position()

    def save_snapshot(self, session_id: str, seq: int, data: bytes) -> None:
        """See :meth:`EventLog.save_snapshot`."""
        self._log.save_snapshot(session_id, seq, data)

    def load_snapshot(
        self, session_id: str, at_or_before_seq: int | None = None
    ) -> tuple[int, bytes] | None:
        """See :meth:`EventLog.load_snapshot`."""
        return self._log.load_snapshot(session_id, at_or_before_seq)

    def snapshot_seqs(self, session_id: str) -> list[int]:
        """See :meth:`EventLog.snapshot_seqs`."""
        return self._log.snapshot_seqs(session_id)

    def delete_snapshots(self, session_id: str, seqs: Sequence[int]) -> None:
        """See :meth:`EventLog.delete_snapshots`."""
        self._log.delete_snapshots(session_id, seqs)

    def close(self) -> None:
        """Close the log underneath."""
        self._log.close()


@contextmanager
def reading_progress(log: EventLog, label: str, events: int) -> Iterator[EventLog]:
    """Show a bar on stderr while ``events`` events are read through the log; yield that log.

    Only when stderr is a terminal: a script's or a pipe's stderr keeps the verb's own messages
    alone (its first line is still the verdict, as before), and the log is read directly.
    """
    if not sys.stderr.isatty():
        yield log
        return
    length = max(events, 1)
    with click.progressbar(length=length, label=label, file=sys.stderr, show_pos=True) as bar:

        def tick(count: int) -> None:  # a fork's parent is read again: never past the end
            bar.update(min(count, length - bar.pos))

        yield CountingLog(log, tick)
