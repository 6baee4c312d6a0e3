"""Replay: time travel, offline rebuilds, verification and what-if over real LMDB logs."""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest

from ctxledger import (
    Config,
    ContextOverflowError,
    Host,
    HostOptions,
    InvalidSeqError,
    Message,
    ToolCall,
    replay,
)
from ctxledger.domain import SessionState
from ctxledger.events import CheckpointCreated, Event, SummaryPrepared, ViewServed
from ctxledger.replay.loading import DENSE_SNAPSHOTS, fold_session
from ctxledger.storage import EventLog, LmdbEventLog, MemoryEventLog, RecordedEvent
from ctxledger.summarizers import ExtractiveSummarizer, SummaryRequest

SMALL = Config(context_window=1500, compression_threshold=0.6, min_retain_rounds=1, micro_batch=2)


def _ids() -> Any:
    counter = itertools.count(1)
    return lambda: f"id{next(counter)}"


def drive(session, steps: int, *, size: int = 300, start: int = 0) -> list[tuple[int, str]]:  # type: ignore[no-untyped-def]
    """Run agent steps (user turn every 3rd step, tool exchanges); return (seq, view hash).

    It returns at a quiet point: whatever was set off in the background is recorded.
    """
    served = []
    for n in range(start, start + steps):
        batch = []
        if n % 3 == 0:
            batch.append(Message.user(f"step {n}: fix src/pkg/mod_{n}.py " + "u" * size))
        call = ToolCall(f"{session.id}-{n}", "bash", f'{{"command": "pytest -k t{n}"}}')
        batch += [
            Message.assistant(f"trying {n}", [call]),
            Message.tool(f"FAILED test_{n}\n" + "o" * size, call.id, "bash"),
        ]
        session.append_many(batch)
        view = session.prepare_step()
        served.append((view.through_seq, view.view_hash))
    session.wait_background()
    return served


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "db"


def test_view_at_reproduces_every_served_view(db: Path) -> None:
    """view_at(seq) rebuilds the exact hash served while seq was the newest message."""
    with Host.open(db, config=SMALL, id_factory=_ids()) as host:
        s = host.session("a")
        served = drive(s, 25)
        assert len(s.checkpoints()) >= 2
        for seq, view_hash in served:
            assert s.view_at(seq).view_hash == view_hash
    for seq, view_hash in served:
        assert replay.view_at(db, "a", seq).view_hash == view_hash


def test_view_at_includes_checkpoint_of_following_prepare_step(db: Path) -> None:
    """A checkpoint made by the prepare_step after message seq is part of view_at(seq)."""
    with Host.open(db, config=SMALL, id_factory=_ids()) as host:
        s = host.session("a")
        drive(s, 12)
        checkpoint = s.checkpoints()[0]
        records = host.log.read("a")
        made = next(r for r in records if isinstance(r.event, CheckpointCreated))
        served_after = next(
            r.event for r in records if isinstance(r.event, ViewServed) and r.seq > made.seq
        )
        view = s.view_at(served_after.through_seq)
        assert view.checkpoint_id == checkpoint.id
        assert view.mode == "compact_checkpoint"


def test_view_at_rejects_unknown_seq(db: Path) -> None:
    """A seq past the end raises InvalidSeqError."""
    with Host.open(db) as host:
        s = host.session("a")
        s.append(Message.user("hi"))
        with pytest.raises(InvalidSeqError):
            s.view_at(5)


def test_view_at_on_a_fork(db: Path) -> None:
    """view_at works on a fork, for seqs inherited from the parent and its own."""
    with Host.open(db, config=SMALL, id_factory=_ids()) as host:
        parent = host.session("p")
        parent_served = drive(parent, 9)
        fork_point = parent_served[5][0]
        child = parent.fork("c", at_seq=fork_point)
        child_served = drive(child, 6, start=100)
        drive(parent, 3, start=200)
        for seq, view_hash in parent_served[:5] + child_served:
            assert child.view_at(seq).view_hash == view_hash


