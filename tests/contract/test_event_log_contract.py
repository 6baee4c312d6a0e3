"""The EventLog contract: every backend (memory, LMDB) must pass every test here."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter

import pytest
from log_backends import Backend

from ctxledger.config import Config
from ctxledger.errors import StorageError, UnknownSessionError, VersionConflictError
from ctxledger.events.types import (
    Event,
    MessageAppended,
    SessionOpened,
    UsageReported,
    ViewServed,
)
from ctxledger.messages import Message, ToolCall
from ctxledger.storage import EventLog, RecordedEvent


def usage(count: int, start: int = 0) -> list[Event]:
    """``count`` small events, told apart by their ``prompt_tokens``."""
    return [UsageReported(prompt_tokens=start + index) for index in range(count)]


def mixed_events() -> list[Event]:
    """A realistic batch: session opened, messages small and large, a served view."""
    call = ToolCall("call_1", "bash", '{"command": "ls -la"}')
    return [
        SessionOpened(session_id="s", config=Config(), created_at=1.5),
        MessageAppended(message=Message.system("You are helpful.").with_seq(1)),
        MessageAppended(message=Message.user("list the files " * 200).with_seq(2)),
        MessageAppended(message=Message.assistant("", [call]).with_seq(3)),
        MessageAppended(message=Message.tool("a.txt\nb.txt\n" * 500, "call_1", "bash").with_seq(4)),
        ViewServed(through_seq=4, estimated_tokens=1234, view_hash="ab" * 32),
    ]


def test_append_assigns_dense_seqs_from_one(log: EventLog) -> None:
    """A new session's first batch gets seqs 1..n."""
    recorded = log.append("s", usage(3), expected_seq=0)
    assert [r.seq for r in recorded] == [1, 2, 3]


def test_append_continues_seqs_after_previous_batch(log: EventLog) -> None:
    """A second batch continues where the first ended."""
    log.append("s", usage(2), expected_seq=0)
    recorded = log.append("s", usage(2), expected_seq=2)
    assert [r.seq for r in recorded] == [3, 4]


def test_read_returns_what_append_recorded(log: EventLog) -> None:
    """Reading a session returns exactly the recorded events, in seq order."""
    recorded = log.append("s", mixed_events(), expected_seq=0)
    assert log.read("s") == recorded


def test_recorded_events_carry_the_appended_events(log: EventLog) -> None:
    """The events come back equal to the ones appended."""
    events = mixed_events()
    log.append("s", events, expected_seq=0)
    assert [r.event for r in log.read("s")] == events


def test_batch_shares_one_commit_timestamp(log: EventLog) -> None:
    """All events of one batch carry the timestamp of their commit."""
    recorded = log.append("s", usage(3), expected_seq=0)
    assert len({r.timestamp for r in recorded}) == 1


def test_recorded_events_name_their_session(log: EventLog) -> None:
    """Every recorded event names the session it was appended to."""
    recorded = log.append("alpha", usage(2), expected_seq=0)
    assert {r.session_id for r in recorded} == {"alpha"}


def test_last_seq_of_unknown_session_is_zero(log: EventLog) -> None:
    """A session with no events has last seq 0."""
    assert log.last_seq("nobody") == 0


def test_last_seq_follows_appends(log: EventLog) -> None:
    """last_seq is the seq of the session's newest event."""
    log.append("s", usage(4), expected_seq=0)
    assert log.last_seq("s") == 4


def test_read_of_unknown_session_is_empty(log: EventLog) -> None:
    """Reading a session that does not exist returns no events."""
    assert log.read("nobody") == []


def test_new_session_with_nonzero_expected_seq_conflicts(log: EventLog) -> None:
    """Appending to a new session expecting seq 1 is a version conflict."""
    with pytest.raises(VersionConflictError):
        log.append("s", usage(1), expected_seq=1)


def test_stale_expected_seq_conflicts(log: EventLog) -> None:
    """Appending with an outdated expected seq raises VersionConflictError."""
    log.append("s", usage(2), expected_seq=0)
    with pytest.raises(VersionConflictError):
        log.append("s", usage(1), expected_seq=1)


def test_conflict_reports_expected_and_actual_seq(log: EventLog) -> None:
    """The conflict names the session, the expected seq and the actual one."""
    log.append("s", usage(2), expected_seq=0)
    with pytest.raises(VersionConflictError) as caught:
        log.append("s", usage(1), expected_seq=5)
    assert (caught.value.session_id, caught.value.expected, caught.value.actual) == ("s", 5, 2)


