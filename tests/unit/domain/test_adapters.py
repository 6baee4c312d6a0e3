"""Provider adapters: OpenAI chat format and Anthropic messages format."""

from __future__ import annotations

from ctxledger import Checkpoint, Message
from ctxledger.domain import CharTokenizer, build_view, to_anthropic, to_openai
from ctxledger.events import CheckpointCreated

from .builders import call, session


def _compacted_view() -> object:
    s = session(
        Message.system("be brief"),
        Message.user("old"),
        Message.assistant("old reply"),
        Message.user("fix it"),
        Message.assistant("", [call("c1", "bash", '{"command": "ls"}')]),
        Message.tool("a.py", "c1", "bash"),
        Message.assistant("done"),
    )
    checkpoint = Checkpoint(
        id="cp", summary="S", retain_from_seq=4, covers_through_seq=3, reason="manual"
    )
    s.record(CheckpointCreated(compaction_id="c", checkpoint=checkpoint))
    return build_view(s.state, tokenizer=CharTokenizer())


def test_openai_shapes() -> None:
    """System and summary as system messages, tool calls in function shape, tool results."""
    assert _compacted_view().to_openai() == [  # type: ignore[attr-defined]
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "old"},
        {"role": "system", "content": "S"},
        {"role": "user", "content": "fix it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        {"role": "assistant", "content": "done"},
    ]


def test_openai_keeps_assistant_text_next_to_tool_calls() -> None:
    """An assistant message with text and calls keeps the text."""
    rendered = to_openai([Message.assistant("looking", [call("c1")])])
    assert rendered[0]["content"] == "looking"


def test_anthropic_shapes() -> None:
    """System top-level, summary first user block, tool_use/tool_result blocks."""
    assert _compacted_view().to_anthropic() == {  # type: ignore[attr-defined]
        "system": "be brief",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "S"},
                    {"type": "text", "text": "old"},
                    {"type": "text", "text": "fix it"},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "c1", "name": "bash", "input": {"command": "ls"}}
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "a.py"}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
        ],
    }


def test_anthropic_merges_consecutive_user_turns() -> None:
    """Results followed by a user message make one user turn, results first."""
    rendered = to_anthropic(
        [
            Message.user("a"),
            Message.assistant("", [call("c1")]),
            Message.tool("r", "c1"),
            Message.user("b"),
            Message.user("c"),
        ]
    )
    last = rendered["messages"][-1]
    assert last["role"] == "user"
    assert [block["type"] for block in last["content"]] == ["tool_result", "text", "text"]


def test_anthropic_turns_alternate() -> None:
    """No two consecutive turns share a role."""
    messages = [
        Message.user("a"),
        Message.user("b"),
        Message.assistant("x"),
        Message.assistant("y"),
    ]
    roles = [turn["role"] for turn in to_anthropic(messages)["messages"]]
    assert roles == ["user", "assistant"]


def test_anthropic_mid_conversation_system_becomes_user_text() -> None:
    """Only leading system messages go to the top-level system text."""
    rendered = to_anthropic([Message.system("top"), Message.user("u"), Message.system("note")])
    assert rendered["system"] == "top"
    assert rendered["messages"][0]["content"][-1] == {"type": "text", "text": "note"}


def test_anthropic_skips_empty_text_blocks() -> None:
    """An empty assistant text is not sent as an empty block."""
    rendered = to_anthropic([Message.user("u"), Message.assistant(""), Message.assistant("x")])
    assert rendered["messages"][1]["content"] == [{"type": "text", "text": "x"}]


def test_anthropic_summary_before_an_assistant_start() -> None:
    """When the tail starts with an assistant turn the summary gets its own user turn."""
    rendered = to_anthropic([Message(role="summary", content="S"), Message.assistant("x")])
    assert [turn["role"] for turn in rendered["messages"]] == ["user", "assistant"]
    assert rendered["messages"][0]["content"] == [{"type": "text", "text": "S"}]


def test_anthropic_view_never_starts_with_an_assistant_turn() -> None:
    """A view opening with assistant output gets a user turn first."""
    rendered = to_anthropic([Message.assistant("x")])
    assert rendered["messages"][0]["role"] == "user"


def test_anthropic_empty_tool_result_has_no_content() -> None:
    """An empty result is a tool_result block without content."""
    rendered = to_anthropic(
        [Message.user("u"), Message.assistant("", [call("c1")]), Message.tool("", "c1")]
    )
    assert rendered["messages"][-1]["content"] == [{"type": "tool_result", "tool_use_id": "c1"}]
