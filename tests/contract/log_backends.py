"""The backends the EventLog contract suite runs against."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import lmdb

from ctxledger.storage import EventLog, LmdbEventLog, MemoryEventLog, PostgresEventLog
from ctxledger.storage._layout import pack_pair
from pg_fixtures import PgServer


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


class PostgresBackend(Backend):
    """A real PostgreSQL server, one fresh schema per test."""

    name = "postgres"
    # An index entry holds at most 2704 bytes: a long id that does not compress is refused by
    # the server itself (SQLSTATE 54000) while the group's sessions are inserted.
    storage_refused_id = base64.b64encode(hashlib.shake_256(b"ctxledger").digest(2600)).decode()

    def __init__(self, server: PgServer, schema: str) -> None:
        self.server = server
        self.schema = schema
        self._fresh: PostgresEventLog | None = None

    def open(self) -> EventLog:
        """Open the log in the test's schema."""
        return PostgresEventLog.open(self.server.dsn, schema=self.schema, durability="sync")

    def reopen(self, log: EventLog) -> EventLog:
        """Close the log (all its connections) and open the schema again."""
        log.close()
        return self.open()

    def fresh(self) -> EventLog:
        """An empty log in a second schema of the test's, emptied for each call (the caller
        closes the previous one first)."""
        schema = f"{self.schema}_fresh"
        if self._fresh is None:
            self._fresh = PostgresEventLog.open(self.server.dsn, schema=schema)  # creates it
            self._fresh.close()
        else:
            self.server.empty_log(schema)
        return PostgresEventLog.open(self.server.dsn, schema=schema, durability="sync")

    def corrupt_snapshot(self, log: EventLog, session_id: str, seq: int) -> EventLog:
        """Flip a byte of the stored snapshot row with plain SQL (the log stays open)."""
        flip_byte(self.server.dsn, self.schema, "snapshots", session_id, seq)
        return log


def flip_byte(
    dsn: str, schema: str, table: str, session_id: str, seq: int, offset: int = -1
) -> None:
    """XOR one byte of the ``record`` of a row of ``table`` (``offset`` from the end if < 0)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        done = conn.execute(
            f"UPDATE {schema}.{table} SET record = set_byte(record, i, get_byte(record, i) # 90) "
            f"FROM (SELECT CASE WHEN %s < 0 THEN length(r.record) + %s ELSE %s END AS i, "
            f"r.session AS n, r.seq AS q FROM {schema}.{table} r "
            f"JOIN {schema}.sessions s ON s.number = r.session "
            f"WHERE s.session_id = %s AND r.seq = %s) AS target "
            f"WHERE session = target.n AND seq = target.q",
            [offset, offset, offset, session_id, seq],
        ).rowcount
    assert done == 1, f"no {table} row for {session_id!r} seq {seq}"


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
