"""The lease life cycle of hosts sharing one log: acquire on activation, renew, release, lose.

Two hosts in one process on the same PostgreSQL database (separate logs, separate connections,
as separate machines would have); the in-memory log with ``leases=True`` for the same rules
without a server. Failover between real processes is in ``test_pg_failover.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxledger import Host, HostOptions, Message, ToolCall
from ctxledger.errors import LeaseHeldError
from ctxledger.events import ToolResultSynthesized
from ctxledger.storage import MemoryEventLog, PostgresEventLog

TTL = 1.0


@pytest.fixture
def dsn(pg_database: str) -> Iterator[str]:
    yield pg_database


def open_host(dsn: str, host_id: str, **options: Any) -> Host:
    options.setdefault("lease_ttl", TTL)
    return Host.open(dsn, options=HostOptions(host_id=host_id, **options))


@pytest.mark.postgres
def test_activation_takes_the_lease_and_writes_are_fenced(dsn: str) -> None:
    with open_host(dsn, "host-a") as host:
        session = host.session("s1")
        session.append(Message.user("hello"))
        lease = host.log.current_lease("s1")  # type: ignore[attr-defined]
        assert lease is not None and lease.host_id == "host-a" and lease.epoch == 1
        assert host.host_id == "host-a" and host.lease_ttl == TTL


@pytest.mark.postgres
def test_renewal_keeps_the_lease_past_its_ttl(dsn: str) -> None:
    # A longer ttl than the module's: renewals come every third of it, so a busy machine may
    # delay one by up to two thirds (1.3 s here) before host-b could take the lease.
    ttl = 2 * TTL
    with (
        open_host(dsn, "host-a", lease_ttl=ttl) as a,
        open_host(dsn, "host-b", lease_ttl=ttl, lease_wait=0.2) as b,
    ):
        a.session("s1").append(Message.user("hello"))
        first = a.log.current_lease("s1")  # type: ignore[attr-defined]
        time.sleep(2 * ttl)  # two ttls: only renewals keep it
        now = a.log.current_lease("s1")  # type: ignore[attr-defined]
        assert now.epoch == first.epoch and now.expires_at > first.expires_at
        with pytest.raises(LeaseHeldError) as caught:
            b.session("s1")
        assert caught.value.holder == "host-a"
        # Still served by host-a, under the same lease.
        assert a.session("s1").append(Message.assistant("still here")) == 2


@pytest.mark.postgres
def test_close_releases_so_another_host_takes_over_at_once(dsn: str) -> None:
    with open_host(dsn, "host-a", lease_ttl=60.0) as a:
        a.session("s1").append(Message.user("hello"))
    # A 60 s lease: only its release lets host-b in within lease_wait.
    with Host.open(
        dsn,
        options=HostOptions(host_id="host-b", lease_ttl=60.0, lease_wait=0.5),
    ) as b:
        session = b.session("s1")
        assert [m.content for m in session.history()] == ["hello"]
        lease = b.log.current_lease("s1")  # type: ignore[attr-defined]
        assert lease.host_id == "host-b" and lease.epoch == 2
        assert session.append(Message.assistant("hi")) == 2


@pytest.mark.postgres
def test_eviction_releases_the_lease(dsn: str) -> None:
    with (
        Host.open(
            dsn,
            options=HostOptions(host_id="host-a", lease_ttl=60.0, max_active_sessions=1),
        ) as a,
        Host.open(dsn, options=HostOptions(host_id="host-b", lease_ttl=60.0, lease_wait=0.5)) as b,
    ):
        a.session("s1").append(Message.user("one"))
        a.session("s2").append(Message.user("two"))  # evicts s1
        assert a.active_sessions() == ["s2"]
        deadline = time.monotonic() + 30  # the release is handed to the lease actor
        while a.log.current_lease("s1").expires_at > time.time():  # type: ignore[attr-defined]
            assert time.monotonic() < deadline, "s1's lease was not released"
            time.sleep(0.01)
        assert b.session("s1").append(Message.assistant("taken")) == 2


@pytest.mark.postgres
def test_takeover_recovers_interrupted_tool_calls(dsn: str) -> None:
    call = ToolCall("c1", "bash", "{}")
    with open_host(dsn, "host-a") as a:
        a.session("s1").append_many([Message.user("run it"), Message.assistant("", [call])])
    with open_host(dsn, "host-b") as b:
        history = b.session("s1").history()
        assert history[-1].tool_call_id == "c1"
        assert isinstance(b.log.read("s1")[-1].event, ToolResultSynthesized)


@pytest.mark.postgres
def test_lost_lease_fails_the_write_and_the_next_use_recovers(dsn: str) -> None:
    """host-a's lease expires without renewal (its lease actor is held up); host-b takes over;
    host-a's next append fails with LeaseLostError and writes nothing; after host-b is done,
    host-a's next use takes the session back and sees host-b's messages."""
    from ctxledger.errors import LeaseLostError

    with open_host(dsn, "host-a") as a, open_host(dsn, "host-b") as b:
        session = a.session("s1")
        session.append(Message.user("hello"))
        keeper = a._leases
        assert keeper is not None
        with keeper._lock:  # no renewal can run meanwhile: the lease expires
            time.sleep(1.5 * TTL)
            b.session("s1").append(Message.assistant("b was here"))
            position = b.log.last_position()  # type: ignore[attr-defined]
            with pytest.raises(LeaseLostError):
                session.append(Message.assistant("a again"))
        assert b.log.last_position() == position  # type: ignore[attr-defined]
        b.close()
        assert session.append(Message.user("back")) == 3
        assert [m.content for m in session.history()] == ["hello", "b was here", "back"]


@pytest.mark.postgres
def test_waiting_for_a_lease_does_not_stall_other_sessions(dsn: str) -> None:
    with (
        open_host(dsn, "host-a") as a,
        open_host(dsn, "host-b", history_actors=1, projection_actors=1, lease_wait=60.0) as b,
    ):
        a.session("held").append(Message.user("mine"))
        waiter = threading.Thread(target=lambda: b.session("held"))
        waiter.start()
        deadline = time.monotonic() + 30
        while b._leases is not None and not _loading(b):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        # The same history and projection actor serve another session meanwhile.
        other = b.session("free")
        assert other.append(Message.user("served")) == 1
        assert waiter.is_alive()  # still waiting: host-a renews its lease
        a.close()
        waiter.join(timeout=60)
        assert not waiter.is_alive()
        assert b.log.current_lease("held").host_id == "host-b"  # type: ignore[attr-defined]


def _loading(host: Host) -> bool:
    return "held" in host.active_sessions()


def test_memory_log_takes_no_leases_unless_asked() -> None:
    log = MemoryEventLog()
    with Host(log, owns_log=False, options=HostOptions(host_id="host-a")) as host:
        host.session("s1").append(Message.user("hello"))
        assert log.current_lease("s1") is None
    with Host(log, owns_log=False, options=HostOptions(host_id="host-a", leases=True)) as host:
        host.session("s1").append(Message.user("again"))
        assert log.current_lease("s1").host_id == "host-a"  # type: ignore[union-attr]


def test_two_hosts_on_one_memory_log_with_leases() -> None:
    log = MemoryEventLog()
    a = Host(
        log,
        owns_log=False,
        options=HostOptions(host_id="host-a", leases=True, lease_ttl=30.0),
    )
    b = Host(
        log,
        owns_log=False,
        options=HostOptions(host_id="host-b", leases=True, lease_ttl=30.0, lease_wait=0.3),
    )
    try:
        a.session("s1").append(Message.user("hello"))
        with pytest.raises(LeaseHeldError):
            b.session("s1")
        a.close()
        assert b.session("s1").append(Message.assistant("mine now")) == 2
        assert log.current_lease("s1").epoch == 2  # type: ignore[union-attr]
    finally:
        a.close()
        b.close()


def test_lmdb_host_takes_no_leases(tmp_path: Path) -> None:
    with Host.open(tmp_path / "db", options=HostOptions(host_id="h")) as host:
        host.session("s1").append(Message.user("hello"))
        assert host._leases is None


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"host_id": ""}, ValueError),
        ({"host_id": 3}, TypeError),
        ({"lease_ttl": 0}, ValueError),
        ({"lease_ttl": True}, ValueError),
        ({"lease_wait": -1.0}, ValueError),
    ],
)
def test_bad_lease_options_are_rejected(options: dict[str, Any], error: type) -> None:
    with pytest.raises(error):
        HostOptions(**options)


def test_leases_need_a_lease_store(tmp_path: Path) -> None:
    from ctxledger.storage import LmdbEventLog

    with LmdbEventLog.open(tmp_path / "db") as log, pytest.raises(ValueError, match="LeaseStore"):
        Host(log, owns_log=False, options=HostOptions(leases=True))


def test_default_host_ids_differ() -> None:
    with Host(MemoryEventLog()) as a, Host(MemoryEventLog()) as b:
        assert a.host_id and b.host_id and a.host_id != b.host_id
    assert PostgresEventLog is not None


@pytest.mark.postgres
def test_reactivation_by_the_same_host_keeps_a_pending_tool_call(dsn: str) -> None:
    """Evicted and re-activated by the host that served it all along (the epoch right after its
    own): a tool call still running is not answered as interrupted."""
    call = ToolCall("c1", "bash", "{}")
    with Host.open(
        dsn,
        options=HostOptions(host_id="host-a", lease_ttl=60.0, max_active_sessions=1),
    ) as a:
        session = a.session("s1")
        session.append_many([Message.user("run it"), Message.assistant("", [call])])
        for other in ("s2", "s3", "s4"):
            a.session(other).append(Message.user("other"))  # evicts s1
            assert a.active_sessions() == [other]
            assert session.history()[-1].tool_calls == (call,)  # re-activates s1
        assert session.append(Message.tool("done", "c1", "bash")) == 3
        assert a.log.current_lease("s1").epoch == 4  # type: ignore[attr-defined]
        assert not any(isinstance(r.event, ToolResultSynthesized) for r in a.log.read("s1"))


@pytest.mark.postgres
def test_reactivation_after_another_host_served_recovers(dsn: str) -> None:
    """Re-activated after another host served the session in between: recovered again."""
    call = ToolCall("c2", "bash", "{}")
    with (
        Host.open(
            dsn,
            options=HostOptions(host_id="host-a", lease_ttl=60.0, max_active_sessions=1),
        ) as a,
        Host.open(
            dsn,
            options=HostOptions(host_id="host-b", lease_ttl=60.0, max_active_sessions=1),
        ) as b,
    ):
        a.session("s1").append(Message.user("hello"))
        a.session("s2").append(Message.user("other"))  # evicts s1, releasing its lease
        deadline = time.monotonic() + 30
        while a.log.current_lease("s1").expires_at > time.time():  # type: ignore[attr-defined]
            assert time.monotonic() < deadline
            time.sleep(0.01)
        b.session("s1").append(Message.assistant("", [call]))
        b.session("s3").append(Message.user("other"))  # evicts s1 on host-b, releasing it
        while b.log.current_lease("s1").expires_at > time.time():  # type: ignore[attr-defined]
            assert time.monotonic() < deadline
            time.sleep(0.01)
        history = a.session("s1").history()
        assert history[-1].tool_call_id == "c2"  # host-a recovered host-b's pending call
