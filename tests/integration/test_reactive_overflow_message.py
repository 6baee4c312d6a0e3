"""A reactive compaction that gives up says what it tried: attempts, outcomes, none claimed."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxledger import Config, ContextOverflowError, Host, Message

CONFIG = Config(context_window=4000, min_retain_rounds=2)


def test_a_view_too_small_to_compact_names_no_compaction(tmp_path: Path) -> None:
    """A 2-message view rejected on the first call: every attempt is listed, none compacted."""
    with Host.open(tmp_path / "db", config=CONFIG) as host:
        session = host.session("s")
        session.append_many([Message.user("hi"), Message.assistant("hello")])
        with pytest.raises(ContextOverflowError) as refused:
            session.reactive_compact("prompt is too long")
        assert session.checkpoints() == []
    text = str(refused.value)
    assert "3 reactive compaction attempts since the last append" in text
    assert "outcomes by attempt: 1-3 messages_not_enough" in text
    assert "none compacted" in text and "after 3 reactive compactions" not in text


def test_attempts_that_compacted_are_counted_as_recorded(tmp_path: Path) -> None:
    """After the allowed attempts the error counts exactly the checkpoints they recorded, and
    an append starts the count over."""
    with Host.open(tmp_path / "db", config=CONFIG) as host:
        session = host.session("s")
        for turn in range(30):
            session.append_many(
                [
                    Message.user(f"question {turn} " + "word " * 80),
                    Message.assistant(f"answer {turn} " + "text " * 80),
                ]
            )
        outcomes: list[str] = []
        with pytest.raises(ContextOverflowError) as refused:
            for _ in range(CONFIG.max_reactive_retries + 1):
                outcomes.append(session.reactive_compact("prompt is too long").reason)
        made = [c for c in session.checkpoints() if c.reason == "prompt_too_long"]
        assert len(made) == len(outcomes) == outcomes.count("compacted") >= 1
        assert f"; {len(made)} compacted)" in str(refused.value)
        assert "max_reactive_retries=3" in str(refused.value)
        session.append(Message.user("next question"))
        assert session.reactive_compact("prompt is too long").compacted  # a fresh count