def test_rebuild_matches_the_live_session(db: Path) -> None:
    """rebuild() offline gives the live history, checkpoints and view."""
    with Host.open(db, config=SMALL, id_factory=_ids()) as host:
        s = host.session("a")
        drive(s, 15)
        live_view = s.build_model_view()
        history, checkpoints = s.history(), s.checkpoints()
    state = replay.rebuild(db, "a")
    assert state.history == history
    assert state.checkpoints == checkpoints
    assert state.view.view_hash == live_view.view_hash
    earlier = replay.rebuild(db, "a", through_seq=10)
    assert [m.seq for m in earlier.history] == list(range(1, 11))


class CountingLog:
    """Wraps an event log and counts the events read through it, by any read method."""

    def __init__(self, inner: EventLog) -> None:
        self.inner = inner
        self.read_events = 0

    def iter_events(self, *args: Any, **kwargs: Any) -> Iterator[RecordedEvent]:
        for record in self.inner.iter_events(*args, **kwargs):
            self.read_events += 1
            yield record

    def iter_bodies(self, *args: Any, **kwargs: Any) -> Iterator[tuple[int, Event]]:
        for body in self.inner.iter_bodies(*args, **kwargs):
            self.read_events += 1
            yield body

    def read(self, *args: Any, **kwargs: Any) -> list[RecordedEvent]:
        records = self.inner.read(*args, **kwargs)
        self.read_events += len(records)
        return records

    def read_all(self, *args: Any, **kwargs: Any) -> list[RecordedEvent]:
        records = self.inner.read_all(*args, **kwargs)
        self.read_events += len(records)
        return records

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_snapshots_bound_the_events_read(db: Path) -> None:
    """Recovery folds at most snapshot_interval events past the newest snapshot."""
    config = SMALL.replace(snapshot_interval=20)
    with Host.open(db, config=config, id_factory=_ids()) as host:
        drive(host.session("a"), 40)
        total = host.log.last_seq("a")
        assert total > 100
        counting = CountingLog(host.log)
        fast, _ = fold_session(counting, "a")  # type: ignore[arg-type]
        assert counting.read_events <= 20
        counting.read_events = 0
        full, _ = fold_session(counting, "a", use_snapshots=False)  # type: ignore[arg-type]
        assert counting.read_events == total  # the wrapper sees every read
        assert fast.to_snapshot() == full.to_snapshot()


def test_damaged_or_foreign_snapshot_is_ignored(db: Path) -> None:
    """A snapshot of an unknown version falls back to a full replay with the same result."""
    with Host.open(db, config=SMALL, id_factory=_ids()) as host:
        drive(host.session("a"), 10)
        full, last = fold_session(host.log, "a", use_snapshots=False)
        host.log.save_snapshot("a", last, b"\x81\xa7version\xcd\x03\xe7")  # version 999
        again, _ = fold_session(host.log, "a")
        assert again.to_snapshot() == full.to_snapshot()


def _raw_env(db: Path) -> lmdb.Environment:
    return lmdb.open(str(db), max_dbs=16, subdir=True)


def test_verify_is_ok_on_a_clean_log(db: Path) -> None:
    """verify() reports ok, counting sessions, events, views and checkpoints."""
    with Host.open(db, config=SMALL, id_factory=_ids()) as host:
        drive(host.session("a"), 12)
        drive(host.session("b"), 5)
        host.session("a").fork("c")
    report = replay.verify(db)
    assert report.ok, report.mismatches
    assert report.sessions == 3
    assert report.views_checked == 17
    assert report.checkpoints_checked >= 1
    assert report.events > 50


