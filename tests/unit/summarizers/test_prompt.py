"""The prompt of the HTTP summarisers: structure, transcript rendering, and cutting answers."""

from __future__ import annotations

from ctxledger.messages import Message, ToolCall
from ctxledger.summarizers import SummaryRequest
from ctxledger.summarizers._prompt import (
    SECTION_TITLES,
    SYSTEM_PROMPT,
    build_prompt,
    fit,
    render_transcript,
)


def conversation(tool_output: str) -> list[Message]:
    """A request, a tool call and its (possibly huge) output."""
    return [
        Message.user("Why does the build fail?").with_seq(1),
        Message.assistant("", [ToolCall("c1", "bash", '{"command": "make"}')]).with_seq(2),
        Message.tool(tool_output, "c1", "bash").with_seq(3),
    ]


def test_system_prompt_asks_for_every_section() -> None:
    """The instructions name each section of the structured summary."""
    for title in SECTION_TITLES:
        assert f"## {title}" in SYSTEM_PROMPT


def test_transcript_labels_messages_with_seq_role_and_tool() -> None:
    """Each message is a block labelled with its seq and role; tool calls follow their text."""
    text = render_transcript(conversation("ok"), 10_000)
    assert text == (
        "[#1 user] Why does the build fail?\n\n"
        '[#2 assistant] \n→ bash({"command": "make"})\n\n'
        "[#3 tool bash] ok"
    )


def test_huge_tool_output_is_clipped_to_head_and_tail() -> None:
    """An output larger than the room keeps its start and its end (where errors are)."""
    output = "START\n" + "noise line\n" * 50_000 + "make: *** [all] Error 2"
    text = render_transcript(conversation(output), 4000)
    assert len(text) <= 4000
    assert "[#3 tool bash] START" in text and text.endswith("make: *** [all] Error 2")
    assert "chars…]" in text


def test_tool_outputs_are_clipped_before_user_text() -> None:
    """When room is short, the user's words stay whole and the tool output gives way."""
    request = "Please keep this whole: " + "detail " * 100
    messages = [Message.user(request).with_seq(1), *conversation("x" * 20_000)[1:]]
    text = render_transcript(messages, 3000)
    assert request in text


def test_user_prompt_holds_previous_summary_focus_and_transcript() -> None:
    """The user prompt carries the material and states the size limit."""
    request = SummaryRequest.of(
        conversation("ok"), previous_summary="## Completed work\n- set up CI", focus="the Makefile",
        max_chars=1500,
    )
    system, user = build_prompt(request, max_input_chars=50_000)
    assert system == SYSTEM_PROMPT
    assert "<previous_summary>\n## Completed work\n- set up CI\n</previous_summary>" in user
    assert "<focus>\nthe Makefile\n</focus>" in user
    assert '<transcript seqs="1-3">' in user
    assert "in at most 1500 characters, merging the previous summary." in user


def test_prompt_fits_max_input_chars() -> None:
    """System and user prompt together stay within max_input_chars."""
    request = SummaryRequest.of(conversation("y" * 500_000))
    system, user = build_prompt(request, max_input_chars=20_000)
    assert len(system) + len(user) <= 20_000


def test_fit_cuts_at_a_line_break_near_the_limit() -> None:
    """A long answer is cut at the last line break before the limit when one is close."""
    answer = "## Completed work\n- one\n- two\n- three"
    assert fit(answer, 30) == "## Completed work\n- one\n- two"


def test_fit_cuts_hard_without_a_near_line_break() -> None:
    """Without a nearby line break the answer is cut at the limit."""
    assert fit("a" * 50, 20) == "a" * 20


def test_fit_keeps_a_short_answer_whole() -> None:
    """An answer within the limit is only stripped."""
    assert fit("  summary \n", 100) == "summary"
