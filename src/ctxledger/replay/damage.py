"""Finding damaged records: which sessions of a log can be read to the end, and where not.

A record that fails its checksum or cannot be decoded stops a read of its session, but the log
around it is fine: other sessions, and the session's records before and after it, read as usual.
:func:`read_until_damage` yields a session's events up to the first such record and then raises
an error naming it exactly (its event seq, and the last message read before it);
:func:`read_around_damage` reads on past each damaged record; :func:`find_damage` scans sessions,
and also marks a fork whose parent is damaged before the fork point (the fork cannot be rebuilt
without that prefix).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import msgspec

from ctxledger.errors import CorruptRecordError, EventDecodeError
from ctxledger.events import Event, SessionForked, carried_message
from ctxledger.replay._arguments import check_session_ids, check_source
from ctxledger.replay.rebuild import LogSource, open_log
from ctxledger.storage import EventLog, RecordedEvent

__all__ = [
    "Damage",
    "Unreadable",
    "damaged_before_message",
    "find_damage",
    "locate_damage",
    "read_around_damage",
    "read_until_damage",
]


class Damage(msgspec.Struct, frozen=True, kw_only=True):
    """Why a session cannot be read (or rebuilt) to its end.

    Attributes:
        session: The session.
        seq: The first of its own event seqs that cannot be used: the damaged record, or for a
            fork whose parent is damaged before the fork point, its ``SessionForked`` event.
        detail: The error, for people.
        parent: For a fork damaged through its parent, the parent; else None.
        parent_seq: The parent's first damaged seq, with ``parent``.
        after_message_seq: The last message seq read before the damaged record (0: none), so
            that the damage can be placed among the messages ``ctxledger show`` numbers; for a
            fork damaged through its parent, the parent's.
    """

    session: str
    seq: int
    detail: str
    parent: str | None = None
    parent_seq: int | None = None
    after_message_seq: int | None = None

    def describe(self) -> str:
        """``"damaged at event 152 (after message 75)"``, or for a fork damaged through its
        parent ``"damaged: parent 's2' at event 152 (after message 75)"``."""
        after = ""
        if self.after_message_seq is not None:
            after = f" (after message {self.after_message_seq})"
        if self.parent is not None:
            return f"damaged: parent {self.parent!r} at event {self.parent_seq}{after}"
        return f"damaged at event {self.seq}{after}"


class Unreadable(msgspec.Struct, frozen=True, kw_only=True):
    """A record :func:`read_around_damage` could not read.

    Attributes:
        seq: Its event seq.
        error: Why: a :class:`CorruptRecordError` naming the session and the seq.
    """

    seq: int
    error: CorruptRecordError


def read_until_damage(
    log: EventLog, session_id: str, from_seq: int = 1, to_seq: int | None = None
) -> Iterator[tuple[int, Event]]:
    """``(seq, event)`` of the session's records in order, up to the first damaged one.

    Every readable record before the damaged one is yielded, including those that share a read
    chunk with it.

    Raises:
        EventDecodeError: After the last readable record, when one cannot be read; a
            :class:`CorruptRecordError` naming the session and the exact seq, chained to the
            original error (or that error itself when it names them already). When the read
            starts at the first record it also names the last message read before the damage
            (``after_message_seq``).
    """
    previous = max(from_seq, 1) - 1
    # The last message read (message seqs are absolute: known from the first record, or from
    # the first message read after a later start).
    last_message: int | None = 0 if from_seq <= 1 else None
    try:
        for seq, event in log.iter_bodies(session_id, from_seq, to_seq):
            previous = seq
            last_message = _message_after(event, last_message)
            yield seq, event
        return
    except EventDecodeError as exc:
        error = exc
    bad = locate_damage(log, session_id, previous, error)
    if bad > previous + 1:
        for record in log.read(session_id, previous + 1, bad - 1):
            last_message = _message_after(record.event, last_message)
            yield record.seq, record.event
    raise _named(error, session_id, bad, last_message)


def _message_after(event: Event, last: int | None) -> int | None:
    """The newest message seq once ``event`` is read (a fork's messages follow its fork point)."""
    message = carried_message(event)
    if message is not None and message.seq is not None:
        return message.seq
    if type(event) is SessionForked:
        return event.at_seq
    return last


def _named(
    error: EventDecodeError, session_id: str, bad: int, after: int | None
) -> CorruptRecordError:
    """``error`` as a :class:`CorruptRecordError` naming the session, the seq and, if known,
    the last message read before it."""
    if isinstance(error, CorruptRecordError):
        if error.seq is None:  # the session's own entry, not a record among its messages
            after = None
        if (error.session_id, error.seq, error.after_message_seq) == (session_id, bad, after):
            return error
        reason = error.reason if error.seq is not None else f"its own entry: {error.reason}"
    else:
        reason = str(error)
    named = CorruptRecordError(reason, session_id=session_id, seq=bad, after_message_seq=after)
    named.__cause__ = error
    return named


def read_around_damage(
    log: EventLog, session_id: str, to_seq: int | None = None, *, from_seq: int = 1
) -> Iterator[RecordedEvent | Unreadable]:
    """Every record of the session in order: the readable ones, and an :class:`Unreadable` for
    each record that cannot be read, reading on after it.

    Args:
        log: The event log.
        session_id: The session.
        to_seq: The last event seq to read (the session's last when omitted).
        from_seq: The first event seq to read; from the first, an unreadable record also names
            the last message read before it.

    Raises:
        EventDecodeError: The session's own entry cannot be read (its records cannot be found).
    """
    last = log.last_seq(session_id) if to_seq is None else to_seq
    start = max(from_seq, 1)
    last_message: int | None = 0 if start == 1 else None
    while start <= last:
        previous = start - 1
        try:
            for record in log.iter_events(session_id, start, last):
                previous = record.seq
                last_message = _message_after(record.event, last_message)
                yield record
            return
        except EventDecodeError as exc:
            error = exc
        bad = locate_damage(log, session_id, previous, error)
        if bad > previous + 1:
            for record in log.read(session_id, previous + 1, bad - 1):
                last_message = _message_after(record.event, last_message)
                yield record
        yield Unreadable(seq=bad, error=_named(error, session_id, bad, last_message))
        start = bad + 1


def locate_damage(log: EventLog, session_id: str, after: int, error: EventDecodeError) -> int:
    """The seq of the first record after ``after`` that cannot be read (``error`` came from it).

    An error that names its seq is believed; otherwise (an unknown event tag names none) the
    records are read one at a time from ``after + 1``.
    """
    seq = getattr(error, "seq", None)
    if getattr(error, "session_id", session_id) == session_id and isinstance(seq, int):
        return seq
    probe = after + 1
    while True:
        try:
            if not log.read(session_id, probe, probe):
                return after + 1  # the error was not in this session's records after all
        except EventDecodeError:
            return probe
        probe += 1


def find_damage(
    source: LogSource, session_ids: Iterable[str] | None = None
) -> dict[str, Damage | None]:
    """Read every record of the sessions; return each one's damage, or None where there is none.

    Sessions are scanned in the log's creation order (``session_ids`` narrows the set), so a
    fork's parent is known before the fork: a fork whose parent is damaged at or before its fork
    point is damaged too, at its ``SessionForked`` event.

    Args:
        source: An LMDB folder (opened read-only) or an open event log, as for
            :func:`~ctxledger.replay.verify`.
        session_ids: The sessions to report on (their forks' parents are scanned as needed).

    Raises:
        InvalidArgumentError: ``source`` is not a folder, a URI or an event log, or
            ``session_ids`` is a single string or not iterable; nothing is opened.
        InvalidSessionIdError: An item of ``session_ids`` is not a string.
        StorageError: The folder is not an event log.
    """
    check_source(source)
    wanted = check_session_ids(session_ids)
    with open_log(source) as log:
        return _find_damage(log, wanted)


def _find_damage(log: EventLog, session_ids: Iterable[str] | None) -> dict[str, Damage | None]:
    wanted = None if session_ids is None else set(session_ids)
    found: dict[str, Damage | None] = {}

    def scan(session_id: str) -> Damage | None:
        if session_id in found:
            return found[session_id]
        damage: Damage | None = None
        try:
            for seq, event in read_until_damage(log, session_id):
                if type(event) is SessionForked:
                    cause = scan(event.parent_id)
                    if cause is not None and _before_fork(cause, event):
                        damage = Damage(
                            session=session_id,
                            seq=seq,
                            detail=f"parent {event.parent_id!r} is damaged before the fork "
                            f"point (event {event.parent_event_seq}): {cause.detail}",
                            parent=cause.parent or event.parent_id,
                            parent_seq=cause.parent_seq or cause.seq,
                            after_message_seq=cause.after_message_seq,
                        )
                        break
        except EventDecodeError as exc:
            damage = Damage(
                session=session_id,
                seq=getattr(exc, "seq", None) or 1,
                detail=str(exc),
                after_message_seq=getattr(exc, "after_message_seq", None),
            )
        found[session_id] = damage
        return damage

    for session_id in log.sessions():
        if wanted is None or session_id in wanted:
            scan(session_id)
    return {sid: damage for sid, damage in found.items() if wanted is None or sid in wanted}


def _before_fork(cause: Damage, fork: SessionForked) -> bool:
    """Whether the parent's damage lies in the prefix the fork is built on."""
    return cause.seq <= fork.parent_event_seq


def damaged_before_message(window: Iterable[RecordedEvent | Unreadable]) -> int:
    """Damaged records in ``window`` (the records after a damaged one) before the next readable
    message, that damaged one included."""
    count = 1
    for ahead in window:
        if isinstance(ahead, Unreadable):
            count += 1
        elif carried_message(ahead.event) is not None:
            break
    return count
