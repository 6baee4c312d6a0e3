"""The LeaseStore contract (session leases with fencing): memory and PostgreSQL pass all of it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from ctxledger.errors import (
    InvalidArgumentError,
    LeaseHeldError,
    LeaseLostError,
    VersionConflictError,
)
from ctxledger.events.types import Event, UsageReported
from ctxledger.storage import LeaseStore, MemoryEventLog, PostgresEventLog
from pg_fixtures import PgServer

LONG = 60.0  # a lease that does not expire during a test
SHORT = 0.3  # a lease that a test lets expire


def usage(count: int, start: int = 0) -> list[Event]:
    """``count`` small events."""
    return [UsageReported(prompt_tokens=start + index) for index in range(count)]


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.postgres)])
def leases(request: pytest.FixtureRequest) -> Iterator[LeaseStore]:
    """A fresh log of each backend that implements leases."""
    if request.param == "memory":
        log: LeaseStore = MemoryEventLog()
    else:
        server: PgServer = request.getfixturevalue("pg_server")
        log = PostgresEventLog.open(server.dsn, schema=request.getfixturevalue("pg_schema"))
    yield log
    log.close()


def test_first_lease_has_epoch_one(leases: LeaseStore) -> None:
    """The first lease of a session is epoch 1, held by the host that asked."""
    lease = leases.acquire_lease("s", "h1", LONG)
    assert (lease.session_id, lease.host_id, lease.epoch) == ("s", "h1", 1)
    assert leases.current_lease("s") == lease


def test_unknown_session_has_no_lease(leases: LeaseStore) -> None:
    """A session nobody leased has no lease."""
    assert leases.current_lease("nobody") is None


def test_held_lease_is_refused_to_another_host(leases: LeaseStore) -> None:
    """A live lease of another host raises LeaseHeldError naming the holder and epoch."""
    leases.acquire_lease("s", "h1", LONG)
    with pytest.raises(LeaseHeldError) as caught:
        leases.acquire_lease("s", "h2", LONG)
    assert (caught.value.holder, caught.value.epoch) == ("h1", 1)
    assert caught.value.expires_in > LONG / 2


def test_same_host_acquiring_again_gets_a_new_epoch(leases: LeaseStore) -> None:
    """A host that acquires its own lease again gets the next epoch."""
    leases.acquire_lease("s", "h1", LONG)
    assert leases.acquire_lease("s", "h1", LONG).epoch == 2


def test_expired_lease_is_taken_over_with_the_next_epoch(leases: LeaseStore) -> None:
    """Waiting for an expiring lease takes it over, one epoch up."""
    leases.acquire_lease("s", "h1", SHORT)
    lease = leases.acquire_lease("s", "h2", LONG, wait=30)
    assert (lease.host_id, lease.epoch) == ("h2", 2)


def test_acquire_waits_for_a_release(leases: LeaseStore) -> None:
    """A host waiting for a lease gets it once the holder releases it."""
    held = leases.acquire_lease("s", "h1", LONG)
    timer = threading.Timer(0.2, leases.release_lease, args=(held,))
    timer.start()
    try:
        lease = leases.acquire_lease("s", "h2", LONG, wait=30)
    finally:
        timer.join()
    assert (lease.host_id, lease.epoch) == ("h2", 2)


def test_released_lease_is_free_at_once(leases: LeaseStore) -> None:
    """After a release, another host acquires without waiting."""
    leases.release_lease(leases.acquire_lease("s", "h1", LONG))
    assert leases.acquire_lease("s", "h2", LONG).epoch == 2


def test_released_lease_is_reported_expired(leases: LeaseStore) -> None:
    """A released lease is still recorded (its epoch is kept), as expired."""
    leases.release_lease(leases.acquire_lease("s", "h1", LONG))
    lease = leases.current_lease("s")
    assert lease is not None and lease.host_id == "h1" and lease.epoch == 1
    assert lease.expires_at <= time.time()


def test_renew_keeps_the_epoch_and_extends(leases: LeaseStore) -> None:
    """Renewing keeps the epoch and moves the expiry forward."""
    lease = leases.acquire_lease("s", "h1", SHORT)
    renewed = leases.renew_lease(lease, LONG)
    assert renewed.epoch == lease.epoch and renewed.expires_at > lease.expires_at
    with pytest.raises(LeaseHeldError):
        leases.acquire_lease("s", "h2", LONG)


def test_renew_after_takeover_raises_lease_lost(leases: LeaseStore) -> None:
    """A host whose lease was taken over cannot renew it; the error names the new holder."""
    stale = leases.acquire_lease("s", "h1", SHORT)
    leases.acquire_lease("s", "h2", LONG, wait=30)
    with pytest.raises(LeaseLostError) as caught:
        leases.renew_lease(stale, LONG)
    assert (caught.value.holder, caught.value.current, caught.value.epoch) == ("h2", 2, 1)


def test_release_of_a_taken_over_lease_does_nothing(leases: LeaseStore) -> None:
    """A stale holder releasing its old lease does not free the new holder's."""
    stale = leases.acquire_lease("s", "h1", SHORT)
    current = leases.acquire_lease("s", "h2", LONG, wait=30)
    leases.release_lease(stale)
    assert leases.current_lease("s") == current