def test_conflicting_batch_writes_nothing(log: EventLog) -> None:
    """A batch rejected for its expected seq leaves the log unchanged."""
    log.append("s", usage(2), expected_seq=0)
    with pytest.raises(VersionConflictError):
        log.append("s", usage(3), expected_seq=0)
    assert (log.last_seq("s"), log.last_position()) == (2, 2)


def test_conflict_on_new_session_does_not_create_it(log: EventLog) -> None:
    """A rejected first batch does not create the session."""
    with pytest.raises(VersionConflictError):
        log.append("s", usage(1), expected_seq=3)
    assert log.sessions() == []


def test_batch_with_a_non_event_writes_nothing(log: EventLog) -> None:
    """A batch holding something that is not an event is refused whole."""
    with pytest.raises(TypeError):
        log.append("s", [*usage(2), {"type": "usage_reported"}], expected_seq=0)  # type: ignore[list-item]
    assert log.last_seq("s") == 0


def test_empty_batch_records_nothing(log: EventLog) -> None:
    """Appending no events returns [] and creates no session."""
    assert log.append("s", [], expected_seq=0) == []
    assert log.sessions() == []


def test_empty_batch_still_checks_expected_seq(log: EventLog) -> None:
    """An empty batch with a wrong expected seq is still a conflict."""
    with pytest.raises(VersionConflictError):
        log.append("s", [], expected_seq=2)


def test_read_bounds_are_inclusive(log: EventLog) -> None:
    """read(from_seq, to_seq) returns both ends of the range."""
    log.append("s", usage(10), expected_seq=0)
    assert [r.seq for r in log.read("s", 3, 6)] == [3, 4, 5, 6]


def test_read_from_seq_to_end(log: EventLog) -> None:
    """Without to_seq, a read runs to the session's last event."""
    log.append("s", usage(5), expected_seq=0)
    assert [r.seq for r in log.read("s", 4)] == [4, 5]


def test_read_limit_caps_the_count(log: EventLog) -> None:
    """limit returns at most that many events, from the start of the range."""
    log.append("s", usage(10), expected_seq=0)
    assert [r.seq for r in log.read("s", 2, limit=3)] == [2, 3, 4]


def test_read_past_the_end_is_empty(log: EventLog) -> None:
    """A range that starts after the last event is empty."""
    log.append("s", usage(3), expected_seq=0)
    assert log.read("s", 4) == []


def test_read_does_not_cross_into_other_sessions(log: EventLog) -> None:
    """A session's read never returns events of a session created after it."""
    log.append("a", usage(2), expected_seq=0)
    log.append("b", usage(3, start=100), expected_seq=0)
    assert {r.session_id for r in log.read("a")} == {"a"}


def test_iter_events_streams_every_event_in_order(log: EventLog) -> None:
    """iter_events yields the whole session across several internal chunks."""
    for batch in range(12):
        log.append("s", usage(100, start=batch * 100), expected_seq=batch * 100)
    streamed = [r.event for r in log.iter_events("s")]
    assert streamed == usage(1200)


def test_iter_events_respects_bounds(log: EventLog) -> None:
    """iter_events(from_seq, to_seq) yields exactly that inclusive range."""
    log.append("s", usage(20), expected_seq=0)
    assert [r.seq for r in log.iter_events("s", 5, 9)] == [5, 6, 7, 8, 9]


def test_positions_are_global_and_gap_free(log: EventLog) -> None:
    """Positions count events across all sessions in commit order, from 1."""
    log.append("a", usage(2), expected_seq=0)
    log.append("b", usage(3), expected_seq=0)
    log.append("a", usage(1), expected_seq=2)
    assert [r.position for r in log.read_all()] == [1, 2, 3, 4, 5, 6]


def test_read_all_returns_commit_order(log: EventLog) -> None:
    """read_all interleaves sessions in the order their batches committed."""
    log.append("a", usage(1), expected_seq=0)
    log.append("b", usage(1), expected_seq=0)
    log.append("a", usage(1), expected_seq=1)
    assert [(r.session_id, r.seq) for r in log.read_all()] == [("a", 1), ("b", 1), ("a", 2)]


def test_read_all_after_position_with_limit(log: EventLog) -> None:
    """read_all(after_position, limit) pages through the global order."""
    log.append("a", usage(6), expected_seq=0)
    assert [r.position for r in log.read_all(2, limit=3)] == [3, 4, 5]


