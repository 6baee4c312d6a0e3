"""The global position on PostgreSQL: two processes of many threads append to many sessions
while a reader tails all sessions by position."""

from __future__ import annotations

import bisect
import contextlib
import json
import sys
import threading
from pathlib import Path

import pytest

from ctxledger.storage import PostgresEventLog, RecordedEvent, tail
from ctxledger.testing.processes import child_process
from pg_fixtures import PgServer

pytestmark = pytest.mark.postgres

PROCESSES, THREADS, SESSIONS, APPENDS = 2, 8, 3, 12
CHILD = Path(__file__).with_name("pg_order_child.py")


def test_tailing_reader_sees_every_event_once_in_commit_order(
    pg_server: PgServer, pg_schema: str
) -> None:
    """No gaps, no duplicates, each session in seq order, and positions in commit order: an
    append acknowledged before another was submitted (in any process) has lower positions."""
    log = PostgresEventLog.open(pg_server.dsn, schema=pg_schema)
    seen: list[RecordedEvent] = []
    stop = threading.Event()

    def follow() -> None:
        seen.extend(tail(log, stop=stop, batch=64, poll=0.05))

    reader = threading.Thread(target=follow)
    reader.start()
    try:
        with contextlib.ExitStack() as children:
            started = [
                children.enter_context(
                    child_process(
                        [
                            sys.executable,
                            CHILD,
                            pg_server.dsn,
                            pg_schema,
                            str(process),
                            str(THREADS),
                            str(SESSIONS),
                            str(APPENDS),
                        ],
                        stderr=None,
                    )
                )
                for process in range(PROCESSES)
            ]
            reports = []
            for child in started:
                out, _ = child.communicate(timeout=300)
                assert child.returncode == 0
                reports.extend(json.loads(out))
        total = sum(count for *_, count, _, _ in reports)
        while len(seen) < total and reader.is_alive():
            threading.Event().wait(0.01)
    finally:
        stop.set()
        reader.join()
        log.close()

    assert [r.position for r in seen] == list(range(1, total + 1))
    by_session: dict[str, list[int]] = {}
    for recorded in seen:
        by_session.setdefault(recorded.session_id, []).append(recorded.seq)
    assert len(by_session) == PROCESSES * THREADS * SESSIONS
    assert all(seqs == list(range(1, len(seqs) + 1)) for seqs in by_session.values())
    at = {r.position: (r.session_id, r.seq) for r in seen}
    for session_id, first_seq, first_position, count, _, _ in reports:
        assert [at[first_position + i] for i in range(count)] == [
            (session_id, first_seq + i) for i in range(count)
        ]
    # Commit order in real time: sort by acknowledgement, then every append must lie above
    # all appends acknowledged before it was submitted.
    by_ack = sorted(reports, key=lambda report: report[5])
    acks = [report[5] for report in by_ack]
    highest, top = [], 0
    for _, _, first_position, count, _, _ in by_ack:
        top = max(top, first_position + count - 1)
        highest.append(top)
    for _, _, first_position, _, submitted, _ in reports:
        before = bisect.bisect_left(acks, submitted)
        assert before == 0 or highest[before - 1] < first_position
