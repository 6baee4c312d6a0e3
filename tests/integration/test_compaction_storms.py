"""No compaction storms: a floor above the threshold is not compacted at every step (issue 17).

A Codex CLI session whose system messages held 45,705 characters compacted at every model call at
a 16k window and still served views over it. Here a synthetic 45,000-character system prompt at a
16,000-token window, over a real LMDB host.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import msgspec
import pytest

from ctxledger import Config, ContextOverflowError, Host, Message, ToolCall
from ctxledger.config import upcast_config
from ctxledger.events import CompactionStarted, ViewServed
from ctxledger.replay import verify
from ctxledger.storage import LmdbEventLog

RULES = "You are Codex, a coding agent. Follow the repository's rules exactly. " * 1000
# The floor (45,000 chars = 15,000 tokens, plus the summary's room and the newest step) is far
# above the 12,800-token threshold; with the default rooms for the summary and the fact block it
# is above the window too, and only an empty summary would leave the newest step room.
WINDOW = Config(context_window=16_000)
ROOMY = WINDOW.replace(summary_max_chars=900, fact_index_chars=0)


def _drive(path: Path, config: Config, steps: int = 60, system: int = 45_000) -> Counter[str]:
    with Host.open(path) as host:
        session = host.session("codex", config=config)
        session.append(Message.system(RULES[:system]))
        session.append(Message.user("Fix the failing test in tests/test_app.py."))
        for n in range(steps):
            call = ToolCall(f"c{n}", "shell", '{"cmd": "pytest -x"}')
            session.append_many(
                [
                    Message.assistant(f"Step {n}.", [call]),
                    Message.tool(
                        f"FAILED test_{n} - assert {n} == 0\n" + "." * 40, call.id, "shell"
                    ),
                ]
            )
            session.prepare_step()
            session.wait_background()
    with LmdbEventLog.open(path, readonly=True) as log:
        events = [record.event for record in log.read("codex")]
    views = [e for e in events if isinstance(e, ViewServed)]
    return Counter(
        {
            "compactions": sum(isinstance(e, CompactionStarted) for e in events),
            "views": len(views),
            "over_window": sum(v.estimated_tokens > config.context_window for v in views),
            "peak": max(v.estimated_tokens for v in views),
        }
    )


def _one_mark(**fields: object) -> Config:
    """A Config as the one-mark releases built it (schema 3), with their floor guard."""
    defaults = {"prepare_threshold": 0.85, "fact_index_chars": 16_000, "floor_guard": True}
    config: Config = msgspec.convert(upcast_config({**defaults, **fields}), Config)
    return config


@pytest.mark.parametrize(
    "config",
    [_one_mark(context_window=16_000), _one_mark(context_window=16_000, summary_max_chars=900)],
    ids=["default-rooms", "small-rooms"],
)
def test_a_floor_above_the_threshold_does_not_compact_at_every_step(
    tmp_path: Path, config: Config
) -> None:
    """Under the floor guard of a one-mark Config (as recorded by the releases before the two
    marks): 60 steps, a handful of compactions, never a view over the window; the log
    verifies."""
    counts = _drive(tmp_path / "log", config)
    assert counts["views"] == 60
    assert 1 <= counts["compactions"] <= 6, counts
    assert counts["over_window"] == 0
    assert verify(tmp_path / "log").ok


@pytest.mark.parametrize("config", [WINDOW, ROOMY], ids=["default-rooms", "small-rooms"])
def test_under_two_marks_a_floor_above_the_threshold_keeps_views_near_it(
    tmp_path: Path, config: Config
) -> None:
    """Two marks, the same session: the part no cut shrinks (15,000 tokens of system prompt)
    is over the 12,800-token threshold, so views stay over it; a compaction runs whenever it
    frees half a percent of the window (a lower threshold must never peak higher), never at
    every step, and the view stays within that of what no cut shrinks, never over the window;
    the log verifies."""
    counts = _drive(tmp_path / "log", config)
    assert counts["views"] == 60
    assert 1 <= counts["compactions"] <= 30, counts
    assert counts["over_window"] == 0
    assert counts["peak"] <= 15_000 + 2 * 80 + 400, counts  # system, slack, a summary and a step
    assert verify(tmp_path / "log").ok


def test_without_the_floor_guard_it_storms(tmp_path: Path) -> None:
    """The same session under a one-mark Config with the guard off (as Configs recorded before
    the guard decode: the gain rule off too) compacts at every step."""
    config = msgspec.convert(
        upcast_config({"context_window": 16_000, "summary_max_chars": 900}), Config
    )
    assert config.legacy and not config.floor_guard
    counts = _drive(tmp_path / "log", config)
    assert counts["compactions"] >= 50, counts


def test_a_floor_above_the_window_raises_naming_floor_and_window(tmp_path: Path) -> None:
    """A 50,000-character system prompt alone exceeds 16k tokens: prepare_step refuses."""
    with pytest.raises(ContextOverflowError, match=r"16,000 tokens") as raised:
        _drive(tmp_path / "log", WINDOW, system=50_000)
    message = str(raised.value)
    assert "no compaction can shrink" in message and "alone needs 16,7" in message
    with LmdbEventLog.open(tmp_path / "log", readonly=True) as log:
        events = [record.event for record in log.read("codex")]
    assert not any(isinstance(e, CompactionStarted | ViewServed) for e in events)
