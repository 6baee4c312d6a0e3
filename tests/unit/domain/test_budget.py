"""The budget estimate (DESIGN §2 formula) and the threshold policies."""

from __future__ import annotations

from ctxledger import Checkpoint, Config, Message
from ctxledger.domain import (
    CharTokenizer,
    DynamicThreshold,
    estimate_tokens,
    looks_failed,
    threshold_for,
)
from ctxledger.events import CheckpointCreated

from .builders import session, step

TOKENS = CharTokenizer()


def _estimate(s: object, pending: str = "") -> int:
    return estimate_tokens(s.state, tokenizer=TOKENS, pending=pending)  # type: ignore[attr-defined]


def test_estimate_is_view_chars_over_three() -> None:
    """Without usage the estimate is chars_of_view // 3."""
    s = session(Message.user("a" * 300), Message.assistant("b" * 301))
    assert _estimate(s) == 200


def test_estimate_counts_tool_call_names_and_arguments() -> None:
    """Tool-call names and arguments are part of the chars."""
    s = session(Message.user("a" * 3), *step("c1", "x" * 6, name="bash"))
    # 3 + ("bash" + '{"command": "ls"}' = 4 + 17) + 6 = 30
    assert _estimate(s) == 10


def test_pending_text_is_counted() -> None:
    """The pending argument adds to the view's chars."""
    s = session(Message.user("a" * 300))
    assert _estimate(s, pending="p" * 300) == 200


def test_provider_usage_takes_precedence_when_larger() -> None:
    """last_reported_prompt_tokens + pending chars // 3 wins over a smaller view estimate."""
    s = session(Message.user("a" * 30), Message.assistant("b" * 30))
    s.record_usage(700)
    s.append(Message.user("d" * 30))
    assert _estimate(s) == 710


def test_view_estimate_wins_when_usage_is_smaller() -> None:
    """The max of both terms is taken."""
    s = session(Message.user("a" * 3000))
    s.record_usage(5)
    assert _estimate(s) == 1000


def test_pending_chars_are_pending_argument_plus_messages_since_usage() -> None:
    """(30 chars appended since the report + 30 pending) // 3 = 20 on top of usage."""
    s = session(Message.user("a"), Message.assistant("b"))
    s.record_usage(500)
    s.append(Message.user("c" * 30))
    assert _estimate(s, pending="p" * 30) == 520


def test_usage_is_ignored_once_stale() -> None:
    """After a checkpoint the usage figure no longer counts."""
    s = session(
        Message.user("a" * 30),
        Message.assistant("b" * 30),
        Message.user("c" * 30),
        keep_first_request=False,
    )
    s.record_usage(900)
    checkpoint = Checkpoint(
        id="cp", summary="s" * 3, retain_from_seq=3, covers_through_seq=2, reason="manual"
    )
    s.record(CheckpointCreated(compaction_id="c", checkpoint=checkpoint))
    assert _estimate(s) == 11  # "s"*3 + "c"*30


def test_messages_since_usage_count_as_the_view_shows_them() -> None:
    """A huge result appended after the report counts truncated, as the view will send it."""
    s = session(Message.user("a"), context_window=1000)
    s.record_usage(100)
    s.extend(step("c1", "x" * 100_000))
    estimate = _estimate(s)
    assert estimate < 100 + 1000
    assert estimate > 100 + 600 // 3


def test_fixed_threshold_is_window_times_ratio() -> None:
    """The fixed policy: int(window * compression_threshold)."""
    assert threshold_for(session(context_window=1000).state) == 800


def test_dynamic_threshold_early_session() -> None:
    """Early (fewer than 20 assistant messages): 0.3 * window * 0.8."""
    s = session(Message.user("a"), context_window=10_000, threshold_policy="dynamic")
    assert threshold_for(s.state) == 2400


def test_dynamic_threshold_after_the_early_phase() -> None:
    """From 20 assistant messages on: 0.3 * window."""
    messages = [Message.user("go")] + [Message.assistant(f"a{i}") for i in range(20)]
    s = session(*messages, context_window=10_000, threshold_policy="dynamic")
    assert threshold_for(s.state) == 3000


def test_dynamic_threshold_while_debugging() -> None:
    """Two failed results among the last five: times 1.2 (early too: 0.3 * 0.8 * 1.2)."""
    s = session(Message.user("fix it"), context_window=10_000, threshold_policy="dynamic")
    s.extend(step("c1", "Traceback (most recent call last):\n  boom"))
    s.extend(step("c2", "<returncode>1</returncode>"))
    assert DynamicThreshold().is_debugging(s.state)
    assert threshold_for(s.state) == 2880


def test_dynamic_threshold_never_exceeds_the_fixed_one() -> None:
    """compression_threshold stays the ceiling."""
    s = session(
        Message.user("a"),
        context_window=10_000,
        compression_threshold=0.1,
        threshold_policy="dynamic",
    )
    assert threshold_for(s.state) == 1000


def test_one_failure_is_not_debugging() -> None:
    """A single failed result among the last five does not count as debugging."""
    s = session(Message.user("a"), threshold_policy="dynamic")
    s.extend(step("c1", "ValueError: bad"))
    s.extend(step("c2", "ok"))
    assert not DynamicThreshold().is_debugging(s.state)


def test_looks_failed_recognises_failures() -> None:
    """Tracebacks, error lines, non-zero exits and is_error metadata look failed."""
    failed = [
        "Traceback (most recent call last):",
        "ImportError: no module",
        "<returncode>2</returncode>",
        "bash: foo: command not found",
        "exit code 1",
    ]
    for text in failed:
        assert looks_failed(Message.tool(text, "c")), text
    assert looks_failed(
        Message(role="tool", content="x", tool_call_id="c", metadata={"is_error": True})
    )


def test_looks_failed_ignores_clean_output() -> None:
    """Plain output, 'Errors: 0' and a zero exit do not look failed."""
    for text in ["all good", "Errors: 0", "<returncode>0</returncode>", "handle error cases"]:
        assert not looks_failed(Message.tool(text, "c")), text


def test_threshold_follows_config_changes() -> None:
    """A ConfigChanged threshold applies from then on."""
    s = session(Message.user("a"), context_window=1000)
    s.change_config(Config(context_window=2000))
    assert threshold_for(s.state) == 1600