def test_epochs_are_never_reused(leases: LeaseStore) -> None:
    """Releases keep the epoch: a lease from long ago stays fenced out for good."""
    first = leases.acquire_lease("s", "h1", LONG)
    leases.release_lease(first)
    leases.release_lease(leases.acquire_lease("s", "h2", LONG))
    again = leases.acquire_lease("s", "h1", LONG)
    assert again.epoch == 3
    with pytest.raises(LeaseLostError):
        leases.append("s", usage(1), expected_seq=0, fence=first)


def test_fenced_append_commits_while_the_lease_holds(leases: LeaseStore) -> None:
    """An append fenced by the current lease is recorded."""
    lease = leases.acquire_lease("s", "h1", LONG)
    recorded = leases.append("s", usage(2), expected_seq=0, fence=lease)
    assert [r.seq for r in recorded] == [1, 2]


def test_fenced_append_still_commits_after_expiry_if_nobody_took_over(
    leases: LeaseStore,
) -> None:
    """The epoch, not the clock, fences: an expired lease nobody took over still appends."""
    lease = leases.acquire_lease("s", "h1", 0.05)
    time.sleep(0.1)
    assert leases.append("s", usage(1), expected_seq=0, fence=lease)[0].seq == 1


def test_fenced_out_append_raises_and_writes_nothing(leases: LeaseStore) -> None:
    """After a takeover, the old holder's append fails with LeaseLostError; nothing written."""
    stale = leases.acquire_lease("s", "h1", SHORT)
    leases.append("s", usage(1), expected_seq=0, fence=stale)
    leases.acquire_lease("s", "h2", LONG, wait=30)
    with pytest.raises(LeaseLostError) as caught:
        leases.append("s", usage(3), expected_seq=1, fence=stale)
    assert (caught.value.host_id, caught.value.holder) == ("h1", "h2")
    assert leases.last_seq("s") == 1 and leases.last_position() == 1


def test_fenced_out_aappend_raises_and_writes_nothing(leases: LeaseStore) -> None:
    """The same through aappend."""
    stale = leases.acquire_lease("s", "h1", SHORT)
    leases.acquire_lease("s", "h2", LONG, wait=30)

    async def go() -> None:
        await leases.aappend("s", usage(1), expected_seq=0, fence=stale)

    with pytest.raises(LeaseLostError):
        asyncio.run(go())
    assert leases.last_position() == 0


def test_fence_is_checked_before_the_expected_seq(leases: LeaseStore) -> None:
    """A fenced-out host learns it lost the lease, not that its seq is stale."""
    stale = leases.acquire_lease("s", "h1", SHORT)
    current = leases.acquire_lease("s", "h2", LONG, wait=30)
    leases.append("s", usage(2), expected_seq=0, fence=current)
    with pytest.raises(LeaseLostError):
        leases.append("s", usage(1), expected_seq=0, fence=stale)


def test_new_holder_appends_after_the_takeover(leases: LeaseStore) -> None:
    """The host that took over appends after the old holder's events."""
    stale = leases.acquire_lease("s", "h1", SHORT)
    leases.append("s", usage(2), expected_seq=0, fence=stale)
    current = leases.acquire_lease("s", "h2", LONG, wait=30)
    with pytest.raises(VersionConflictError):
        leases.append("s", usage(1), expected_seq=0, fence=current)
    assert leases.append("s", usage(1), expected_seq=2, fence=current)[0].seq == 3


