"""Salvage: copy a damaged log into a new one, losing only the damaged records.

Each session is read on past its damage (:class:`~ctxledger.replay.standins.SessionWalk`): a
record that cannot be read is replaced by a :class:`~ctxledger.events.RecordLost` at its own
event seq, so every intact record after it is kept, in place. A lost message gets a stand-in
with its seq that says so, and whose role keeps every view valid for a provider (a lost tool
result answers its call); a lost record that held no message is replaced by a ``RecordLost``
without one, which the fold ignores. A record that reads but cannot be folded on top of what a
loss left is replaced the same way (reason ``unfoldable``). The copy is checked as ``verify``
checks it while it is written: a session is cut at a problem that no loss explains (a view
that does not rebuild in an undamaged stretch), so ``verify`` passes on the new log; what a loss
made impossible to check is listed by ``verify`` as lost, never as a mismatch. Events keep their
order, their batches and their commit timestamps.

A session that lost records or was cut short is then recovered as a host recovers it after a
crash (the same domain decision, :class:`~ctxledger.domain.Recover`): tool calls its copy leaves
unanswered get the synthetic ``interrupted`` results.

A fork is copied on top of its parent's copy: a fork whose parent's copy does not reach the fork
point is dropped whole (the original log keeps it; salvage never writes to it). A session whose
first record (``SessionOpened``) or own entry is damaged cannot be folded and is dropped, as is
one whose id an earlier version stored but :func:`~ctxledger.storage.check_session_id` now
refuses (longer than 255 bytes, or with a NUL), saying so.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import msgspec

from ctxledger.domain import CharTokenizer, Recover, SessionState, Tokenizer, decide
from ctxledger.errors import CtxLedgerError, InvalidArgumentError, InvalidSessionIdError
from ctxledger.events import ToolResultSynthesized
from ctxledger.replay._arguments import check_folder, check_source, check_tokenizer
from ctxledger.replay.checks import SessionCheck, fold_with_losses
from ctxledger.replay.loading import fold_session, snapshot_due, snapshots_to_drop
from ctxledger.replay.rebuild import LogSource, open_log
from ctxledger.replay.standins import Replaced, SessionWalk, Unsalvageable, WalkedRecord
from ctxledger.storage import EventLog, LmdbEventLog, check_session_id

__all__ = ["Replaced", "SalvageReport", "SessionSalvage", "salvage"]


class SessionSalvage(msgspec.Struct, frozen=True, kw_only=True):
    """What salvage did with one session.

    Attributes:
        session: The session.
        events: Its events in the damaged log; None when the session's own entry is damaged,
            so that not even its events can be counted (nothing of it is copied).
        kept: Events copied as they were.
        replaced: The records replaced by a ``RecordLost``, in order.
        synthesized: Interrupted tool calls answered after the copy, as recovery does.
        cut_at: The first event seq not copied when the copy stops short, else None.
        reason: Why it stopped short, or what was lost ("" if nothing was).
    """

    session: str
    events: int | None
    kept: int
    replaced: tuple[Replaced, ...] = ()
    synthesized: int = 0
    cut_at: int | None = None
    reason: str = ""

    @property
    def dropped(self) -> int | None:
        """Events of the damaged log not copied at all (None if they cannot be counted)."""
        return None if self.events is None else self.events - self.kept - len(self.replaced)

    @property
    def lost_messages(self) -> list[int]:
        """The seqs of the messages whose records were lost (each has a stand-in)."""
        return [r.message_seq for r in self.replaced if r.message_seq is not None]


class SalvageReport(msgspec.Struct, frozen=True, kw_only=True):
    """The result of :func:`salvage`: one entry per session, in creation order.

    Attributes:
        sessions: What happened to each session.
    """

    sessions: list[SessionSalvage]

    @property
    def complete(self) -> bool:
        """Whether every event was copied as it was (nothing replaced, no session cut)."""
        return all(entry.cut_at is None and not entry.replaced for entry in self.sessions)

    @property
    def kept(self) -> int:
        """Events copied as they were, over all sessions."""
        return sum(entry.kept for entry in self.sessions)

    @property
    def replaced(self) -> int:
        """Records replaced by a ``RecordLost``, over all sessions."""
        return sum(len(entry.replaced) for entry in self.sessions)

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
    """Copy ``source`` into a new LMDB log at ``destination``, replacing only what is damaged.

    See the module docstring for what is kept. The source is only read. The new log is written
    without a flush per batch and flushed once at the end.

    Args:
        source: The damaged log: an LMDB folder (opened read-only) or an open event log.
        destination: A folder that does not exist yet or is empty.
        tokenizer: The tokenizer the host used (chars // 3 by default), for the checks.

    Raises:
        FileExistsError: ``destination`` is not empty.
        InvalidArgumentError: ``source`` is not a folder, a URI or an event log,
            ``destination`` is not a folder path (or names a file), or ``tokenizer`` is not a
            Tokenizer; nothing is opened or created.
        StorageError: The source is not an event log, or the new log cannot be written.
    """
    check_source(source)
    check_folder(destination, "destination")
    check_tokenizer(tokenizer)
    target = Path(destination)
    if target.exists() and not target.is_dir():
        raise InvalidArgumentError("destination", f"{str(target)!r} is a file, not a folder")
    if target.exists() and any(target.iterdir()):
        raise FileExistsError(f"{str(target)!r} is not empty: salvage writes a new log")
    entries: list[SessionSalvage] = []
    with open_log(source) as log:
        stamp = _Stamp()
        copy = LmdbEventLog.open(target, durability="none", clock=stamp)
        try:
            counter = tokenizer or CharTokenizer()
            for session_id in log.sessions():
                entries.append(_Copy(log, copy, stamp, session_id, counter).run())
            entries = _recover(copy, stamp, entries, counter)
            copy.sync()
        finally:
            copy.close()
    return SalvageReport(sessions=entries)


class _Stamp:
    """The copy's clock: the commit time of the batch being copied (the original's)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Copy:
    """One session copied: walked past its damage, checked, written in its original batches."""

    def __init__(
        self,
        log: EventLog,
        copy: LmdbEventLog,
        stamp: _Stamp,
        session_id: str,
        tokenizer: Tokenizer,
    ) -> None:
        self.log, self.copy, self.stamp, self.session_id = log, copy, stamp, session_id
        self.check = SessionCheck(session_id, tokenizer, self._fork_fold)
        self.walk = SessionWalk(log, session_id, self._fork_base)
        self.batch: list[WalkedRecord] = []
        self.written = 0
        self.inherits_losses = False  # a fork built on a parent prefix that lost records

    def run(self) -> SessionSalvage:
        sid = self.session_id
        try:
            events = self.log.last_seq(sid)
        except CtxLedgerError as exc:  # the session's own entry is damaged: nothing is readable
            return SessionSalvage(
                session=sid, events=None, kept=0, cut_at=1, reason=f"unreadable: {exc}"
            )
        try:
            check_session_id(sid)
        except InvalidSessionIdError as exc:  # written before the limits: no append takes it now
            return SessionSalvage(
                session=sid, events=events, kept=0, cut_at=1, reason=f"not copied: {exc}"
            )
        cut_at, reason = None, ""
        try:
            for record in self.walk.records():
                found = len(self.check.mismatches)
                if not self.check.feed(record.seq, record.event) or (
                    len(self.check.mismatches) > found
                ):
                    problem = self.check.mismatches[found]
                    cut_at, reason = record.seq, f"{problem.kind}: {problem.detail}"
                    break
                self._add(record)
        except Unsalvageable as exc:  # its first records: nothing of it can be folded
            if not self.written:
                self.walk.replaced.clear()
                return SessionSalvage(
                    session=sid, events=events, kept=0, cut_at=1, reason=f"not copied: {exc}"
                )
            self.batch = []  # not reached: such records are the first two of a session
            cut_at, reason = self.written + 1, str(exc)
        self._flush()
        replaced = tuple(r for r in self.walk.replaced if cut_at is None or r.seq < cut_at)
        self._copy_snapshot(replaced, cut_at)
        if not reason and replaced:
            reason = _describe(replaced)
        return SessionSalvage(
            session=sid,
            events=events,
            kept=self.written - len(replaced),
            replaced=replaced,
            cut_at=cut_at,
            reason=reason,
        )

    def _fork_base(self, parent_id: str, through: int) -> SessionState:
        """A fork is built on its parent's copy (salvaged before it, in creation order)."""
        return self._fork_fold(parent_id, through)[0]

    def _fork_fold(self, parent_id: str, through: int) -> tuple[SessionState, set[int], int | None]:
        try:
            reached = self.copy.last_seq(parent_id)
        except CtxLedgerError:
            reached = 0
        if reached < through:
            raise Unsalvageable(
                f"fork of {parent_id!r} at event {through}, which the copy of {parent_id!r} "
                "does not reach"
            )
        state, lost, lost_event = fold_with_losses(self.copy, parent_id, through)
        self.inherits_losses = bool(lost) or lost_event is not None
        return state, lost, lost_event

    def _add(self, record: WalkedRecord) -> None:
        if self.batch:
            last = self.batch[-1]
            joined = (
                record.position is not None
                and last.position is not None
                and record.timestamp == last.timestamp
                and record.position == last.position + 1
            )
            if not joined:
                self._flush()
        self.batch.append(record)

    def _flush(self) -> None:
        if not self.batch:
            return
        self.stamp.now = self.batch[0].timestamp
        self.copy.append(
            self.session_id,
            [record.event for record in self.batch],
            expected_seq=self.batch[0].seq - 1,
        )
        self.written += len(self.batch)
        self.batch = []

    def _copy_snapshot(self, replaced: tuple[Replaced, ...], cut_at: int | None) -> None:
        """The newest snapshot before the first change: later ones hold what was lost (a
        fork's snapshots hold its parent's prefix, so none when that prefix lost records)."""
        if self.inherits_losses:
            return
        changed = min([r.seq for r in replaced] + ([cut_at] if cut_at else []), default=None)
        bound = self.written if changed is None else changed - 1
        snapshot = self.log.load_snapshot(self.session_id, bound) if bound else None
        if snapshot is not None:
            self.copy.save_snapshot(self.session_id, *snapshot)


