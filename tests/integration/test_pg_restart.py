"""A host restarted on the same machine takes its sessions back at once (PostgreSQL leases).

A lease records the process that took it (host name, boot id, pid namespace, pid and start
time); a holder proven dead on this machine is taken over without waiting for its lease to
expire, while a live holder (another process, or another host of this one) still is.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb
from test_pg_failover import SESSION, Child

from ctxledger import Host, HostOptions, LeaseHeldError, Message
from ctxledger.events import ToolResultSynthesized
from ctxledger.replay import verify
from ctxledger.storage import DEFAULT_LEASE_TTL, PostgresEventLog
from ctxledger.storage._holder import this_process

pytestmark = pytest.mark.postgres

LONG_TTL = "3600"  # the killed host's lease would outlive the test: only a proof of death helps


def test_a_restarted_host_takes_its_dead_predecessors_session_at_once(pg_database: str) -> None:
    """SIGKILL a host holding an hour-long lease; a new host at the default settings serves the
    session's first append, the interrupted tool call answered, without waiting for it."""
    dead = Child(pg_database, "-", "serve", "3", ttl=LONG_TTL)  # its tool runs "forever"
    try:
        dead.expect("calling")
        with PostgresEventLog.open(pg_database) as log:
            before = log.current_lease(SESSION)
        assert before is not None and before.expires_at > time.time() + 3000
        dead.proc.send_signal(signal.SIGKILL)
        dead.proc.wait(timeout=30)
        dead.drain()
    finally:
        dead.close()
    started = time.monotonic()
    with Host.open(pg_database) as host:  # default host_id, lease_ttl and lease_wait
        seq = host.session(SESSION).append(Message.user("after the restart"))
        elapsed = time.monotonic() - started
        host_id = host.host_id
        with PostgresEventLog.open(pg_database) as log:
            after = log.current_lease(SESSION)
    # A deadlock guard only (the figure is measured in bench/bench_failover.py): a host waiting
    # for the hour-long lease would have failed with LeaseHeldError after lease_wait instead.
    assert elapsed < 2 * DEFAULT_LEASE_TTL + 1
    assert after is not None and (after.host_id, after.epoch) == (host_id, before.epoch + 1)
    assert seq == max(dead.acked()) + 2  # the interrupted call's answer, then this message
    with PostgresEventLog.open(pg_database) as log:
        records = log.read(SESSION)
        synthesized = [r.event for r in records if isinstance(r.event, ToolResultSynthesized)]
        assert [event.message.tool_call_id for event in synthesized] == ["call-3"]
        assert verify(log, SESSION).ok


def test_a_live_process_holding_the_lease_is_still_waited_for(pg_database: str) -> None:
    """A second live process never takes the session: it waits, then is refused, and the
    holder's lease is untouched."""
    live = Child(pg_database, "-", "serve", "2", ttl=LONG_TTL)
    try:
        live.expect("calling")
        with PostgresEventLog.open(pg_database) as log:
            before = log.current_lease(SESSION)
        with (
            Host.open(pg_database, options=HostOptions(lease_wait=1.0)) as host,
            pytest.raises(LeaseHeldError, match=rf"pid {live.proc.pid} on ") as refused,
        ):
            host.session(SESSION)
        assert before is not None and refused.value.holder == before.host_id
        with PostgresEventLog.open(pg_database) as log:
            assert log.current_lease(SESSION) == before
        assert live.proc.poll() is None  # and it still serves
    finally:
        live.close()


def _holder_of(pid: int) -> dict[str, object]:
    me = this_process()
    assert me is not None, "the lease holder needs /proc (Linux)"
    stat = Path(f"/proc/{pid}/stat").read_text()
    start = int(stat[stat.rfind(")") + 2 :].split()[19])
    return {field: getattr(me, field) for field in me.__struct_fields__} | {
        "pid": pid,
        "start": start,
    }


_GONE = 2**22 + 12345  # a pid no process has (above the largest pid_max)


@pytest.mark.parametrize(
    ("holder", "taken"),
    [
        ("self", False),  # this very process: alive
        ("other", False),  # another live process
        ("other start=-1", True),  # its pid, reused by a process started at another time
        ("self start=-1", True),  # this pid, reused
        ("zombie", True),  # killed, not reaped yet
        (f"self pid={_GONE}", True),  # a pid no process has
        (f"self pid={_GONE} host=elsewhere", False),  # another machine: unknown
        (f"self pid={_GONE} boot=0", False),  # before a reboot: not provable
        (f"self pid={_GONE} pid_ns=pid:[1]", False),  # another container's pids
        ("none", False),  # a lease written before holders were recorded
    ],
)
def test_only_a_holder_proven_dead_here_is_taken_over(
    pg_server: object, pg_schema: str, holder: str, taken: bool
) -> None:
    """The take-over before expiry needs the same host, boot and pid namespace, and the pid
    gone, a zombie or reused; anything else is waited for."""
    dsn = pg_server.dsn  # type: ignore[attr-defined]
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        who, *changes = holder.split()
        if who == "none":
            recorded = None
        else:
            recorded = _holder_of(os.getpid() if who == "self" else other.pid)
            if who == "zombie":
                other.send_signal(signal.SIGKILL)
                deadline = time.monotonic() + 60  # a hang guard, not a timing assumption
                while Path(f"/proc/{other.pid}/stat").read_text().split(") ")[1][0] != "Z":
                    assert time.monotonic() < deadline, "the killed child never became a zombie"
                    time.sleep(0.01)
            for change in changes:
                key, value = change.split("=")
                recorded[key] = int(value) if key in ("pid", "start") else value
        with PostgresEventLog.open(dsn, schema=pg_schema) as log:
            held = log.acquire_lease("s", "first", 3600)
            with psycopg.connect(dsn, autocommit=True) as conn:
                value = None if recorded is None else Jsonb(recorded)
                conn.execute(f'UPDATE "{pg_schema}".leases SET holder = %s', [value])
            if taken:
                lease = log.acquire_lease("s", "second", 10)
                assert (lease.host_id, lease.epoch) == ("second", held.epoch + 1)
            else:
                with pytest.raises(LeaseHeldError):
                    log.acquire_lease("s", "second", 10)
                now = log.current_lease("s")
                assert now is not None and (now.host_id, now.epoch) == ("first", held.epoch)
    finally:
        other.kill()
        other.wait()


def test_a_log_created_before_holders_gains_the_column(pg_server: object, pg_schema: str) -> None:
    """A schema whose leases table has no holder column is given one on the first lease."""
    dsn = pg_server.dsn  # type: ignore[attr-defined]
    with PostgresEventLog.open(dsn, schema=pg_schema):
        pass
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'ALTER TABLE "{pg_schema}".leases DROP COLUMN holder')
    with PostgresEventLog.open(dsn, schema=pg_schema) as log:
        log.acquire_lease("s", "first", 3600)
    with psycopg.connect(dsn) as conn:
        (holder,) = conn.execute(f'SELECT holder FROM "{pg_schema}".leases').fetchone() or (None,)
    assert holder is not None and holder["pid"] == os.getpid()


def test_the_holder_is_this_process() -> None:
    """this_process names this machine's boot and this pid with its start time."""
    me = this_process()
    assert me is not None
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert (me.boot, me.pid) == (boot, os.getpid())
    stat = Path(f"/proc/{os.getpid()}/stat").read_text()
    assert me.start == int(stat[stat.rfind(")") + 2 :].split()[19])
