"""The metamorphic promises of the two marks on every real trace, through what-if (issue 26).

Each trace is recorded once under a 1,000,000-token window (an agent step every 0.25 s and a
view after each; nothing compacts there), then re-projected with :func:`ctxledger.replay.what_if`
at 16k and 32k under thresholds 0.9 ... 0.5 with ``target = min(0.5, threshold - 0.2)``,
background summaries included as a host runs them:

* a lower threshold never gives a higher peak (beyond 0.5 % of the window);
* a session that reaches neither of two thresholds is served identical views under both;
* no view over the window; at 32k no view at or over the threshold;
* between two automatic compactions the history grows by at least half the gap between the
  marks, unless the first could not bring the view within half the gap of the target (what no
  cut shrinks, the newest step, lay above it).

Under CI (``CI`` set) the thresholds 0.8 and 0.5 only, the default and the lowest.
"""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest

from ctxledger import Config, Message
from ctxledger.replay import WhatIfReport, what_if
from ctxledger.storage import MemoryEventLog
from ctxledger.testing import family

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench_background import trace_log  # the bench's recording: one place for both

THRESHOLDS = (0.8, 0.5) if os.environ.get("CI") else (0.9, 0.8, 0.7, 0.6, 0.5)
SLACK = 0.005


def _history_tokens(messages: list[Message]) -> list[int]:
    """Tokens (chars // 3) of the history through each seq, from seq 1 (index 0 is seq 0)."""
    totals, chars = [0], 0
    for message in messages:
        chars += len(message.content) + sum(
            len(call.name) + len(call.arguments) for call in message.tool_calls
        )
        totals.append(chars // 3)
    return totals


def _reports(name: str, messages: list[Message], window: int) -> list[tuple[Config, WhatIfReport]]:
    log: MemoryEventLog = trace_log(name, messages, Config(context_window=1_000_000))
    return [(config, what_if(log, name, config)) for config in family(window, THRESHOLDS)]


def _check(name: str, messages: list[Message], window: int) -> None:
    runs = _reports(name, messages, window)
    history = _history_tokens(messages)
    for config, report in runs:
        sizes = config.sizes()
        threshold, target = sizes.threshold_tokens, sizes.target_tokens
        where = f"{name} at {window} under {config.compression_threshold}"
        assert not any(step.refused for step in report.steps), where
        assert all(step.view_tokens <= window for step in report.steps), where
        if window >= 32_000:
            over = [s.through_seq for s in report.steps if s.view_tokens >= threshold]
            assert not over, f"{where}: views at or over the threshold at {over}"
        compacted = [step for step in report.steps if step.compacted]
        half = (threshold - target) // 2
        for first, second in itertools.pairwise(compacted):
            grown = history[second.through_seq] - history[first.through_seq]
            if first.view_tokens <= target + half:
                assert grown >= half, (
                    f"{where}: compactions at seq {first.through_seq} and "
                    f"{second.through_seq}, {grown} tokens of history apart"
                )
    for (high, one), (low, other) in itertools.pairwise(runs):
        where = f"{name} at {window}: {high.compression_threshold} vs {low.compression_threshold}"
        assert other.peak_tokens <= one.peak_tokens + SLACK * window, (
            f"{where}: peaks {one.peak_tokens} and {other.peak_tokens}"
        )
        reached = one.compactions > 0 or any(
            step.view_tokens >= low.sizes().threshold_tokens for step in one.steps
        )
        if not reached:
            assert [s.view_hash for s in one.steps] == [s.view_hash for s in other.steps], where


@pytest.mark.slow
@pytest.mark.traces
@pytest.mark.parametrize("window", [16_000, 32_000])
def test_the_two_marks_keep_their_promises_on_every_trace(
    window: int, traces: dict[str, list[Message]]
) -> None:
    """Every trace, every threshold of the family: the metamorphic promises hold."""
    for name, messages in sorted(traces.items()):
        _check(name, messages, window)
