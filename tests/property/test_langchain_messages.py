"""Round trips between LangChain messages and ctxledger messages (issue 18)."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from ctxledger import Message
from ctxledger.integrations.langchain import from_message, from_messages, to_message, to_messages
from ctxledger.testing import conversations

words = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
ids = st.none() | st.text("abcdef0123456789-", min_size=1, max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | words,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(words, inner, max_size=3),
    max_leaves=6,
)
contents = words | st.lists(
    st.builds(lambda text: {"type": "text", "text": text}, words)
    | st.builds(lambda url: {"type": "image_url", "image_url": {"url": url}}, words),
    max_size=3,
)
common = {"id": ids, "name": st.none() | words}


@st.composite
def tool_calls(draw: st.DrawFn) -> list[dict[str, Any]]:
    count = draw(st.integers(0, 3))
    return [
        {
            "name": draw(st.text("abcxyz_", min_size=1, max_size=8)),
            "args": draw(st.dictionaries(words, json_values, max_size=3)),
            "id": f"call-{index}-{draw(st.text('abc', max_size=3))}",
            "type": "tool_call",
        }
        for index in range(count)
    ]


lc_messages: st.SearchStrategy[BaseMessage] = st.one_of(
    st.builds(HumanMessage, content=contents, **common),
    st.builds(SystemMessage, content=contents, **common),
    st.builds(
        AIMessage,
        content=contents,
        tool_calls=tool_calls(),
        response_metadata=st.dictionaries(words, json_values, max_size=2),
        usage_metadata=st.none()
        | st.builds(
            lambda i, o: {"input_tokens": i, "output_tokens": o, "total_tokens": i + o},
            st.integers(0, 10**6),
            st.integers(0, 10**6),
        ),
        **common,
    ),
    st.builds(
        ToolMessage,
        content=contents,
        tool_call_id=st.text("abc0123", min_size=1, max_size=8),
        status=st.sampled_from(["success", "error"]),
        artifact=json_values,
        **common,
    ),
    st.builds(ChatMessage, content=contents, role=st.sampled_from(["user", "critic"]), **common),
)


@given(st.lists(lc_messages, max_size=6))
def test_langchain_messages_round_trip(messages: list[BaseMessage]) -> None:
    """LangChain -> Message -> LangChain is exact, also after the log's msgpack encoding."""
    converted = to_messages(messages)
    assert from_messages(converted) == messages
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(converted), type=list[Message])
    assert from_messages(decoded) == messages
    for original, message in zip(messages, converted, strict=True):
        calls = getattr(original, "tool_calls", [])
        assert [c.id for c in message.tool_calls] == [c["id"] for c in calls]


@given(conversations(max_rounds=4, pending_last_step=True))
def test_plain_messages_round_trip_through_langchain(conversation: list[Message]) -> None:
    """Message -> LangChain -> Message is exact for messages without metadata."""
    plain = [msgspec.structs.replace(m, metadata={}) for m in conversation]
    assert to_messages(from_messages(plain)) == plain


def test_a_masked_result_and_a_summary_convert_as_shown() -> None:
    """A view's altered text wins over the stored content; a summary is a HumanMessage (a
    system message after the conversation began is refused or hoisted by providers)."""
    original = ToolMessage(content=[{"type": "text", "text": "long"}], tool_call_id="c", id="x")
    stored = to_message(original)
    masked = msgspec.structs.replace(stored, content="[Previous: used bash]")
    assert from_message(masked).content == "[Previous: used bash]"
    assert from_message(masked).id == "x"
    summary = from_message(Message(role="summary", content="so far"))
    assert isinstance(summary, HumanMessage) and summary.content == "so far"