def test_verify_detects_a_changed_projection_rule(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the projection changes, the served view hashes no longer rebuild."""
    with Host.open(db, config=SMALL, id_factory=_ids()) as host:
        drive(host.session("a"), 20)
        assert host.session("a").checkpoints()
    import ctxledger.domain.projection as projection

    original = projection.summary_message
    monkeypatch.setattr(
        projection,
        "summary_message",
        lambda checkpoint: Message(
            role="summary", content="[changed] " + original(checkpoint).content
        ),
    )
    report = replay.verify(db)
    assert not report.ok
    assert {m.kind for m in report.mismatches} == {"view_hash"}
    mismatch = report.mismatches[0]
    assert mismatch.session == "a" and mismatch.expected != mismatch.actual


def test_verify_detects_a_missing_event(db: Path) -> None:
    """Deleting a stored event shows up as a seq gap."""
    with Host.open(db, config=SMALL, id_factory=_ids()) as host:
        drive(host.session("a"), 4)
        middle = host.log.read("a")[5]
    env = _raw_env(db)
    events_db = env.open_db(b"events")
    with env.begin(write=True) as txn:
        cursor = txn.cursor(db=events_db)
        keys = [key for key, _ in cursor]
        assert txn.delete(keys[middle.seq - 1], db=events_db)
    env.close()
    report = replay.verify(db, "a")
    assert not report.ok
    assert any(m.kind == "seq_gap" and m.seq == middle.seq + 1 for m in report.mismatches)


def test_verify_detects_a_corrupt_record(db: Path) -> None:
    """A flipped byte inside a stored event is reported as corrupt with its position."""
    with Host.open(db, config=SMALL, id_factory=_ids()) as host:
        drive(host.session("a"), 4)
        drive(host.session("b"), 4)
    env = _raw_env(db)
    events_db = env.open_db(b"events")
    with env.begin(write=True) as txn:
        cursor = txn.cursor(db=events_db)
        key, value = next(iter(cursor))
        cursor.next()
        key, value = cursor.item()
        damaged = bytearray(value)
        damaged[len(damaged) // 2] ^= 0xFF
        txn.put(key, bytes(damaged), db=events_db)
    env.close()
    report = replay.verify(db)
    assert not report.ok
    corrupt = [m for m in report.mismatches if m.kind == "corrupt"]
    assert corrupt and corrupt[0].session == "a" and corrupt[0].seq == 2
    assert replay.verify(db, "b").ok


def unused_prepared(db: Path, session_id: str) -> int:
    """Summaries prepared in the background and never activated, in the session's log."""
    with LmdbEventLog.open(db, readonly=True) as log:
        events = [record.event for record in log.read(session_id)]
    activated = {e.compaction_id for e in events if isinstance(e, CheckpointCreated) and e.prepared}
    return sum(
        1 for e in events if isinstance(e, SummaryPrepared) and e.compaction_id not in activated
    )


def test_what_if_under_own_config_reuses_every_summary(
    db: Path, traces: dict[str, list[Message]]
) -> None:
    """Under the log's own Config what_if reproduces the compactions without summariser calls."""
    messages = traces["miniswe-gemini3pro-django-django-13363"]
    config = Config(context_window=9_000, compression_threshold=0.7, min_retain_rounds=2)
    with Host.open(
        db,
        config=config,
        id_factory=_ids(),
        options=HostOptions(durability="none"),
    ) as host:
        s = host.session("t")
        for message in messages:
            if message.role == "assistant":
                s.prepare_step()
            s.append(message)
        s.prepare_step()
        recorded = len(s.checkpoints())
    assert recorded >= 2

    def refuse(request: object) -> str:
        raise AssertionError("the summariser must not be called for known ranges")

    same = replay.what_if(db, "t", config, summarizer=refuse)
    assert same.compactions == recorded == same.original_compactions
    assert same.summarizer_calls == 0
    # Every summary in the log is reused: the checkpoints' and any prepared in the background
    # and never activated (an older prepared one was activated while it was being written).
    assert same.reused_summaries == recorded + unused_prepared(db, "t")
    assert same.peak_tokens == same.original_peak_tokens

    lower = replay.what_if(db, "t", config.replace(compression_threshold=0.4))
    assert lower.compactions >= recorded
    assert lower.peak_tokens < same.peak_tokens
    assert lower.summarizer_calls > 0
    assert replay.verify(db).ok  # the log is untouched


def test_what_if_does_not_run_a_background_compaction_the_log_never_finished(
    db: Path,
) -> None:
    """A background compaction still running when the host stopped has no outcome in the log:
    under the log's own Config what_if holds it as the host did, and never runs it."""
    started, release = threading.Event(), threading.Event()
    offline = ExtractiveSummarizer()

    def stuck(request: SummaryRequest) -> str:
        started.set()
        release.wait(10)  # still running when the host closes
        return offline(request)

    config = Config(context_window=2_000, min_retain_rounds=1)
    try:
        with Host.open(db, config=config, summarizer=stuck) as host:
            session = host.session("t")
            for n in range(7):  # past prepare_threshold, below the threshold
                session.append(Message.user(f"question {n} " + "x" * 300))
                session.prepare_step()
                session.append(Message.assistant(f"answer {n} " + "y" * 300))
            assert started.wait(10)  # the background compaction was started (and recorded)
    finally:
        release.set()
    with LmdbEventLog.open(db, readonly=True) as log:
        kinds = [type(record.event).__name__ for record in log.read("t")]
    assert "CompactionStarted" in kinds and "SummaryPrepared" not in kinds

    def refuse(request: SummaryRequest) -> str:
        raise AssertionError("the summariser must not be called")

    report = replay.what_if(db, "t", config, summarizer=refuse)
    assert report.summarizer_calls == 0
    assert report.compactions == report.original_compactions == 0
    assert report.summarizer_input_tokens == 0


def test_replay_accepts_an_open_log() -> None:
    """Replay functions take an open EventLog as well as a folder."""
    log = MemoryEventLog()
    host = Host(log, config=SMALL, id_factory=_ids())
    served = drive(host.session("a"), 6)
    assert replay.view_at(log, "a", served[-1][0]).view_hash == served[-1][1]
    assert replay.verify(log).ok
    host.close()


def _equivalent(log: EventLog, session_id: str) -> tuple[bytes, bytes]:
    full, _ = fold_session(log, session_id, use_snapshots=False)
    fast, _ = fold_session(log, session_id)
    return full.to_snapshot(), fast.to_snapshot()


@pytest.mark.slow
@pytest.mark.parametrize(
    "config",
    [
        Config(context_window=32_000, snapshot_interval=16),
        Config(
            context_window=8000, compression_threshold=0.6, min_retain_rounds=2, snapshot_interval=7
        ),
        Config(context_window=16_000, micro_batch=1, min_retain_rounds=4, snapshot_interval=25),
    ],
    ids=["32k", "8k-aggressive", "16k-seed-masking"],
)
def test_full_replay_equals_snapshot_plus_tail_equals_live(
    tmp_path: Path, traces: dict[str, list[Message]], config: Config
) -> None:
    """For every trace: full replay == snapshot + tail == the live state, byte for byte."""
    with Host.open(
        tmp_path / "db",
        config=config,
        id_factory=_ids(),
        options=HostOptions(durability="none"),
    ) as host:
        for name, messages in traces.items():
            s = host.session(name)
            for message in messages:
                if message.role == "assistant":
                    # A task statement larger than the 8k window makes its steps refused
                    # (ContextOverflowError, nothing recorded): replay must agree all the same.
                    with contextlib.suppress(ContextOverflowError):
                        s.prepare_step()
                s.append(message)
            s.wait_background()
            live: SessionState = s._live_state()
            full, fast = _equivalent(host.log, name)
            assert full == fast == live.to_snapshot(), name


def test_a_long_session_keeps_a_bounded_set_of_snapshots(db: Path) -> None:
    """Snapshots are pruned as the session grows; old views still rebuild from what is kept."""
    config = SMALL.replace(snapshot_interval=5, prepare_threshold=0.0)
    with Host.open(db, config=config, id_factory=_ids()) as host:
        served = drive(host.session("a"), 80)
        events = host.log.last_seq("a")
        kept = host.log.snapshot_seqs("a")
        assert events // 5 > 40  # it saved dozens ...
        assert len(kept) <= DENSE_SNAPSHOTS + (events // 5).bit_length()  # ... and keeps few
        newest = max(kept)
        recent = [s for s in kept if newest - s < DENSE_SNAPSHOTS * 5]
        assert len(recent) >= DENSE_SNAPSHOTS - 1  # one per interval (a batch may skip one)
        for seq, view_hash in served[::7]:
            assert replay.view_at(host.log, "a", seq).view_hash == view_hash
