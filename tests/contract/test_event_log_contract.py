"""The EventLog contract (``ctxledger.testing.EventLogContract``) run against every backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from log_backends import LmdbBackend, MemoryBackend, PostgresBackend

from ctxledger.storage import EventLog, LmdbEventLog, MemoryEventLog, PostgresEventLog
from ctxledger.testing import EventLogContract
from pg_fixtures import PgServer


class TestMemoryEventLog(EventLogContract):
    """The in-memory reference (it has no restart)."""

    def make_log(self, tmp_path: Path) -> EventLog:
        """A fresh memory log."""
        return MemoryEventLog()

    def damage_snapshot(self, log: EventLog, session_id: str, seq: int) -> EventLog:
        """Flip a byte of the framed snapshot the memory log holds."""
        return MemoryBackend().corrupt_snapshot(log, session_id, seq)


class TestLmdbEventLog(EventLogContract):
    """A real LMDB environment in the case's folder, durability "sync"."""

    def make_log(self, tmp_path: Path) -> EventLog:
        """Open the log in the case's folder."""
        return LmdbEventLog.open(tmp_path / "log", durability="sync")

    def reopen_log(self, log: EventLog, tmp_path: Path) -> EventLog:
        """Close the environment and open the folder again."""
        log.close()
        return self.make_log(tmp_path)

    def damage_snapshot(self, log: EventLog, session_id: str, seq: int) -> EventLog:
        """Close the log, flip a byte of the snapshot with raw lmdb, and reopen it."""
        assert isinstance(log, LmdbEventLog)
        return LmdbBackend(log.path.parent).corrupt_snapshot(log, session_id, seq)


@pytest.mark.postgres
class TestPostgresEventLog(EventLogContract):
    """A real PostgreSQL server, in a fresh schema per case."""

    @pytest.fixture(autouse=True)
    def _schema(self, pg_server: PgServer, pg_schema: str) -> Iterator[None]:
        self.backend = PostgresBackend(pg_server, pg_schema)
        yield

    def make_log(self, tmp_path: Path) -> EventLog:
        """Open the log in the case's schema."""
        return PostgresEventLog.open(
            self.backend.server.dsn, schema=self.backend.schema, durability="sync"
        )

    def reopen_log(self, log: EventLog, tmp_path: Path) -> EventLog:
        """Close the log (all its connections) and open the schema again."""
        log.close()
        return self.make_log(tmp_path)

    def damage_snapshot(self, log: EventLog, session_id: str, seq: int) -> EventLog:
        """Flip a byte of the stored snapshot row with plain SQL (the log stays open)."""
        return self.backend.corrupt_snapshot(log, session_id, seq)
