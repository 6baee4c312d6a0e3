"""A writer paused between the statements of its group's pipeline is ended by whoever needs its
locks (real PostgreSQL server).

A host paused there (SIGSTOP, a frozen VM) leaves its backend waiting for the rest of the
pipeline inside the transaction, holding the head row and the lease rows of its fenced sessions;
``idle_in_transaction_session_timeout`` does not apply between the statements of a pipeline. The
stalled writer is reproduced exactly: a connection named as ours are, in pipeline mode,
that locks those rows and sends nothing more.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import psycopg
import pytest

from ctxledger.events import UsageReported
from ctxledger.storage import PostgresEventLog

pytestmark = pytest.mark.postgres

_LOCK_HEAD = "SELECT position FROM ctxledger.head WHERE id = 1 FOR UPDATE"


def _usage(tokens: int) -> list[Any]:
    return [UsageReported(prompt_tokens=tokens)]


def _row_locked(dsn: str, query: str) -> bool:
    with psycopg.connect(dsn, autocommit=False) as conn:
        try:
            conn.execute(query + " NOWAIT")
        except psycopg.errors.LockNotAvailable:
            return True
        finally:
            conn.rollback()
    return False


def test_a_writer_stalled_inside_a_pipeline_is_ended_by_the_takeover(pg_database: str) -> None:
    dsn = pg_database
    with PostgresEventLog.open(dsn) as log:
        first = log.acquire_lease("s", "host-a", ttl=1.0)
        log.append("s", _usage(1), expected_seq=0, fence=first)
    stalled = psycopg.connect(dsn, autocommit=False, application_name="ctxledger")
    entered = stalled.pipeline()
    pipeline = entered.__enter__()
    try:
        cur = stalled.cursor()
        cur.execute(_LOCK_HEAD)
        cur.execute("SELECT epoch FROM ctxledger.leases WHERE session_id = 's' FOR SHARE")
        deadline = time.monotonic() + 10
        while not _row_locked(dsn, _LOCK_HEAD):  # the server ran both statements: rows locked
            assert time.monotonic() < deadline, "the stalled pipeline never locked the head row"
            time.sleep(0.05)

        outcome: list[Any] = []

        def take_over() -> None:
            try:
                with PostgresEventLog.open(dsn) as other:
                    lease = other.acquire_lease("s", "host-b", ttl=5.0, wait=30)
                    other.append("s", _usage(2), expected_seq=1, fence=lease)
                    other.append("t", _usage(3), expected_seq=0)
                    outcome.append((lease, other.last_seq("s"), other.last_seq("t")))
            except BaseException as exc:  # reported below
                outcome.append(exc)

        started = time.monotonic()
        thread = threading.Thread(target=take_over)
        thread.start()
        thread.join(60)
        assert not thread.is_alive(), "the takeover waited on the stalled writer's locks"
        elapsed = time.monotonic() - started
        (result,) = outcome
        assert not isinstance(result, BaseException), result
        lease, last_s, last_t = result
        assert (lease.host_id, lease.epoch) == ("host-b", first.epoch + 1)
        assert (last_s, last_t) == (2, 1)
        assert elapsed < 30, f"the takeover took {elapsed:.1f} s"
        # The server ended the stalled transaction: its connection is gone.
        with pytest.raises(psycopg.OperationalError):
            pipeline.sync()
    finally:
        with contextlib.suppress(Exception):
            entered.__exit__(None, None, None)
        stalled.close()
    assert not _row_locked(dsn, _LOCK_HEAD)
