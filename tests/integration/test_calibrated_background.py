"""A calibrated session prepares its summaries in the background as any other does.

Budget keeps an upper bound of each session's estimate and grows it by the characters appended
between two measures. A session whose usage reports calibrated its tokenizer counts more tokens
a character than the host's ``chars // 3`` (the calibrated ratio is at most 3 characters a
token): a bound grown at the host's ratio fell behind the session's own estimate, budget never
looked again before the threshold, and the agent waited for every summary in the foreground,
which background compaction exists to spare it. The bound now grows at the session's own ratio.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxledger import Config, Host, HostOptions, Message
from ctxledger.events import CheckpointCreated, CompactionStarted, TokenizerCalibrated

CONFIG = Config(context_window=40_000, calibrate_after_reports=2)


@pytest.mark.parametrize("ratio", [3.0, 2.0, 1.5, 1.2])
def test_the_first_compaction_is_prepared_in_the_background(tmp_path: Path, ratio: float) -> None:
    """Usage reports pair with views at ``ratio`` characters a token; then the session grows
    without reports: its first compaction activates a summary prepared in the background."""
    with Host.open(tmp_path / "db", config=CONFIG, options=HostOptions(durability="none")) as host:
        session = host.session("s")
        view = session.step([Message.user("start " + "a" * 300)])
        for turn in range(8):
            chars = sum(len(m.content) for m in view.messages)
            batch = [
                Message.assistant("ok " + "b" * (200 + 50 * turn)),
                Message.user("more " + "c" * (300 + 70 * turn)),
            ]
            usage = {"prompt_tokens": int(chars / ratio) + 1, "completion_tokens": 5}
            view = session.step(batch, usage=usage)
        events = [record.event for record in host.log.read("s")]
        assert any(isinstance(e, TokenizerCalibrated) and e.chars_per_token for e in events)
        for turn in range(400):
            session.step([Message.assistant(f"step {turn} " + "d" * 400), Message.user("go on")])
            session.wait_background()
            if session.checkpoints():
                break
        events = [record.event for record in host.log.read("s")]
        started = [e for e in events if isinstance(e, CompactionStarted)]
        (checkpoint,) = [e for e in events if isinstance(e, CheckpointCreated)]
        assert started and started[0].background, [e.background for e in started]
        assert checkpoint.prepared  # the threshold activated the summary made ahead
