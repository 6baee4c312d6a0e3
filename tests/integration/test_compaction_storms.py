"""No compaction storms: a floor above the threshold is not compacted at every step (issue 17).

A Codex CLI session whose system messages held 45,705 characters compacted at every model call at
a 16k window and still served views over it. Here a synthetic 45,000-character system prompt at a
16,000-token window, over a real LMDB host.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ctxledger import Config, ContextOverflowError, Host, Message, ToolCall
from ctxledger.events import CompactionStarted, ViewServed
from ctxledger.replay import verify
from ctxledger.storage import LmdbEventLog

SYSTEM = ("You are Codex, a coding agent. Follow the repository's rules exactly. " * 700)[:45_000]
# Small summary room and no fact block, so that the floor (45,000 chars = 15,000 tokens, plus the
# summary's room and the newest step) fits the window but is far above the 12,800 threshold.
ROOMY = Config(context_window=16_000, summary_max_chars=900, fact_index_chars=0)


def _drive(path: Path, config: Config, steps: int = 60) -> Counter[str]:
    with Host.open(path) as host:
        session = host.session("codex", config=config)
        session.append(Message.system(SYSTEM))
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
        }
    )


def test_a_floor_above_the_threshold_does_not_compact_at_every_step(tmp_path: Path) -> None:
    """60 steps: a handful of compactions, never a view over the window; the log verifies."""
    counts = _drive(tmp_path / "log", ROOMY)
    assert counts["views"] == 60
    assert 1 <= counts["compactions"] <= 6, counts
    assert counts["over_window"] == 0
    assert verify(tmp_path / "log").ok


def test_without_the_floor_guard_it_storms(tmp_path: Path) -> None:
    """The same session with the guard off (as recorded Configs decode) compacts at every step."""
    counts = _drive(tmp_path / "log", ROOMY.replace(floor_guard=False, prepare_threshold=0.0))
    assert counts["compactions"] >= 50, counts


def test_a_floor_above_the_window_raises_naming_floor_and_window(tmp_path: Path) -> None:
    """With the default rooms the floor exceeds the window: prepare_step refuses to serve."""
    with pytest.raises(ContextOverflowError, match=r"16,000 tokens") as raised:
        _drive(tmp_path / "log", Config(context_window=16_000))
    message = str(raised.value)
    assert "no compaction can shrink" in message and "alone needs" in message
    with LmdbEventLog.open(tmp_path / "log", readonly=True) as log:
        events = [record.event for record in log.read("codex")]
    assert not any(isinstance(e, CompactionStarted) for e in events)
    views = [e for e in events if isinstance(e, ViewServed)]
    assert views and all(v.estimated_tokens <= 16_000 for v in views)