def test_fence_of_another_session_is_rejected(leases: LeaseStore) -> None:
    """Passing a lease of another session as the fence is a ValueError; nothing written."""
    lease = leases.acquire_lease("a", "h1", LONG)
    with pytest.raises(ValueError):
        leases.append("b", usage(1), expected_seq=0, fence=lease)
    assert leases.last_position() == 0


def test_fenced_out_append_fails_alone_among_concurrent_appends(leases: LeaseStore) -> None:
    """Appends of other threads, fenced or not, commit while a fenced-out one fails."""
    stale = leases.acquire_lease("lost", "h1", SHORT)
    leases.acquire_lease("lost", "h2", LONG, wait=30)
    mine = {f"s{index}": leases.acquire_lease(f"s{index}", "h1", LONG) for index in range(4)}
    barrier = threading.Barrier(9)
    errors: list[BaseException] = []

    def fenced(session_id: str) -> None:
        barrier.wait()
        for step in range(5):
            leases.append(session_id, usage(1), expected_seq=step, fence=mine[session_id])

    def unfenced(index: int) -> None:
        barrier.wait()
        for step in range(5):
            leases.append(f"free{index}", usage(1), expected_seq=step)

    def fenced_out() -> None:
        barrier.wait()
        for _ in range(5):
            try:
                leases.append("lost", usage(1), expected_seq=0, fence=stale)
            except LeaseLostError as exc:
                errors.append(exc)

    threads = [threading.Thread(target=fenced, args=(sid,)) for sid in mine]
    threads += [threading.Thread(target=unfenced, args=(index,)) for index in range(4)]
    threads.append(threading.Thread(target=fenced_out))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(errors) == 5 and leases.last_seq("lost") == 0
    assert leases.last_position() == 40


def test_invalid_lease_arguments_are_rejected(leases: LeaseStore) -> None:
    """An empty host id or a ttl that is not positive is a ValueError."""
    with pytest.raises(ValueError):
        leases.acquire_lease("s", "", LONG)
    with pytest.raises(ValueError):
        leases.acquire_lease("s", "h1", 0)


def test_renew_leases_renews_many_and_reports_the_lost(leases: LeaseStore) -> None:
    """renew_leases extends each lease still held and gives None for one taken over."""
    kept = [leases.acquire_lease(f"s{n}", "h1", LONG) for n in range(3)]
    lost = leases.acquire_lease("gone", "h1", SHORT)
    time.sleep(SHORT * 2)
    taker = leases.acquire_lease("gone", "h2", LONG)
    renewed = leases.renew_leases([*kept, lost], LONG)
    assert renewed[3] is None
    for before, after in zip(kept, renewed[:3], strict=True):
        assert after is not None and after.epoch == before.epoch
        assert after.expires_at >= before.expires_at
    assert leases.current_lease("gone") == taker
    assert leases.renew_leases([], LONG) == []
    with pytest.raises(ValueError):
        leases.renew_leases([kept[0], kept[0]], LONG)


@pytest.mark.parametrize(
    ("session_id", "host_id", "ttl", "argument"),
    [
        (3, "h", 1.0, "session_id"),
        ("", "h", 1.0, "session_id"),
        ("s", None, 1.0, "host_id"),
        ("s", "", 1.0, "host_id"),
        ("s", "h", "1", "ttl"),
        ("s", "h", True, "ttl"),
        ("s", "h", 0, "ttl"),
        ("s", "h", float("nan"), "ttl"),
        ("s", "h", float("inf"), "ttl"),
    ],
)
def test_a_bad_lease_request_is_refused_naming_the_argument(
    leases: LeaseStore, session_id: object, host_id: object, ttl: object, argument: str
) -> None:
    """A wrong argument raises InvalidArgumentError (a TypeError and a ValueError) naming it,
    and takes no lease."""
    with pytest.raises(InvalidArgumentError) as caught:
        leases.acquire_lease(session_id, host_id, ttl)  # type: ignore[arg-type]
    assert caught.value.argument == argument
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, ValueError)
    if isinstance(session_id, str) and session_id:
        assert leases.current_lease(session_id) is None
