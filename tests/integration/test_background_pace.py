"""The pace check of background compaction is looked at again within a cycle (issue 26).

Right after a checkpoint the session's pace is one or two steps' worth: judging the whole cycle
by it (as the host did) prepared no summary until the next checkpoint, and the agent waited at
the threshold. The host now looks again a few messages on, as the domain decision does after
every batch: a session whose pace slows down in the cycle gets its summary prepared ahead.
Real LMDB host; the host's clock is injected (no real time is asserted).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_background import CONFIG, SteppingClock, _ids, events_of, timed_summarizer, turn

from ctxledger import Config, Host, replay
from ctxledger.events import (
    CheckpointCreated,
    CompactionStarted,
    MessageAppended,
    SessionOpened,
    ViewServed,
)
from ctxledger.replay import what_if
from ctxledger.storage import MemoryEventLog
from ctxledger.tooling.workload import iter_agent_steps


@pytest.mark.parametrize(("schema", "prepared"), [(5, True), (4, False)])
def test_a_pace_judged_too_fast_is_judged_again_in_the_same_cycle(
    tmp_path: Path, schema: int, prepared: bool
) -> None:
    """Fast right after the first checkpoint (no summary could be ready), then slow: the
    summary for the second compaction is prepared in the background and activated. A Config
    of schema 4 keeps the first judgement for the whole cycle, as it was served (its prepared
    summaries cannot shorten their block, so one prepared late needs a delta: more waiting)."""
    # Fast from the start: the judgement right after the first checkpoint must see a fast
    # session whatever the order in which the host's actors read the clock around it (a
    # reading of a slow clock between the checkpoint and the switch would age it by 1,000 s).
    clock = SteppingClock(1e-7)
    config = CONFIG.replace(schema_version=schema)
    with Host.open(
        tmp_path / "db",
        config=config,
        summarizer=timed_summarizer(clock),
        id_factory=_ids(),
        clock=clock,
    ) as host:
        session = host.session("a")
        n = 0
        while not events_of(host.log, "a", CheckpointCreated):
            n += 1
            session.append_many(turn(n, 90))
            session.prepare_step()
            session.wait_background()
            assert n < 200
        (first,) = events_of(host.log, "a", CheckpointCreated)
        assert first.checkpoint.summary_seconds > 0
        before = len(events_of(host.log, "a", CompactionStarted))
        prepare = config.sizes().prepare_tokens
        # Fast: the host's clock barely moves while the view passes the prepare point.
        while session.prepare_step().estimated_tokens < prepare:
            n += 1
            session.append_many(turn(n, 90))
            session.wait_background()
            assert n < 400
        n += 1
        session.append_many(turn(n, 20))
        session.wait_background()
        assert not any(s.background for s in events_of(host.log, "a", CompactionStarted)[before:])
        # Slow from here on: the next looks find a summary can be ready in time.
        clock.step = 1_000.0
        while len(events_of(host.log, "a", CheckpointCreated)) == 1:
            n += 1
            session.append_many(turn(n, 20))
            session.wait_background()
            session.prepare_step()
            assert n < 600
        second = events_of(host.log, "a", CheckpointCreated)[1]
        started = events_of(host.log, "a", CompactionStarted)[before:]
        assert any(s.background for s in started) is prepared
        assert second.prepared is prepared
    assert replay.verify(tmp_path / "db").ok


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _workload_log(seed: int, steps: int) -> MemoryEventLog:
    """The synthetic agent ``seed`` as bench/bench_background.py --simulate records it: a step
    every 0.25 s, a view after each, under a window nothing compacts in."""
    clock = _Clock()
    log = MemoryEventLog(clock=clock)
    opened = Config(context_window=10_000_000)
    log.append("agent", [SessionOpened(session_id="agent", config=opened)], expected_seq=0)
    seq = 0
    for index, step in enumerate(iter_agent_steps(seed=seed, steps=steps)):
        clock.now = index * 0.25
        appended = []
        for message in step:
            seq += 1
            appended.append(MessageAppended(message=message.with_seq(seq)))
        log.append("agent", appended, expected_seq=log.last_seq("agent"))
        clock.now += 0.001
        served = ViewServed(
            through_seq=seq, estimated_tokens=0, view_hash="", checkpoint_id=None, message_count=0
        )
        log.append("agent", [served], expected_seq=log.last_seq("agent"))
    return log


@pytest.mark.parametrize(("schema", "zero_wait"), [(5, True), (4, False)])
def test_a_long_read_over_the_threshold_finds_its_summary_ready(
    schema: int, zero_wait: bool
) -> None:
    """The workload's long file reads (a tool result at its truncation limit, a quarter of the
    window) take a session over the threshold in one step. Schema 5 keeps a summary prepared
    ahead that absorbs such a step (its prepare point a tenth of the way up, its delta due
    while the view grows), so no compaction of this agent waits; schema 4 allowed a quarter of
    the prepare distance and waits at the read (what-if at simulated time, 2 s summaries)."""
    config = Config(context_window=32_000, summary_chunk_chars=10_000_000, schema_version=schema)
    report = what_if(_workload_log(5, 120), "agent", config, summary_seconds=2.0)
    compacted = [step for step in report.steps if step.compacted]
    assert compacted
    assert all(step.waited_seconds == 0.0 for step in compacted) is zero_wait