def _describe(replaced: tuple[Replaced, ...]) -> str:
    """``lost messages 24, 31 (events 33, 41); 1 other record lost (event 50)``."""
    messages = [r for r in replaced if r.message_seq is not None]
    others = [r for r in replaced if r.message_seq is None]
    parts = []
    if messages:
        seqs = ", ".join(str(r.message_seq) for r in messages)
        events = ", ".join(str(r.seq) for r in messages)
        parts.append(f"lost message{'s' if len(messages) > 1 else ''} {seqs} (event {events})")
    if others:
        events = ", ".join(str(r.seq) for r in others)
        plural = "s" if len(others) > 1 else ""
        parts.append(f"{len(others)} other record{plural} lost (event {events})")
    return "; ".join(parts)


def _recover(
    copy: LmdbEventLog, stamp: _Stamp, entries: list[SessionSalvage], tokenizer: Tokenizer
) -> list[SessionSalvage]:
    """Recover each session that lost records or was cut short, as a host does after a crash;
    count the tool calls it answered."""
    touched = [e for e in entries if (e.cut_at is not None or e.replaced) and e.kept]
    if not touched:
        return entries
    stamp.now = time.time()  # recovery is written now, like a host's, not at a copied time
    recovered = {entry.session: _recover_one(copy, entry.session, tokenizer) for entry in touched}
    return [
        msgspec.structs.replace(entry, synthesized=recovered.get(entry.session, 0))
        for entry in entries
    ]


def _recover_one(copy: LmdbEventLog, session_id: str, tokenizer: Tokenizer) -> int:
    """Record what the domain's :class:`~ctxledger.domain.Recover` decision repairs (the same
    decision a host takes on activation), and a snapshot where a host would take one."""
    state, last = fold_session(copy, session_id)
    decision = decide(state, Recover(), tokenizer=tokenizer, new_id=_no_id, now=time.time)
    if not decision.events:
        return 0
    records = copy.append(session_id, list(decision.events), expected_seq=last)
    for record in records:
        state.apply(record.event)
    interval = state.config.snapshot_interval
    if snapshot_due(last, records[-1].seq, interval):
        copy.save_snapshot(session_id, records[-1].seq, state.to_snapshot())
        copy.delete_snapshots(
            session_id, snapshots_to_drop(copy.snapshot_seqs(session_id), interval)
        )
    return sum(isinstance(record.event, ToolResultSynthesized) for record in records)


def _no_id() -> str:
    raise AssertionError("recovery creates no compaction or checkpoint")  # pragma: no cover
