"""The bound that spares most appends an exact estimate is dropped by every durable event that
is not an append (test-gaps: "the estimate bound is reset after durable events that are not
appends"): a Config change that unmasks old tool results raises the estimate with no append,
and the next append must see it and start a background summary."""

from __future__ import annotations

from pathlib import Path

from ctxledger import Config, Host, Message, ToolCall
from ctxledger.events import CompactionStarted

#: Threshold 1,000 tokens; a background summary is due at 850. Tool results older than the
#: newest three are masked (micro_batch=1: at once).
MASKED = Config(
    context_window=2000,
    compression_threshold=0.5,
    min_retain_rounds=1,
    prepare_threshold=0.85,
    micro_keep_recent=3,
    micro_batch=1,
)
UNMASKED = MASKED.replace(micro_keep_recent=1000)


def test_a_config_change_that_raises_the_estimate_is_seen_by_the_next_append(
    tmp_path: Path,
) -> None:
    """Masked, the history is well under the prepare point (and a usage report made the
    bound exact); unmasked by a ConfigChanged it is over it: the next small append starts a
    background compaction."""
    with Host.open(tmp_path / "db", config=MASKED) as host:
        session = host.session("s")
        for n in range(12):
            call = ToolCall(f"c{n}", "bash", "{}")
            session.append_many(
                [
                    Message.user(f"q{n}"),
                    Message.assistant("", [call]),
                    Message.tool(f"result {n} " + "r" * 300, call.id, "bash"),
                    Message.assistant(f"ok {n}"),
                ]
            )
        assert session.build_model_view().estimated_tokens < 600  # masked: far from 850
        session.record_usage(1)  # the bound is now the exact (masked) estimate
        session.wait_background()
        assert _background_starts(host) == 0
        host.session("s", config=UNMASKED)  # ConfigChanged: no append, a larger view
        assert session.build_model_view().estimated_tokens >= 850
        session.append(Message.user("one more question"))
        session.wait_background()
        assert _background_starts(host) == 1


def _background_starts(host: Host) -> int:
    return sum(
        1
        for record in host.log.read("s")
        if isinstance(record.event, CompactionStarted) and record.event.background
    )
