"""Copying a whole log from one backend to another (LMDB -> PostgreSQL and back), verified.

:func:`copy_log` replays the source's global order into an empty target: one append per source
commit (a run of events of one session with one commit time), so the target ends up with the
same sessions in the same creation order, the same seqs, the same positions and the same commit
times, and byte-identical event payloads (records are framed again by the target's codec). The
snapshots are copied too. Then both logs are read again side by side and compared.

The target is written with durability ``"none"`` (one commit per source commit would otherwise
pay one flush each) and flushed once at the end, before the copy is reported done.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from ctxledger.errors import StorageError
from ctxledger.events.codec import encode_payload
from ctxledger.storage._open import LogTarget, describe_target, open_log
from ctxledger.storage.protocol import EventLog, RecordedEvent

__all__ = ["CopyReport", "copy_log"]

_PAGE = 2048  # events per read of the source's global order
_DICTIONARY_SAMPLE = 4000  # events copied before the target trains a dictionary of its own


class CopyReport(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`copy_log` copied and checked.

    Attributes:
        sessions: Sessions copied.
        events: Events copied.
        snapshots: Snapshots copied.
        digests: Per session, the SHA-256 of its event payloads in seq order (equal in source
            and target, or the copy would have failed).
    """

    sessions: int
    events: int
    snapshots: int
    digests: dict[str, str]


def copy_log(
    source: LogTarget,
    target: LogTarget,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> CopyReport:
    """Copy every session, event and snapshot of ``source`` into the empty log ``target``.

    Args:
        source: An LMDB folder or a ``postgresql://`` URI; opened read-only.
        target: An LMDB folder or a ``postgresql://`` URI; created if needed, must hold no
            session.
        progress: Called with ``(events copied, events in all)`` after each source commit.

    Returns:
        What was copied; the comparison passed.

    Raises:
        StorageError: ``target`` already holds sessions, a log cannot be opened, or the copy
            differs from the source (the message names the first difference).
        CorruptRecordError: A record of the source is damaged (salvage it first).
    """
    clock = _Clock()
    with (
        open_log(source, readonly=True) as src,
        open_log(target, durability="none", clock=clock) as dst,
    ):
        if dst.sessions():
            raise StorageError(
                f"the target {describe_target(target)} already holds "
                f"{len(dst.sessions())} sessions; copy into an empty log"
            )
        total = src.last_position()
        train = bool(src.stats()["dictionaries"])
        copied = 0
        for run in _commits(src):
            clock.now = run[0].timestamp
            dst.append(run[0].session_id, [r.event for r in run], expected_seq=run[0].seq - 1)
            copied += len(run)
            if train and copied >= _DICTIONARY_SAMPLE:
                dst.train_dictionary()
                train = False
            if progress is not None:
                progress(copied, total)
        snapshots = sum(_copy_snapshots(src, dst, session_id) for session_id in src.sessions())
        dst.sync()
        digests = _compare(src, dst)
    return CopyReport(sessions=len(digests), events=copied, snapshots=snapshots, digests=digests)


class _Clock:
    """The target's clock: the commit time of the source commit being copied."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _commits(log: EventLog) -> Iterator[list[RecordedEvent]]:
    """The source's global order cut into commits: runs of one session and one commit time."""
    run: list[RecordedEvent] = []
    after = 0
    while page := log.read_all(after, limit=_PAGE):
        for recorded in page:
            if run and (
                recorded.session_id != run[-1].session_id or recorded.timestamp != run[-1].timestamp
            ):
                yield run
                run = []
            run.append(recorded)
        after = page[-1].position
    if run:
        yield run


def _copy_snapshots(source: EventLog, target: EventLog, session_id: str) -> int:
    """Copy every valid snapshot of a session, newest first; return how many."""
    count = 0
    found = source.load_snapshot(session_id)
    while found is not None:
        seq, data = found
        target.save_snapshot(session_id, seq, data)
        count += 1
        found = source.load_snapshot(session_id, seq - 1) if seq > 0 else None
    return count


def _compare(source: EventLog, target: EventLog) -> dict[str, str]:
    """Check that ``target`` holds what ``source`` does; return each session's digest.

    Raises:
        StorageError: The first difference found.
    """
    if source.sessions() != target.sessions():
        raise StorageError("the copy's sessions differ from the source's")
    after = 0
    digests: dict[str, Any] = {}  # session id -> its running sha256
    while page := source.read_all(after, limit=_PAGE):
        copied = target.read_all(after, limit=_PAGE)
        for one, other in zip(page, copied, strict=False):
            payload = encode_payload(one.event)
            if (one.session_id, one.seq, one.position, one.timestamp, payload) != (
                other.session_id,
                other.seq,
                other.position,
                other.timestamp,
                encode_payload(other.event),
            ):
                raise StorageError(
                    f"the copy differs from the source at position {one.position} "
                    f"(session {one.session_id!r} seq {one.seq})"
                )
            digests.setdefault(one.session_id, hashlib.sha256()).update(payload)
        if len(copied) != len(page):
            raise StorageError(f"the copy ends before the source, after position {after}")
        after = page[-1].position
    if target.last_position() != after:
        raise StorageError("the copy holds events the source does not")
    for session_id in source.sessions():
        if source.load_snapshot(session_id) != target.load_snapshot(session_id):
            raise StorageError(f"the newest snapshot of session {session_id!r} differs")
    return {session_id: digest.hexdigest() for session_id, digest in digests.items()}
