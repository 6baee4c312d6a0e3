"""The :class:`EventLog` protocol every storage backend implements, and :class:`RecordedEvent`.

Backends are checked by one contract test suite (``tests/contract``); a behaviour described here
and not tested there is a bug in the suite.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Literal, Protocol, TypeAlias, runtime_checkable

import msgspec

from ctxledger.errors import ConfigError
from ctxledger.events.types import Event

__all__ = [
    "DURABILITY_MODES",
    "AppendCallback",
    "Durability",
    "EventLog",
    "RecordedEvent",
    "check_durability",
]

#: How hard an append presses its commit to disk (see :class:`~ctxledger.storage.LmdbEventLog`).
Durability: TypeAlias = Literal["sync", "group", "none"]
DURABILITY_MODES: tuple[str, ...] = ("sync", "group", "none")


def check_durability(durability: object) -> Durability:
    """Return ``durability`` if it names a durability mode.

    Raises:
        ConfigError: It does not (``field`` is ``"durability"``).
    """
    if durability not in DURABILITY_MODES:
        raise ConfigError("durability", f"must be one of {DURABILITY_MODES}, got {durability!r}")
    return durability  # type: ignore[return-value]  # narrowed by the membership test


class RecordedEvent(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """An event as the log recorded it.

    Attributes:
        session_id: The session the event belongs to.
        seq: The event's seq within its session: 1, 2, 3 … dense. This counts events, not
            messages; a message carries its own seq inside ``MessageAppended.message.seq``.
        position: The global, commit-ordered position across all sessions: 1-based, gap-free.
        timestamp: Unix time of the commit that recorded the event.
        event: The event.
    """

    session_id: str
    seq: int
    position: int
    timestamp: float
    event: Event


#: Called once with the outcome of a :meth:`EventLog.submit`: ``(records, None)`` when the batch
#: is durable, ``(None, error)`` when it was not recorded.
AppendCallback: TypeAlias = Callable[[list[RecordedEvent] | None, BaseException | None], None]


@runtime_checkable
class EventLog(Protocol):
    """An append-only, durable log of events, partitioned into sessions.

    Implementations are thread-safe: any method may be called from many threads at once.
    """

    def append(
        self, session_id: str, events: Sequence[Event], *, expected_seq: int
    ) -> list[RecordedEvent]:
        """Append ``events`` to ``session_id`` atomically, creating the session if needed.

        Args:
            session_id: The session.
            events: The batch; all of it is recorded, or none of it.
            expected_seq: The session's last event seq as the caller saw it (0 for a new session).

        Returns:
            The recorded events, with their seqs, positions and commit timestamp.

        Raises:
            VersionConflictError: The session's last seq is not ``expected_seq``; nothing is
                written.
            StorageError: The backend failed or the log is closed.
        """
        ...

    async def aappend(
        self, session_id: str, events: Sequence[Event], *, expected_seq: int
    ) -> list[RecordedEvent]:
        """:meth:`append` for a caller on an event loop: awaits durability instead of blocking.

        Cancelling the awaiting task does not withdraw the append: it may still be recorded.
        """
        ...

    def submit(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        callback: AppendCallback,
    ) -> None:
        """Queue an append like :meth:`append` and return at once; ``callback`` gets the outcome.

        For a writer that must not block on durability (the runtime's history actors). The
        callback is called exactly once, after the commit that made the batch durable, or with
        the error that kept it out (a version conflict, a storage failure, the log closing). It
        may run on the log's writer thread, or on the caller's before ``submit`` returns: it must
        be quick and must not raise. Batches submitted from one thread are committed in order.

        Raises:
            TypeError: An argument has the wrong type (checked before anything is queued).
            ValueError: An argument has a wrong value (likewise).
        """
        ...

    def read(
        self,
        session_id: str,
        from_seq: int = 1,
        to_seq: int | None = None,
        *,
        limit: int | None = None,
    ) -> list[RecordedEvent]:
        """Return the session's events with ``from_seq <= seq <= to_seq``, at most ``limit``.

        An unknown session has no events.

        Raises:
            CorruptRecordError: A stored record is damaged; it names the session and seq.
            UnknownEventTypeError: A stored event has a tag no event type or upcaster knows.
        """
        ...

    def iter_events(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None
    ) -> Iterator[RecordedEvent]:
        """Stream the session's events with ``from_seq <= seq <= to_seq`` in bounded memory.

        Raises:
            CorruptRecordError: A stored record is damaged; it names the session and seq.
        """
        ...

    def iter_bodies(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None
    ) -> Iterator[tuple[int, Event]]:
        """Like :meth:`iter_events`, but only ``(seq, event)``: what a fold needs, and faster.

        Raises:
            CorruptRecordError: A stored record is damaged; it names the session and seq.
        """
        ...

    def last_seq(self, session_id: str) -> int:
        """Return the seq of the session's last event, 0 if it has none."""
        ...

    def sessions(self) -> list[str]:
        """Return every session id, in creation order."""
        ...

    def read_all(self, after_position: int = 0, *, limit: int | None = None) -> list[RecordedEvent]:
        """Return events of all sessions with position > ``after_position``, in commit order.

        Raises:
            CorruptRecordError: A stored record is damaged; it names the session and seq.
        """
        ...

    def last_position(self) -> int:
        """Return the position of the last recorded event, 0 for an empty log."""
        ...

    def save_snapshot(self, session_id: str, seq: int, data: bytes) -> None:
        """Store an opaque projection snapshot taken after event ``seq``, with a checksum.

        Raises:
            UnknownSessionError: The session has no events.
            ValueError: ``seq`` is negative.
        """
        ...

    def load_snapshot(
        self, session_id: str, at_or_before_seq: int | None = None
    ) -> tuple[int, bytes] | None:
        """Return ``(seq, data)`` of the newest valid snapshot with seq <= the bound, if any.

        Snapshots that fail their checksum are skipped.
        """
        ...

    def close(self) -> None:
        """Release the log; later calls raise :class:`~ctxledger.errors.StorageError`."""
        ...
