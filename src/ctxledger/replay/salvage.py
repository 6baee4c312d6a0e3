"""Salvage: copy everything of a damaged log that still verifies into a new log.

Each session is copied up to its first problem that :func:`~ctxledger.replay.verify` finds (a
record that cannot be read, a view or checkpoint that does not rebuild, ...), so ``verify``
passes on the new log. Its events keep their order, their batches and their commit timestamps.
A session cut short is then opened once, as after a crash: tool calls its kept events leave
unanswered get the runtime's synthetic ``interrupted`` results.

A fork is copied only if the copy of its parent reaches the fork point: a fork whose parent was
cut before the event it forked at is dropped whole, because its own events only make sense on
top of that prefix (the original log keeps them; salvage never writes to it). A session whose id
an earlier version stored but :func:`~ctxledger.storage.check_session_id` now refuses (longer
than 255 bytes, or with a NUL) cannot be appended to the new log and is dropped, saying so.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import msgspec

from ctxledger.domain import Tokenizer
from ctxledger.errors import CtxLedgerError, EventDecodeError, InvalidSessionIdError
from ctxledger.events import SessionForked
from ctxledger.replay.rebuild import LogSource, open_log
from ctxledger.replay.verify import verify
from ctxledger.storage import EventLog, LmdbEventLog, RecordedEvent, check_session_id

__all__ = ["SalvageReport", "SessionSalvage", "salvage"]


class SessionSalvage(msgspec.Struct, frozen=True, kw_only=True):
    """What salvage did with one session.

    Attributes:
        session: The session.
        events: Its events in the damaged log; None when the session's own entry is damaged,
            so that not even its events can be counted (nothing of it is copied).
        kept: Events copied (seqs ``1..kept``).
        synthesized: Interrupted tool calls answered after the cut, as recovery does.
        cut_at: The first event seq not copied, None if the session was copied whole.
        reason: Why the rest was dropped ("" if nothing was).
    """

    session: str
    events: int | None
    kept: int
    synthesized: int = 0
    cut_at: int | None = None
    reason: str = ""

    @property
    def dropped(self) -> int | None:
        """Events of the damaged log not copied (None if they cannot be counted)."""
        return None if self.events is None else self.events - self.kept


class SalvageReport(msgspec.Struct, frozen=True, kw_only=True):
    """The result of :func:`salvage`: one entry per session, in creation order.

    Attributes:
        sessions: What happened to each session.
    """

    sessions: list[SessionSalvage]

    @property
    def complete(self) -> bool:
        """Whether every event was copied (no session was cut)."""
        return all(entry.cut_at is None for entry in self.sessions)

    @property
    def kept(self) -> int:
        """Events copied, over all sessions."""
        return sum(entry.kept for entry in self.sessions)

    @property
    def dropped(self) -> int:
        """Events not copied, over all sessions whose events can be counted."""
        return sum(entry.dropped or 0 for entry in self.sessions)


def salvage(
    source: LogSource,
    destination: str | os.PathLike[str],
    *,
    tokenizer: Tokenizer | None = None,
) -> SalvageReport:
    """Copy every event of ``source`` that still verifies into a new LMDB log at ``destination``.

    See the module docstring for what is kept. The source is only read. The new log is written
    without a flush per batch and flushed once at the end.

    Args:
        source: The damaged log: an LMDB folder (opened read-only) or an open event log.
        destination: A folder that does not exist yet or is empty.
        tokenizer: The tokenizer the host used (chars // 3 by default), for ``verify``.

    Raises:
        FileExistsError: ``destination`` is not empty.
        StorageError: The new log cannot be written.
    """
    target = Path(destination)
    if target.exists() and any(target.iterdir()):
        raise FileExistsError(f"{str(target)!r} is not empty: salvage writes a new log")
    stamp = [0.0]  # the commit time of the batch being copied: the copy keeps the original's
    entries: list[SessionSalvage] = []
    with open_log(source) as log:
        copy = LmdbEventLog.open(target, durability="none", clock=lambda: stamp[0])
        try:
            kept: dict[str, int] = {}
            for session_id in log.sessions():
                entry = _copy_session(log, copy, session_id, kept, stamp, tokenizer)
                kept[session_id] = entry.kept
                entries.append(entry)
            copy.sync()
        finally:
            copy.close()
    return SalvageReport(sessions=_recover(target, entries))


def _copy_session(
    log: EventLog,
    copy: LmdbEventLog,
    session_id: str,
    kept: dict[str, int],
    stamp: list[float],
    tokenizer: Tokenizer | None,
) -> SessionSalvage:
    try:
        events = log.last_seq(session_id)
        mismatches = verify(log, session_id, tokenizer=tokenizer).mismatches
    except CtxLedgerError as exc:  # the session's own entry is damaged: nothing is readable
        return SessionSalvage(
            session=session_id, events=None, kept=0, cut_at=1, reason=f"unreadable: {exc}"
        )
    try:
        check_session_id(session_id)
    except InvalidSessionIdError as exc:  # written before the limits: no append takes it now
        return SessionSalvage(
            session=session_id, events=events, kept=0, cut_at=1, reason=f"not copied: {exc}"
        )
    first = min(mismatches, key=lambda mismatch: mismatch.seq, default=None)
    through = events if first is None else first.seq - 1
    reason = "" if first is None else f"{first.kind} at seq {first.seq}: {first.detail}"
    fork = next(
        (event for _, event in _bodies(log, session_id, 2) if isinstance(event, SessionForked)),
        None,
    )
    if fork is not None and kept.get(fork.parent_id, 0) < fork.parent_event_seq:
        return SessionSalvage(
            session=session_id,
            events=events,
            kept=0,
            cut_at=1,
            reason=f"fork of {fork.parent_id!r} at event {fork.parent_event_seq}, which the "
            f"copy of {fork.parent_id!r} does not reach" + (f" ({reason})" if reason else ""),
        )
    for batch in _batches(log.iter_events(session_id, 1, through)):
        stamp[0] = batch[0].timestamp
        copy.append(session_id, [record.event for record in batch], expected_seq=batch[0].seq - 1)
    snapshot = log.load_snapshot(session_id, through) if through else None
    if snapshot is not None:
        copy.save_snapshot(session_id, *snapshot)
    return SessionSalvage(
        session=session_id,
        events=events,
        kept=through,
        cut_at=None if first is None else first.seq,
        reason=reason,
    )


def _bodies(log: EventLog, session_id: str, count: int) -> Iterator[tuple[int, object]]:
    """The first ``count`` events of a session, or fewer if they cannot be read."""
    try:
        yield from ((r.seq, r.event) for r in log.read(session_id, 1, count))
    except EventDecodeError:
        return


def _batches(records: Iterator[RecordedEvent]) -> Iterator[list[RecordedEvent]]:
    """Group records as they were appended: one commit time, consecutive positions."""
    batch: list[RecordedEvent] = []
    for record in records:
        if batch and (
            record.timestamp != batch[-1].timestamp or record.position != batch[-1].position + 1
        ):
            yield batch
            batch = []
        batch.append(record)
    if batch:
        yield batch


def _recover(target: Path, entries: list[SessionSalvage]) -> list[SessionSalvage]:
    """Open each session cut short once, as after a crash; count the tool calls it answered."""
    cut = [entry for entry in entries if entry.cut_at is not None and entry.kept]
    if not cut:
        return entries
    from ctxledger.runtime import Host  # the runtime's own recovery; imported only when needed

    recovered: dict[str, int] = {}
    with Host.open(target) as host:
        for entry in cut:
            host.session(entry.session).history()  # activation answers open tool calls
            recovered[entry.session] = host.log.last_seq(entry.session) - entry.kept
    return [
        msgspec.structs.replace(entry, synthesized=recovered.get(entry.session, 0))
        for entry in entries
    ]
