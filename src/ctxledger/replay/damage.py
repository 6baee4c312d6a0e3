"""Finding damaged records: which sessions of a log can be read to the end, and where not.

A record that fails its checksum or cannot be decoded stops a read of its session, but the log
around it is fine: other sessions, and the session's records before it, read as usual.
:func:`read_until_damage` yields a session's events up to the first such record and then raises
an error naming it exactly; :func:`find_damage` scans sessions with it, and also marks a fork
whose parent is damaged before the fork point (the fork cannot be rebuilt without that prefix).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import msgspec

from ctxledger.errors import CorruptRecordError, EventDecodeError
from ctxledger.events import Event, SessionForked
from ctxledger.storage import EventLog

__all__ = ["Damage", "find_damage", "read_until_damage"]


class Damage(msgspec.Struct, frozen=True, kw_only=True):
    """Why a session cannot be read (or rebuilt) to its end.

    Attributes:
        session: The session.
        seq: The first of its own event seqs that cannot be used: the damaged record, or for a
            fork whose parent is damaged before the fork point, its ``SessionForked`` event.
        detail: The error, for people.
        parent: For a fork damaged through its parent, the parent; else None.
        parent_seq: The parent's first damaged seq, with ``parent``.
    """

    session: str
    seq: int
    detail: str
    parent: str | None = None
    parent_seq: int | None = None

    def describe(self) -> str:
        """``"damaged at seq 152"`` or ``"damaged: parent 's2' at seq 152"``."""
        if self.parent is not None:
            return f"damaged: parent {self.parent!r} at seq {self.parent_seq}"
        return f"damaged at seq {self.seq}"


def read_until_damage(
    log: EventLog, session_id: str, from_seq: int = 1, to_seq: int | None = None
) -> Iterator[tuple[int, Event]]:
    """``(seq, event)`` of the session's records in order, up to the first damaged one.

    Every readable record before the damaged one is yielded, including those that share a read
    chunk with it.

    Raises:
        EventDecodeError: After the last readable record, when one cannot be read; a
            :class:`CorruptRecordError` naming the session and the exact seq, chained to the
            original error (or that error itself when it names them already).
    """
    previous = max(from_seq, 1) - 1
    try:
        for seq, event in log.iter_bodies(session_id, from_seq, to_seq):
            previous = seq
            yield seq, event
        return
    except EventDecodeError as exc:
        error = exc
    bad = locate_damage(log, session_id, previous, error)
    if bad > previous + 1:
        for record in log.read(session_id, previous + 1, bad - 1):
            yield record.seq, record.event
    if isinstance(error, CorruptRecordError):
        if (error.session_id, error.seq) == (session_id, bad):
            raise error
        reason = error.reason if error.seq is not None else f"its own entry: {error.reason}"
        raise CorruptRecordError(reason, session_id=session_id, seq=bad) from error
    raise CorruptRecordError(str(error), session_id=session_id, seq=bad) from error


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
    log: EventLog, session_ids: Iterable[str] | None = None
) -> dict[str, Damage | None]:
    """Read every record of the sessions; return each one's damage, or None where there is none.

    Sessions are scanned in the log's creation order (``session_ids`` narrows the set), so a
    fork's parent is known before the fork: a fork whose parent is damaged at or before its fork
    point is damaged too, at its ``SessionForked`` event.

    Args:
        log: The event log.
        session_ids: The sessions to report on (their forks' parents are scanned as needed).
    """
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
                        )
                        break
        except EventDecodeError as exc:
            damage = Damage(
                session=session_id, seq=getattr(exc, "seq", None) or 1, detail=str(exc)
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