def test_last_position_counts_all_events(log: EventLog) -> None:
    """last_position is the number of events in the log."""
    log.append("a", usage(2), expected_seq=0)
    log.append("b", usage(3), expected_seq=0)
    assert log.last_position() == 5


def test_last_position_of_empty_log_is_zero(log: EventLog) -> None:
    """An empty log is at position 0."""
    assert log.last_position() == 0


def test_sessions_are_listed_in_creation_order(log: EventLog) -> None:
    """sessions() lists each session once, in the order it was created."""
    for name in ["zeta", "alpha", "mid"]:
        log.append(name, usage(1), expected_seq=0)
    log.append("alpha", usage(1), expected_seq=1)
    assert log.sessions() == ["zeta", "alpha", "mid"]


def test_concurrent_appends_with_same_expected_seq_have_one_winner(log: EventLog) -> None:
    """K threads appending at the same expected seq: exactly one wins, the others conflict."""
    log.append("s", usage(1), expected_seq=0)
    threads, barrier = 8, threading.Barrier(8)
    outcomes: list[object] = []

    def contend(index: int) -> None:
        barrier.wait()
        try:
            outcomes.append(log.append("s", usage(3, start=index * 10), expected_seq=1))
        except VersionConflictError as exc:
            outcomes.append(exc)

    workers = [threading.Thread(target=contend, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    winners = [o for o in outcomes if isinstance(o, list)]
    assert len(winners) == 1 and len(outcomes) == threads


def test_race_losers_write_nothing(log: EventLog) -> None:
    """After a race at one expected seq, the log holds only the winner's batch."""
    log.append("s", usage(1), expected_seq=0)
    barrier = threading.Barrier(6)
    won: list[list[RecordedEvent]] = []

    def contend(index: int) -> None:
        barrier.wait()
        with contextlib.suppress(VersionConflictError):
            won.append(log.append("s", usage(2, start=index * 10), expected_seq=1))

    workers = [threading.Thread(target=contend, args=(i,)) for i in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert log.read("s", 2) == won[0] and log.last_position() == 3


def test_concurrent_retrying_writers_on_one_session_lose_nothing(log: EventLog) -> None:
    """Writers that retry on conflict all land, with dense seqs and no duplicates."""

    def writer(index: int) -> None:
        for step in range(10):
            while True:
                try:
                    log.append(
                        "s", usage(1, start=index * 100 + step), expected_seq=log.last_seq("s")
                    )
                    break
                except VersionConflictError:
                    continue

    workers = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    recorded = log.read("s")
    tokens = sorted(r.event.prompt_tokens for r in recorded)  # type: ignore[union-attr]
    assert [r.seq for r in recorded] == list(range(1, 61))
    assert tokens == sorted(i * 100 + s for i in range(6) for s in range(10))


def test_tailing_reader_sees_concurrent_commits_without_gaps_or_duplicates(log: EventLog) -> None:
    """A reader tailing read_all while writers append sees every position exactly once."""
    writers, batches, per_batch = 6, 15, 2
    total = writers * batches * per_batch
    done = threading.Event()

    def writer(index: int) -> None:
        for batch in range(batches):
            log.append(f"w{index}", usage(per_batch), expected_seq=batch * per_batch)

    seen: list[RecordedEvent] = []

    def reader() -> None:
        while True:
            finished = done.is_set()
            page = log.read_all(seen[-1].position if seen else 0, limit=7)
            seen.extend(page)
            if finished and not page:
                return

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
    tail = threading.Thread(target=reader)
    tail.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    tail.join()
    assert [r.position for r in seen] == list(range(1, total + 1))
    assert not [key for key, n in Counter((r.session_id, r.seq) for r in seen).items() if n > 1]


def test_tailing_reader_sees_each_session_in_seq_order(log: EventLog) -> None:
    """In the global order, each session's events appear in seq order."""

    def writer(index: int) -> None:
        for batch in range(10):
            log.append(f"w{index}", usage(3), expected_seq=batch * 3)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    by_session: dict[str, list[int]] = {}
    for recorded in log.read_all():
        by_session.setdefault(recorded.session_id, []).append(recorded.seq)
    assert all(seqs == list(range(1, 31)) for seqs in by_session.values())


def test_load_snapshot_returns_newest(log: EventLog) -> None:
    """load_snapshot returns the snapshot with the highest seq."""
    log.append("s", usage(5), expected_seq=0)
    log.save_snapshot("s", 2, b"two")
    log.save_snapshot("s", 4, b"four")
    assert log.load_snapshot("s") == (4, b"four")


def test_snapshot_seqs_lists_them_in_order_per_session(log: EventLog) -> None:
    """snapshot_seqs lists a session's snapshots ascending, and only its own."""
    log.append("s", usage(9), expected_seq=0)
    log.append("t", usage(3), expected_seq=0)
    for seq in (6, 2, 4):
        log.save_snapshot("s", seq, b"x")
    log.save_snapshot("t", 3, b"y")
    assert log.snapshot_seqs("s") == [2, 4, 6]
    assert log.snapshot_seqs("t") == [3]
    assert log.snapshot_seqs("nobody") == []


def test_deleted_snapshots_are_gone_and_the_rest_stay(log: EventLog) -> None:
    """delete_snapshots removes exactly the named ones; missing seqs are ignored."""
    log.append("s", usage(9), expected_seq=0)
    log.append("t", usage(9), expected_seq=0)
    for seq in (2, 4, 6, 8):
        log.save_snapshot("s", seq, f"s{seq}".encode())
        log.save_snapshot("t", seq, f"t{seq}".encode())
    log.delete_snapshots("s", [4, 8, 5])
    assert log.snapshot_seqs("s") == [2, 6]
    assert log.snapshot_seqs("t") == [2, 4, 6, 8]
    assert log.load_snapshot("s") == (6, b"s6")
    assert log.load_snapshot("s", 5) == (2, b"s2")
    log.delete_snapshots("nobody", [1])  # an unknown session has none to delete


def test_load_snapshot_honours_the_bound(log: EventLog) -> None:
    """With a bound, the newest snapshot at or before it is returned."""
    log.append("s", usage(5), expected_seq=0)
    log.save_snapshot("s", 2, b"two")
    log.save_snapshot("s", 4, b"four")
    assert log.load_snapshot("s", 3) == (2, b"two")


def test_load_snapshot_bound_is_inclusive(log: EventLog) -> None:
    """A snapshot exactly at the bound is returned."""
    log.append("s", usage(5), expected_seq=0)
    log.save_snapshot("s", 4, b"four")
    assert log.load_snapshot("s", 4) == (4, b"four")


def test_load_snapshot_before_any_is_none(log: EventLog) -> None:
    """A bound below every snapshot finds nothing."""
    log.append("s", usage(5), expected_seq=0)
    log.save_snapshot("s", 3, b"three")
    assert log.load_snapshot("s", 2) is None


def test_load_snapshot_is_per_session(log: EventLog) -> None:
    """Snapshots of one session are never returned for another."""
    log.append("a", usage(2), expected_seq=0)
    log.append("b", usage(2), expected_seq=0)
    log.save_snapshot("b", 2, b"b-snap")
    assert log.load_snapshot("a") is None


def test_load_snapshot_of_unknown_session_is_none(log: EventLog) -> None:
    """A session that does not exist has no snapshot."""
    assert log.load_snapshot("nobody") is None


def test_save_snapshot_of_unknown_session_raises(log: EventLog) -> None:
    """Snapshotting a session that has no events raises UnknownSessionError."""
    with pytest.raises(UnknownSessionError):
        log.save_snapshot("nobody", 1, b"x")


def test_saving_a_snapshot_again_replaces_it(log: EventLog) -> None:
    """A second snapshot at the same seq replaces the first."""
    log.append("s", usage(2), expected_seq=0)
    log.save_snapshot("s", 2, b"old")
    log.save_snapshot("s", 2, b"new")
    assert log.load_snapshot("s") == (2, b"new")


def test_large_snapshot_round_trips(log: EventLog) -> None:
    """A snapshot large enough to be compressed comes back byte for byte."""
    data = bytes(range(256)) * 400
    log.append("s", usage(1), expected_seq=0)
    log.save_snapshot("s", 1, data)
    assert log.load_snapshot("s") == (1, data)


def test_corrupt_snapshot_is_skipped(backend: Backend, log: EventLog) -> None:
    """A snapshot failing its checksum is skipped in favour of an older valid one."""
    log.append("s", usage(5), expected_seq=0)
    log.save_snapshot("s", 2, b"two")
    log.save_snapshot("s", 4, b"four")
    reopened = backend.corrupt_snapshot(log, "s", 4)
    try:
        assert reopened.load_snapshot("s") == (2, b"two")
    finally:
        reopened.close()


def test_closed_log_refuses_appends(log: EventLog) -> None:
    """Appending to a closed log raises StorageError."""
    log.close()
    with pytest.raises(StorageError):
        log.append("s", usage(1), expected_seq=0)


def test_closed_log_refuses_reads(log: EventLog) -> None:
    """Reading a closed log raises StorageError."""
    log.append("s", usage(1), expected_seq=0)
    log.close()
    with pytest.raises(StorageError):
        log.read("s")


def test_negative_expected_seq_is_rejected(log: EventLog) -> None:
    """expected_seq below zero is a ValueError."""
    with pytest.raises(ValueError):
        log.append("s", usage(1), expected_seq=-1)


def test_empty_session_id_is_rejected(log: EventLog) -> None:
    """An empty session id is a ValueError."""
    with pytest.raises(ValueError):
        log.append("", usage(1), expected_seq=0)


def test_aappend_records_like_append(log: EventLog) -> None:
    """aappend returns the recorded events, and reading gives back the same events."""

    async def go() -> list[RecordedEvent]:
        return await log.aappend("s", mixed_events(), expected_seq=0)

    recorded = asyncio.run(go())
    assert [r.seq for r in recorded] == list(range(1, 7))
    assert log.read("s") == recorded
    assert [r.event for r in recorded] == mixed_events()


def test_aappend_conflict_raises_and_writes_nothing(log: EventLog) -> None:
    """A stale expected_seq fails the awaiting task with VersionConflictError, nothing written."""
    log.append("s", usage(2), expected_seq=0)

    async def go() -> None:
        await log.aappend("s", usage(1, start=9), expected_seq=1)

    with pytest.raises(VersionConflictError):
        asyncio.run(go())
    assert log.last_seq("s") == 2 and log.last_position() == 2


def test_many_tasks_aappending_concurrently_lose_nothing(log: EventLog) -> None:
    """64 tasks on one loop, each appending to its own session one event at a time, all land."""

    async def writer(index: int) -> None:
        for step in range(5):
            await log.aappend(f"s{index}", usage(1, start=index * 10 + step), expected_seq=step)

    async def go() -> None:
        await asyncio.gather(*(writer(index) for index in range(64)))

    asyncio.run(go())
    assert log.last_position() == 320
    for index in range(64):
        tokens = [r.event.prompt_tokens for r in log.read(f"s{index}")]  # type: ignore[union-attr]
        assert tokens == [index * 10 + step for step in range(5)]


def test_tasks_on_two_loops_and_threads_append_together(log: EventLog) -> None:
    """Awaiting tasks on two event loops and blocking threads share the log without loss."""

    async def tasks(prefix: str) -> None:
        async def writer(index: int) -> None:
            for step in range(4):
                await log.aappend(f"{prefix}{index}", usage(1), expected_seq=step)

        await asyncio.gather(*(writer(index) for index in range(8)))

    def blocking(index: int) -> None:
        for step in range(4):
            log.append(f"t{index}", usage(1), expected_seq=step)

    workers = [threading.Thread(target=asyncio.run, args=(tasks(prefix),)) for prefix in "ab"]
    workers += [threading.Thread(target=blocking, args=(index,)) for index in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert log.last_position() == 3 * 8 * 4
    assert all(log.last_seq(session) == 4 for session in log.sessions())


def test_closed_log_refuses_aappend(log: EventLog) -> None:
    """Awaiting an append on a closed log raises StorageError."""
    log.close()

    async def go() -> None:
        await log.aappend("s", usage(1), expected_seq=0)

    with pytest.raises(StorageError):
        asyncio.run(go())


def test_iter_bodies_gives_seq_and_event_of_iter_events(log: EventLog) -> None:
    """iter_bodies yields (seq, event) for exactly the records iter_events yields."""
    log.append("s", mixed_events(), expected_seq=0)
    log.append("s", usage(700), expected_seq=6)
    log.append("other", usage(3), expected_seq=0)
    expected = [(record.seq, record.event) for record in log.iter_events("s")]
    assert list(log.iter_bodies("s")) == expected
    assert list(log.iter_bodies("s", 3, 600)) == expected[2:600]
    assert list(log.iter_bodies("s", 700)) == expected[699:]
    assert list(log.iter_bodies("missing")) == []
