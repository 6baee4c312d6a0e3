"""The backends the EventLog contract suite runs against."""

from __future__ import annotations

from pathlib import Path

import lmdb

from ctxledger.storage import EventLog, LmdbEventLog, MemoryEventLog
from ctxledger.storage._layout import pack_pair


class Backend:
    """Opens one kind of log for a test, and knows how to damage its stored snapshots."""

    name = "abstract"
    #: A session id that passes :func:`check_session_id` once ``MAX_SESSION_ID_BYTES`` is raised
    #: (tests raise it with monkeypatch) but that the storage itself refuses mid-write, so that
    #: fault isolation inside a shared transaction is tested; None if the backend has no such
    #: limit of its own.
    storage_refused_id: str | None = None

    def open(self) -> EventLog:
        """Return an empty log (or the same log again after :meth:`reopen`)."""
        raise NotImplementedError

    def reopen(self, log: EventLog) -> EventLog:
        """Close ``log`` and open it again, as after a restart (a memory log is returned as is)."""
        raise NotImplementedError

    def fresh(self) -> EventLog:
        """Return a new, empty log each call (for property tests: one per example)."""
        raise NotImplementedError

    def corrupt_snapshot(self, log: EventLog, session_id: str, seq: int) -> EventLog:
        """Flip a byte of a stored snapshot; return the log to use from now on."""
        raise NotImplementedError


class MemoryBackend(Backend):
    """The in-memory reference."""

    name = "memory"

    def open(self) -> EventLog:
        """Return a fresh memory log."""
        return MemoryEventLog()

    def reopen(self, log: EventLog) -> EventLog:
        """Nothing survives a memory log's close: the same, still open log stands in."""
        return log

    def fresh(self) -> EventLog:
        """Return a fresh memory log."""
        return MemoryEventLog()

    def corrupt_snapshot(self, log: EventLog, session_id: str, seq: int) -> EventLog:
        """Flip a byte in the framed snapshot held by the memory log."""
        assert isinstance(log, MemoryEventLog)
        stored = log._snapshots[session_id]
        stored[seq] = _flip(stored[seq])
        return log


class LmdbBackend(Backend):
    """A real LMDB environment under the test's tmp_path."""

    name = "lmdb"
    storage_refused_id = "r" * 600  # LMDB keys hold at most 511 bytes: MDB_BAD_VALSIZE

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fresh = 0

    def open(self) -> EventLog:
        """Open the log in the test's directory."""
        return LmdbEventLog.open(self.path / "log", durability="sync")

    def reopen(self, log: EventLog) -> EventLog:
        """Close the environment and open the directory again."""
        log.close()
        return self.open()

    def fresh(self) -> EventLog:
        """Open a log in a new directory under the test's one."""
        self._fresh += 1
        return LmdbEventLog.open(self.path / f"fresh-{self._fresh}", durability="sync")

    def corrupt_snapshot(self, log: EventLog, session_id: str, seq: int) -> EventLog:
        """Close the log, flip a byte of the snapshot with raw lmdb, and reopen."""
        assert isinstance(log, LmdbEventLog)
        number = _session_number(log, session_id)
        log.close()
        with _raw_env(self.path / "log") as env:
            snapshots = env.open_db(b"snapshots")
            with env.begin(write=True, db=snapshots) as txn:
                key = pack_pair(number, seq)
                txn.put(key, _flip(txn.get(key)))
        return self.open()


def _session_number(log: LmdbEventLog, session_id: str) -> int:
    with log._reading() as txn:
        number = log._number(txn, session_id)
    assert number is not None
    return number


def _raw_env(path: Path) -> lmdb.Environment:
    return lmdb.open(str(path), max_dbs=16)


def _flip(record: bytes, offset: int = -1) -> bytes:
    damaged = bytearray(record)
    damaged[offset] ^= 0x5A
    return bytes(damaged)
