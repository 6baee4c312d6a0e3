"""The :class:`EventLog` protocol every storage backend implements, and :class:`RecordedEvent`.

Backends are checked by one contract test suite, published as
:class:`ctxledger.testing.EventLogContract` so that a backend of your own runs it too; a
behaviour described here and not tested there is a bug in the suite. The limits every backend
must be able to store (:data:`MAX_SESSION_ID_BYTES`) are checked by :func:`check_session_id`,
which backends call before they queue or write anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Literal, Protocol, TypeAlias, runtime_checkable

import msgspec

from ctxledger.errors import ConfigError, InvalidSessionIdError
from ctxledger.events.types import Event

__all__ = [
    "DURABILITY_MODES",
    "MAX_SESSION_ID_BYTES",
    "AppendCallback",
    "Durability",
    "EventLog",
    "RecordedEvent",
    "check_durability",
    "check_session_id",
]

#: The longest session id, in bytes of UTF-8, that every backend stores. LMDB keys may hold 511
#: bytes and PostgreSQL ``text`` any length, but an id is a name, not a payload: 255 bytes leave
#: room for prefixes a backend adds to its keys and are far more than any id generator uses.
MAX_SESSION_ID_BYTES = 255

# Ids that passed check_session_id, with the limit they passed under.
_checked: dict[str, int] = {}

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


def check_session_id(session_id: object) -> str:
    """Return ``session_id`` if every backend can store it as a session id.

    A session id is a non-empty ``str`` of at most :data:`MAX_SESSION_ID_BYTES` bytes once
    encoded as UTF-8, with no NUL character (PostgreSQL ``text`` cannot hold one) and no lone
    surrogate (it has no UTF-8 encoding). :meth:`EventLog.append` calls this before anything is
    queued; hosts call it before they create a session.

    Raises:
        TypeError: ``session_id`` is not a string.
        InvalidSessionIdError: It breaks one of the rules; ``limit`` says which.
    """
    if type(session_id) is str and _checked.get(session_id) == MAX_SESSION_ID_BYTES:
        return session_id  # an id comes back with every append: it was checked already
    if not isinstance(session_id, str):
        raise TypeError(f"session_id must be a string, got {type(session_id).__name__}")
    if not session_id:
        raise InvalidSessionIdError("session_id must not be empty", limit="not empty")
    shown = repr(session_id[:40]) + ("…" if len(session_id) > 40 else "")
    if "\0" in session_id:
        raise InvalidSessionIdError(
            f"session_id {shown} holds a NUL character", limit="no NUL character"
        )
    if session_id.isascii():
        size = len(session_id)
    else:
        try:
            size = len(session_id.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise InvalidSessionIdError(
                f"session_id {shown} is not valid UTF-8: lone surrogate "
                f"{session_id[exc.start]!r} at index {exc.start}",
                limit="valid UTF-8",
            ) from None
    if size > MAX_SESSION_ID_BYTES:
        raise InvalidSessionIdError(
            f"session_id {shown} is {size} bytes of UTF-8; the limit is {MAX_SESSION_ID_BYTES}",
            limit=f"at most {MAX_SESSION_ID_BYTES} bytes of UTF-8",
        )
    if len(_checked) >= 1 << 16:
        _checked.clear()
    _checked[session_id] = MAX_SESSION_ID_BYTES
    return session_id


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

    Fault isolation (every backend, however it batches writes):

    * A request that fails for a reason of its own fails alone, and writes nothing: a session id
      :func:`check_session_id` refuses (:class:`~ctxledger.errors.InvalidSessionIdError`), an
      event that cannot be encoded, metadata that cannot be encoded, a key or value the backend
      refuses (:class:`~ctxledger.errors.InvalidMessageError`), a batch that is not events
      (``TypeError``), a stale ``expected_seq``
      (:class:`~ctxledger.errors.VersionConflictError`). The argument checks run before
      anything is queued. Every other request, including those the backend wrote in the same
      transaction or group commit, is recorded exactly as if it had arrived alone: same
      result, same seqs, same durability. A backend that finds such a failure only while
      writing a shared transaction rolls the transaction back and writes it again without the
      failed request.
    * Only a failure of the storage itself (disk full, an I/O error, a map or file that cannot
      grow, a lost connection) may fail several requests at once. Each of them raises
      :class:`~ctxledger.errors.StorageError` naming the cause, and nothing of the transaction
      they shared is visible to any reader, then or after a restart. Once the cause is gone
      (space freed), the same open log accepts appends again without being reopened.
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
            InvalidSessionIdError: ``session_id`` breaks :func:`check_session_id`; nothing is
                written.
            InvalidMessageError: An event cannot be encoded (for example message metadata that
                msgpack cannot represent) or the backend refuses to store it; nothing is
                written, and no other append fails because of it.
            TypeError: A batch item is not an event.
            StorageError: The storage failed (the error names the cause: disk full, I/O, ...)
                or the log is closed; nothing of the batch is visible.
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
        Within :func:`ctxledger.storage.queued_commits` a backend that commits a lone batch on
        the caller's thread (LMDB) queues it instead, to be grouped with the next ones.

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

    def snapshot_seqs(self, session_id: str) -> list[int]:
        """Return the seqs of the session's stored snapshots, ascending (none: ``[]``)."""
        ...

    def delete_snapshots(self, session_id: str, seqs: Sequence[int]) -> None:
        """Delete the session's snapshots taken after events ``seqs`` (missing ones are ignored).

        Snapshots are an optimisation: a fold starts from the newest one at or before its bound,
        or from the first event. Hosts keep a bounded set of them (see
        :func:`ctxledger.replay.loading.snapshots_to_drop`).
        """
        ...

    def close(self) -> None:
        """Release the log; later calls raise :class:`~ctxledger.errors.StorageError`."""
        ...
