"""Micro masking and oversize truncation of tool results in views."""

from __future__ import annotations

from ctxledger import Message
from ctxledger.domain import (
    CharTokenizer,
    build_view,
    mask_text,
    max_tool_result_chars,
    render_message,
    render_policy,
    truncate_text,
)
from ctxledger.testing import is_truncation_of

from .builders import call, step
from .builders import session as _session


def session(*messages: Message, **config: object) -> object:
    """A session with the gain rule off: these tests are about masking by batch (the rule has
    its own, test_remask_gain.py)."""
    return _session(*messages, **{"min_compaction_gain_tokens": 0, **config})


LONG = "r" * 200


def _tool_contents(s: object) -> list[str]:
    view = build_view(s.state, tokenizer=CharTokenizer())  # type: ignore[attr-defined]
    return [m.content for m in view.messages if m.role == "tool"]


def _results(count: int, content: str = LONG, name: str = "bash") -> list[Message]:
    out: list[Message] = [Message.user("go")]
    for index in range(count):
        out += step(f"c{index}", f"{content}{index}", name=name)
    return out


def test_all_but_the_last_three_long_results_are_masked() -> None:
    """micro_batch=1 reproduces the seed: exactly the last 3 results stay."""
    contents = _tool_contents(session(*_results(5), micro_batch=1))
    assert contents[:2] == [mask_text("bash")] * 2
    assert contents[2:] == [f"{LONG}{i}" for i in (2, 3, 4)]


def test_results_up_to_min_chars_are_never_masked() -> None:
    """Only results longer than micro_min_chars are masked (100 stays, 101 goes)."""
    messages = [Message.user("go")]
    messages += step("c0", "x" * 100) + step("c1", "y" * 101)
    messages += step("c2", "z") + step("c3", "z") + step("c4", "z")
    contents = _tool_contents(session(*messages, micro_batch=1))
    assert contents[0] == "x" * 100
    assert contents[1] == mask_text("bash")


def test_preserved_tools_are_never_masked() -> None:
    """Results of tools in micro_preserve_tools stay verbatim."""
    s = session(*_results(5, name="read_file"), micro_batch=1, micro_preserve_tools=("read_file",))
    assert mask_text("read_file") not in _tool_contents(s)


def test_pinned_results_are_never_masked() -> None:
    """A pinned result stays verbatim however old."""
    s = session(*_results(5), micro_batch=1)
    s.pin(3)
    assert _tool_contents(s)[0] == f"{LONG}0"


def test_mask_names_the_tool_from_the_call_when_the_result_has_no_name() -> None:
    """The placeholder uses the call's tool name."""
    messages = [Message.user("go"), Message.assistant("", [call("c0", "grep")])]
    messages.append(Message.tool(LONG, "c0"))
    messages += step("c1", "a") + step("c2", "b") + step("c3", "c")
    assert _tool_contents(session(*messages, micro_batch=1))[0] == "[Previous: used grep]"


def test_masking_moves_in_batches() -> None:
    """keep 3, batch 4: nothing masked at 6 results, 4 at 7 and still 4 at 10, 8 at 11."""
    masked = mask_text("bash")
    for count, expected in [(6, 0), (7, 4), (10, 4), (11, 8)]:
        contents = _tool_contents(session(*_results(count), micro_batch=4))
        assert contents.count(masked) == expected, count


def test_views_share_a_prefix_between_remaskings() -> None:
    """Between two boundary jumps the earlier view is a prefix of the next."""
    tokens = CharTokenizer()
    s = session(*_results(7), micro_batch=4)
    before = build_view(s.state, tokenizer=tokens).messages
    s.extend(step("c99", LONG))
    after = build_view(s.state, tokenizer=tokens).messages
    assert after[: len(before)] == before


def test_oversize_result_is_truncated_with_a_marker_naming_its_seq() -> None:
    """A result longer than the limit shows head, marker and tail, within the limit."""
    s = session(Message.user("go"), *step("c1", "h" * 5000 + "t" * 5000), context_window=1000)
    limit = max_tool_result_chars(s.state.config)
    shown = _tool_contents(s)[0]
    assert len(shown) <= limit == 750
    assert "message seq 3" in shown
    assert shown.startswith("h") and shown.endswith("t")
    assert is_truncation_of(shown, "h" * 5000 + "t" * 5000, 3)


def test_result_at_the_limit_is_not_truncated() -> None:
    """Exactly max_tool_result_chars characters stays whole; one more is truncated."""
    s = session(Message.user("go"), *step("c1", "x" * 750), context_window=1000)
    assert _tool_contents(s) == ["x" * 750]
    s = session(Message.user("go"), *step("c1", "x" * 751), context_window=1000)
    assert is_truncation_of(_tool_contents(s)[0], "x" * 751, 3)


def test_explicit_truncation_limit_is_used() -> None:
    """max_tool_result_chars set in the Config wins over the automatic one."""
    s = session(Message.user("go"), *step("c1", "x" * 5000), max_tool_result_chars=300)
    assert len(_tool_contents(s)[0]) <= 300


def test_derived_truncation_limit_is_half_the_target_in_chars() -> None:
    """A tool result is cut only when it alone would take more than half the target: window
    32000 -> target 16000 tokens -> 8000 tokens, 24,000 characters (before the two marks: a
    quarter of the threshold, 19,200); at 3,000 tokens a 2,000-character result stays whole."""
    s = session(context_window=32_000)
    assert max_tool_result_chars(s.state.config) == 24_000
    small = session(Message.user("go"), *step("c1", "x" * 2000), context_window=3_000)
    assert max_tool_result_chars(small.state.config) == 2_250
    assert _tool_contents(small) == ["x" * 2000]


def test_masking_wins_over_truncation_for_old_results() -> None:
    """An old oversize result is masked, not truncated."""
    messages = [Message.user("go"), *step("c0", "x" * 100_000)]
    messages += step("c1", "a") + step("c2", "b") + step("c3", "c")
    assert _tool_contents(session(*messages, micro_batch=1))[0] == mask_text("bash")


def test_rendering_is_idempotent() -> None:
    """Rendering a rendered message changes nothing (masked and truncated alike)."""
    s = session(*_results(4), *step("big", "y" * 50_000), micro_batch=1, context_window=1000)
    policy = render_policy(s.state)
    for message in s.state.history:
        once = render_message(s.state, policy, message)
        assert render_message(s.state, policy, once) == once


def test_truncate_text_is_idempotent_and_bounded() -> None:
    """Truncating twice equals truncating once, and stays within the limit."""
    once = truncate_text("abc" * 10_000, 500, 7)
    assert len(once) <= 500
    assert truncate_text(once, 500, 7) == once


def test_non_tool_messages_are_never_changed() -> None:
    """User and assistant messages are shown verbatim whatever their size."""
    s = session(Message.user("u" * 100_000), Message.assistant("a" * 100_000), context_window=1000)
    view = build_view(s.state, tokenizer=CharTokenizer())
    assert list(view.messages) == s.state.history
