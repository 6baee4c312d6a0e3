"""The PostgreSQL server itself crashes (immediate shutdown) under appends, then comes back.

The test runs its own throwaway cluster, so that killing it disturbs no other test. Writers keep
appending through ONE open log the whole time; nothing is reopened.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from ctxledger.errors import StorageError
from ctxledger.events.types import UsageReported
from ctxledger.storage import PostgresEventLog
from ctxledger.testing.postgres import TemporaryCluster
from pg_fixtures import PgServer

pytestmark = pytest.mark.postgres

WRITERS = 4


@pytest.fixture
def cluster(pg_server: PgServer) -> Iterator[TemporaryCluster]:
    """A cluster of this test's own (skipped where the suite uses CTXLEDGER_PG_DSN)."""
    if pg_server.cluster is None:
        pytest.skip("kills the server: needs the clusters the tests start (CTXLEDGER_PG_DSN set)")
    with TemporaryCluster() as own:
        yield own


class Writer(threading.Thread):
    """Appends to its own session until stopped; remembers what was acknowledged and errors.

    After an error it cannot know whether its append committed (the server died around the
    commit), so it reads the session's last seq again, once the server answers, and goes on.
    """

    def __init__(self, log: PostgresEventLog, index: int, stop: threading.Event) -> None:
        super().__init__()
        self.log, self.index, self.stop = log, index, stop
        self.session_id = f"writer-{index}"
        self.acked: dict[int, int] = {}  # seq -> the token appended there
        self.errors: list[StorageError] = []
        self.acked_after_errors = 0

    def run(self) -> None:
        token = self.index * 1_000_000
        expected = 0
        while not self.stop.is_set():
            token += 1
            try:
                recorded = self.log.append(
                    self.session_id, [UsageReported(prompt_tokens=token)], expected_seq=expected
                )
            except StorageError as exc:
                self.errors.append(exc)
                expected = self._last_seq_when_back()
                continue
            expected = recorded[0].seq
            self.acked[expected] = token
            if self.errors:
                self.acked_after_errors += 1

    def _last_seq_when_back(self) -> int:
        while True:
            try:
                return self.log.last_seq(self.session_id)
            except StorageError:
                time.sleep(0.05)


def wait_for(condition: object, what: str, timeout: float = 120) -> None:
    """Poll ``condition()`` until true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_acknowledged_appends_survive_a_server_crash_and_the_log_recovers(
    cluster: TemporaryCluster,
) -> None:
    """Immediate shutdown during appends: clear StorageErrors during the outage, every
    acknowledged append still there afterwards, and the same log appends again."""
    log = PostgresEventLog.open(cluster.create_database(), timeout=2)
    stop = threading.Event()
    writers = [Writer(log, index, stop) for index in range(WRITERS)]
    try:
        for writer in writers:
            writer.start()
        wait_for(lambda: all(len(w.acked) >= 20 for w in writers), "appends before the crash")
        cluster.stop("immediate")
        wait_for(lambda: all(w.errors for w in writers), "every writer to see the outage")
        with pytest.raises(StorageError, match="PostgreSQL"):
            log.read_all()
        cluster.start()
        wait_for(
            lambda: all(w.acked_after_errors >= 20 for w in writers), "appends after the restart"
        )
    finally:
        stop.set()
        for writer in writers:
            writer.join()
    try:
        for writer in writers:
            recorded = log.read(writer.session_id)
            assert [r.seq for r in recorded] == list(range(1, len(recorded) + 1))
            stored = {r.seq: r.event.prompt_tokens for r in recorded}  # type: ignore[union-attr]
            assert {seq: stored.get(seq) for seq in writer.acked} == writer.acked
            assert all("PostgreSQL" in str(error) for error in writer.errors)
        everything = log.read_all()
        assert [r.position for r in everything] == list(range(1, len(everything) + 1))
    finally:
        log.close()
