"""bench/bench_host.py: what the summaries force on a step (:func:`forced_waits`), from the log.

The bench measures; nothing here checks a timing. The records below are made by hand, with the
commit times a host would give them, so that each rule of the function is checked exactly:
a background summary the step waited for (recorded in one batch with the checkpoint that
activates it), a foreground summary, a summary prepared in time (activated later, in a batch of
its own), a step with no summary, and a summary whose commit falls outside every step. A smoke
run checks that the closed loop reports the figure.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_helpers import load_bench, run_bench

from ctxledger.checkpoints import Checkpoint
from ctxledger.events import (
    CheckpointCreated,
    CompactionStarted,
    Event,
    MessageAppended,
    SummaryPrepared,
    ViewServed,
)
from ctxledger.messages import Message
from ctxledger.storage import RecordedEvent


def record(seq: int, at: float, event: Event) -> RecordedEvent:
    return RecordedEvent(session_id="agent-0", seq=seq, position=seq, timestamp=at, event=event)


def checkpoint(seconds: float) -> Checkpoint:
    return Checkpoint(
        id="k",
        summary="s",
        retain_from_seq=5,
        covers_through_seq=4,
        reason="threshold_exceeded",
        summary_seconds=seconds,
    )


def served(through: int) -> ViewServed:
    return ViewServed(through_seq=through, estimated_tokens=10, view_hash="h")


def started(compaction_id: str, *, background: bool) -> CompactionStarted:
    return CompactionStarted(
        compaction_id=compaction_id,
        reason="threshold_exceeded",
        retain_from_seq=5,
        covers_through_seq=4,
        background=background,
    )


def prepared(compaction_id: str, seconds: float) -> SummaryPrepared:
    return SummaryPrepared(
        compaction_id=compaction_id,
        retain_from_seq=5,
        covers_through_seq=4,
        summary="s",
        summary_seconds=seconds,
    )


def test_forced_waits_counts_only_what_a_step_waited_for_at_the_summarisers_speed() -> None:
    bench = load_bench("bench_host")
    user = MessageAppended(message=Message.user("go").with_seq(1))
    records = [
        # Step 0 (100.000-100.010) starts a background summary (b1) and serves its view.
        record(1, 100.001, user),
        record(2, 100.001, started("b1", background=True)),
        record(3, 100.001, served(1)),
        # Step 1 (100.020-100.040) waits for b1: it took 0.030 s from its start at 100.001, so it
        # could not be ready before 100.031, 11 ms into the step; recorded with its activation.
        record(4, 100.035, prepared("b1", 0.030)),
        record(5, 100.035, CheckpointCreated(compaction_id="b1", checkpoint=checkpoint(0.030),
                                              prepared=True)),
        record(6, 100.035, served(1)),
        # Step 2 (100.050-100.060) summarises in the foreground for 4 ms, then (a reactive
        # retry) for 2 ms: the longer counts.
        record(7, 100.051, started("f1", background=False)),
        record(8, 100.055, CheckpointCreated(compaction_id="f1", checkpoint=checkpoint(0.004))),
        record(9, 100.059, CheckpointCreated(compaction_id="f3", checkpoint=checkpoint(0.002))),
        record(10, 100.059, served(1)),
        # Between steps a background summary (b2) starts and is prepared in time...
        record(11, 100.061, started("b2", background=True)),
        record(12, 100.062, prepared("b2", 0.001)),
        # ... and step 3 (100.070-100.080) activates it, in a batch of its own: no wait.
        record(13, 100.071, CheckpointCreated(compaction_id="b2", checkpoint=checkpoint(0.001),
                                               prepared=True)),
        record(14, 100.071, served(1)),
        # Step 4 (100.090-100.095) has no summary. After the steps, a foreground summary
        # committed outside every step (a manual compact between them) counts for none.
        record(15, 100.091, served(1)),
        record(16, 100.200, CheckpointCreated(compaction_id="f2", checkpoint=checkpoint(0.5))),
    ]
    steps = [
        (100.000, 100.010),
        (100.020, 100.040),
        (100.050, 100.060),
        (100.070, 100.080),
        (100.090, 100.095),
    ]
    forced = bench.forced_waits(records, steps)
    assert forced == pytest.approx([0.0, 0.011, 0.004, 0.0, 0.0], abs=1e-9)


def test_a_summary_ready_before_the_awaiting_step_began_forces_nothing() -> None:
    bench = load_bench("bench_host")
    records = [
        record(1, 10.000, started("b1", background=True)),
        # Ready at 10.002 at the soonest; the step began at 10.005: the wait was the host's.
        record(2, 10.006, prepared("b1", 0.002)),
        record(3, 10.006, CheckpointCreated(compaction_id="b1", checkpoint=checkpoint(0.002),
                                            prepared=True)),
    ]
    assert bench.forced_waits(records, [(10.005, 10.009)]) == [0.0]


def test_the_closed_loop_reports_what_the_summaries_forced(tmp_path: Path) -> None:
    out = tmp_path / "host.json"
    done = run_bench(
        "bench_host.py", "--quick", "--sizes", "1", "--drivers", "threads", "--skip",
        "reopen,cpu", "--open-sessions", "8", "--open-seconds", "0.5", "--json", str(out),
        "--fact-index-chars", "0",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "summaries forced" in done.stdout
    results = json.loads(out.read_text())
    assert results["fact_index_chars"] == 0
    (row,) = results["closed"]
    assert 0.0 <= row["forced_p99_ms"] <= row["max_ms"]


def test_the_loops_run_on_the_config_the_run_chose() -> None:
    """``--fact-index-chars N`` gives the closed and open loops the bench's Config with that
    fact block room (0: none): the host every loop opens has it; the parts with a Config of
    their own keep it."""
    bench = load_bench("bench_host")
    assert bench.LOOP_CONFIG == [bench.CONFIG]
    bench.LOOP_CONFIG[0] = bench.CONFIG.replace(fact_index_chars=0)
    with bench.new_host("none", 1) as host:
        assert host.config == bench.CONFIG.replace(fact_index_chars=0)
    with bench.new_host("none", 1, bench.CPU_CONFIG) as host:
        assert host.config == bench.CPU_CONFIG
