"""The read cases of the EventLog contract: reads, streams, global order, snapshots, restarts."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ctxledger.errors import (
    InvalidArgumentError,
    StorageError,
    UnknownSessionError,
    VersionConflictError,
)
from ctxledger.storage import EventLog, RecordedEvent
from ctxledger.testing._contract_support import ContractHooks, in_threads, mixed_events, usage

__all__ = ["ReadCases"]


class ReadCases(ContractHooks):
    """Reads by session and by position, streaming, snapshots, closing, and restarts."""

    def test_read_returns_what_append_recorded(self, log: EventLog) -> None:
        """Reading a session returns exactly the recorded events, in seq order."""
        recorded = log.append("s", mixed_events(), expected_seq=0)
        assert log.read("s") == recorded

    def test_recorded_events_carry_the_appended_events(self, log: EventLog) -> None:
        """The events come back equal to the ones appended."""
        events = mixed_events()
        log.append("s", events, expected_seq=0)
        assert [r.event for r in log.read("s")] == events

    def test_last_seq_of_unknown_session_is_zero(self, log: EventLog) -> None:
        """A session with no events has last seq 0."""
        assert log.last_seq("nobody") == 0

    def test_last_seq_follows_appends(self, log: EventLog) -> None:
        """last_seq is the seq of the session's newest event."""
        log.append("s", usage(4), expected_seq=0)
        assert log.last_seq("s") == 4

    def test_read_of_unknown_session_is_empty(self, log: EventLog) -> None:
        """Reading a session that does not exist returns no events."""
        assert log.read("nobody") == []

    def test_read_bounds_are_inclusive(self, log: EventLog) -> None:
        """read(from_seq, to_seq) returns both ends of the range."""
        log.append("s", usage(10), expected_seq=0)
        assert [r.seq for r in log.read("s", 3, 6)] == [3, 4, 5, 6]

    def test_read_from_seq_to_end(self, log: EventLog) -> None:
        """Without to_seq, a read runs to the session's last event."""
        log.append("s", usage(5), expected_seq=0)
        assert [r.seq for r in log.read("s", 4)] == [4, 5]

    def test_read_limit_caps_the_count(self, log: EventLog) -> None:
        """limit returns at most that many events, from the start of the range."""
        log.append("s", usage(10), expected_seq=0)
        assert [r.seq for r in log.read("s", 2, limit=3)] == [2, 3, 4]

    def test_read_past_the_end_is_empty(self, log: EventLog) -> None:
        """A range that starts after the last event is empty."""
        log.append("s", usage(3), expected_seq=0)
        assert log.read("s", 4) == []

    def test_read_does_not_cross_into_other_sessions(self, log: EventLog) -> None:
        """A session's read never returns events of a session created after it."""
        log.append("a", usage(2), expected_seq=0)
        log.append("b", usage(3, start=100), expected_seq=0)
        assert {r.session_id for r in log.read("a")} == {"a"}

    def test_iter_events_streams_every_event_in_order(self, log: EventLog) -> None:
        """iter_events yields the whole session across several internal chunks."""
        for batch in range(12):
            log.append("s", usage(100, start=batch * 100), expected_seq=batch * 100)
        streamed = [r.event for r in log.iter_events("s")]
        assert streamed == usage(1200)

    def test_iter_events_respects_bounds(self, log: EventLog) -> None:
        """iter_events(from_seq, to_seq) yields exactly that inclusive range."""
        log.append("s", usage(20), expected_seq=0)
        assert [r.seq for r in log.iter_events("s", 5, 9)] == [5, 6, 7, 8, 9]

    def test_positions_are_global_and_gap_free(self, log: EventLog) -> None:
        """Positions count events across all sessions in commit order, from 1."""
        log.append("a", usage(2), expected_seq=0)
        log.append("b", usage(3), expected_seq=0)
        log.append("a", usage(1), expected_seq=2)
        assert [r.position for r in log.read_all()] == [1, 2, 3, 4, 5, 6]

    def test_read_all_returns_commit_order(self, log: EventLog) -> None:
        """read_all interleaves sessions in the order their batches committed."""
        log.append("a", usage(1), expected_seq=0)
        log.append("b", usage(1), expected_seq=0)
        log.append("a", usage(1), expected_seq=1)
        assert [(r.session_id, r.seq) for r in log.read_all()] == [("a", 1), ("b", 1), ("a", 2)]

    def test_read_all_after_position_with_limit(self, log: EventLog) -> None:
        """read_all(after_position, limit) pages through the global order."""
        log.append("a", usage(6), expected_seq=0)
        assert [r.position for r in log.read_all(2, limit=3)] == [3, 4, 5]

    def test_last_position_counts_all_events(self, log: EventLog) -> None:
        """last_position is the number of events in the log."""
        log.append("a", usage(2), expected_seq=0)
        log.append("b", usage(3), expected_seq=0)
        assert log.last_position() == 5

    def test_last_position_of_empty_log_is_zero(self, log: EventLog) -> None:
        """An empty log is at position 0."""
        assert log.last_position() == 0

    def test_sessions_are_listed_in_creation_order(self, log: EventLog) -> None:
        """sessions() lists each session once, in the order it was created."""
        for name in ["zeta", "alpha", "mid"]:
            log.append(name, usage(1), expected_seq=0)
        log.append("alpha", usage(1), expected_seq=1)
        assert log.sessions() == ["zeta", "alpha", "mid"]

    def test_tailing_reader_sees_concurrent_commits_without_gaps_or_duplicates(
        self, log: EventLog
    ) -> None:
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
                if (finished and not page) or len(seen) > total:  # more: the case fails below
                    return

        tail = threading.Thread(target=reader)
        tail.start()
        try:
            in_threads(writers, writer)
        finally:
            done.set()
            tail.join()
        assert [r.position for r in seen] == list(range(1, total + 1))
        assert not [key for key, n in Counter((r.session_id, r.seq) for r in seen).items() if n > 1]

    def test_tailing_reader_sees_each_session_in_seq_order(self, log: EventLog) -> None:
        """In the global order, each session's events appear in seq order."""

        def writer(index: int) -> None:
            for batch in range(10):
                log.append(f"w{index}", usage(3), expected_seq=batch * 3)

        in_threads(4, writer)
        by_session: dict[str, list[int]] = {}
        for recorded in log.read_all():
            by_session.setdefault(recorded.session_id, []).append(recorded.seq)
        assert all(seqs == list(range(1, 31)) for seqs in by_session.values())

    def test_load_snapshot_returns_newest(self, log: EventLog) -> None:
        """load_snapshot returns the snapshot with the highest seq."""
        log.append("s", usage(5), expected_seq=0)
        log.save_snapshot("s", 2, b"two")
        log.save_snapshot("s", 4, b"four")
        assert log.load_snapshot("s") == (4, b"four")

    def test_snapshot_seqs_lists_them_in_order_per_session(self, log: EventLog) -> None:
        """snapshot_seqs lists a session's snapshots ascending, and only its own."""
        log.append("s", usage(9), expected_seq=0)
        log.append("t", usage(3), expected_seq=0)
        for seq in (6, 2, 4):
            log.save_snapshot("s", seq, b"x")
        log.save_snapshot("t", 3, b"y")
        assert log.snapshot_seqs("s") == [2, 4, 6]
        assert log.snapshot_seqs("t") == [3]
        assert log.snapshot_seqs("nobody") == []

    def test_deleted_snapshots_are_gone_and_the_rest_stay(self, log: EventLog) -> None:
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

    def test_load_snapshot_honours_the_bound(self, log: EventLog) -> None:
        """With a bound, the newest snapshot at or before it is returned."""
        log.append("s", usage(5), expected_seq=0)
        log.save_snapshot("s", 2, b"two")
        log.save_snapshot("s", 4, b"four")
        assert log.load_snapshot("s", 3) == (2, b"two")

    def test_load_snapshot_bound_is_inclusive(self, log: EventLog) -> None:
        """A snapshot exactly at the bound is returned."""
        log.append("s", usage(5), expected_seq=0)
        log.save_snapshot("s", 4, b"four")
        assert log.load_snapshot("s", 4) == (4, b"four")

    def test_load_snapshot_before_any_is_none(self, log: EventLog) -> None:
        """A bound below every snapshot finds nothing."""
        log.append("s", usage(5), expected_seq=0)
        log.save_snapshot("s", 3, b"three")
        assert log.load_snapshot("s", 2) is None

    def test_load_snapshot_is_per_session(self, log: EventLog) -> None:
        """Snapshots of one session are never returned for another."""
        log.append("a", usage(2), expected_seq=0)
        log.append("b", usage(2), expected_seq=0)
        log.save_snapshot("b", 2, b"b-snap")
        assert log.load_snapshot("a") is None

    def test_load_snapshot_of_unknown_session_is_none(self, log: EventLog) -> None:
        """A session that does not exist has no snapshot."""
        assert log.load_snapshot("nobody") is None

    def test_save_snapshot_of_unknown_session_raises(self, log: EventLog) -> None:
        """Snapshotting a session that has no events raises UnknownSessionError."""
        with pytest.raises(UnknownSessionError):
            log.save_snapshot("nobody", 1, b"x")

    def test_saving_a_snapshot_again_replaces_it(self, log: EventLog) -> None:
        """A second snapshot at the same seq replaces the first."""
        log.append("s", usage(2), expected_seq=0)
        log.save_snapshot("s", 2, b"old")
        log.save_snapshot("s", 2, b"new")
        assert log.load_snapshot("s") == (2, b"new")

    def test_large_snapshot_round_trips(self, log: EventLog) -> None:
        """A snapshot large enough to be compressed comes back byte for byte."""
        data = bytes(range(256)) * 400
        log.append("s", usage(1), expected_seq=0)
        log.save_snapshot("s", 1, data)
        assert log.load_snapshot("s") == (1, data)

    def test_corrupt_snapshot_is_skipped(self, log: EventLog) -> None:
        """A snapshot failing its checksum is skipped in favour of an older valid one."""
        log.append("s", usage(5), expected_seq=0)
        log.save_snapshot("s", 2, b"two")
        log.save_snapshot("s", 4, b"four")
        reopened = self.damage_snapshot(log, "s", 4)
        try:
            assert reopened.load_snapshot("s") == (2, b"two")
        finally:
            reopened.close()

    def test_closed_log_refuses_reads(self, log: EventLog) -> None:
        """Reading a closed log raises StorageError."""
        log.append("s", usage(1), expected_seq=0)
        log.close()
        with pytest.raises(StorageError):
            log.read("s")

    def test_iter_bodies_gives_seq_and_event_of_iter_events(self, log: EventLog) -> None:
        """iter_bodies yields (seq, event) for exactly the records iter_events yields."""
        log.append("s", mixed_events(), expected_seq=0)
        log.append("s", usage(700), expected_seq=6)
        log.append("other", usage(3), expected_seq=0)
        expected = [(record.seq, record.event) for record in log.iter_events("s")]
        assert list(log.iter_bodies("s")) == expected
        assert list(log.iter_bodies("s", 3, 600)) == expected[2:600]
        assert list(log.iter_bodies("s", 700)) == expected[699:]
        assert list(log.iter_bodies("missing")) == []

    def test_read_with_limit_zero_is_empty(self, log: EventLog) -> None:
        """limit=0 returns no events; a negative limit is a ValueError."""
        log.append("s", usage(3), expected_seq=0)
        assert log.read("s", limit=0) == [] and log.read_all(limit=0) == []
        with pytest.raises(ValueError):
            log.read("s", limit=-1)

    def test_bounds_past_the_largest_seq_read_to_the_end(self, log: EventLog) -> None:
        """Seqs, positions and limits past 2**63 - 1 (PostgreSQL's bigint) are read as bounds
        past the end: nothing starts there, and everything up to them is returned."""
        recorded = log.append("s", usage(3), expected_seq=0)
        log.save_snapshot("s", 2, b"two")
        for huge in (2**63 - 1, 2**63, 2**64, 10**30):
            assert log.read("s", huge) == [] and log.read("s", huge, huge, limit=huge) == []
            assert list(log.iter_events("s", huge)) == [] and list(log.iter_bodies("s", huge)) == []
            assert log.read("s", 1, huge, limit=huge) == recorded
            assert list(log.iter_events("s", 2, huge)) == recorded[1:]
            assert log.read_all(huge) == [] and log.read_all(0, limit=huge) == recorded
            assert log.load_snapshot("s", huge) == (2, b"two")

    def test_read_bounds_that_are_not_ints_are_refused(self, log: EventLog) -> None:
        """A seq, position or limit that is not an int (a bool is not) raises
        InvalidArgumentError naming it."""
        log.append("s", usage(3), expected_seq=0)
        reads: list[tuple[str, Callable[[Any], object]]] = [
            ("from_seq", lambda bad: log.read("s", bad)),
            ("to_seq", lambda bad: log.read("s", 1, bad)),
            ("limit", lambda bad: log.read("s", limit=bad)),
            ("after_position", lambda bad: log.read_all(bad)),
            ("from_seq", lambda bad: list(log.iter_events("s", bad))),
        ]
        for bad in (1.5, "2", True):
            for argument, read in reads:
                with pytest.raises(InvalidArgumentError) as caught:
                    read(bad)
                assert caught.value.argument == argument

    def test_read_all_past_the_last_position_is_empty(self, log: EventLog) -> None:
        """A page after the newest position is empty."""
        log.append("s", usage(3), expected_seq=0)
        assert log.read_all(3) == [] and log.read_all(99) == []

    def test_committed_events_survive_a_restart(self, log: EventLog, tmp_path: Path) -> None:
        """After close and reopen, sessions, events, positions and timestamps are unchanged."""
        log.append("a", mixed_events(), expected_seq=0)
        log.append("b", usage(3), expected_seq=0)
        before = (log.sessions(), log.read_all(), log.read("a"))
        reopened = self.reopen_log(log, tmp_path)
        try:
            assert (reopened.sessions(), reopened.read_all(), reopened.read("a")) == before
        finally:
            reopened.close()

    def test_seqs_and_positions_continue_after_a_restart(
        self, log: EventLog, tmp_path: Path
    ) -> None:
        """A reopened log continues each session's seqs and the global positions."""
        log.append("a", usage(2), expected_seq=0)
        reopened = self.reopen_log(log, tmp_path)
        try:
            recorded = reopened.append("a", usage(1), expected_seq=2)
            assert (recorded[0].seq, recorded[0].position) == (3, 3)
            with pytest.raises(VersionConflictError):
                reopened.append("a", usage(1), expected_seq=2)
        finally:
            reopened.close()

    def test_snapshots_survive_a_restart(self, log: EventLog, tmp_path: Path) -> None:
        """A saved snapshot is found again after close and reopen."""
        log.append("s", usage(4), expected_seq=0)
        log.save_snapshot("s", 3, b"three")
        reopened = self.reopen_log(log, tmp_path)
        try:
            assert reopened.load_snapshot("s") == (3, b"three")
            assert reopened.snapshot_seqs("s") == [3]
        finally:
            reopened.close()
