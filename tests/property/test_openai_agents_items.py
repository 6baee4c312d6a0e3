"""Round trips between OpenAI Agents SDK items and ctxledger messages (issue 18)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from ctxledger import Config, Host, HostOptions, Message
from ctxledger.integrations.openai_agents import (
    LedgerSession,
    items_to_messages,
    message_to_items,
    messages_to_items,
)
from ctxledger.testing import conversations

words = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
ids = st.text("abcdef0123456789_", min_size=1, max_size=10)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | words,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(words, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def text_parts(draw: st.DrawFn, kind: str) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            part: dict[str, Any] = {"type": kind, "text": draw(words)}
            if kind == "output_text":
                part["annotations"] = []
            parts.append(part)
        else:
            parts.append({"type": "input_image", "image_url": draw(words), "detail": "auto"})
    return parts


@st.composite
def message_items(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["user", "system", "developer", "assistant"]))
    kind = "output_text" if role == "assistant" else "input_text"
    content = draw(words | text_parts(kind))
    item: dict[str, Any] = {"role": role, "content": content}
    if draw(st.booleans()):
        item["type"] = "message"
    if role == "assistant" and draw(st.booleans()):
        item |= {"id": draw(ids), "status": "completed"}
    return item


@st.composite
def call_items(draw: st.DrawFn) -> dict[str, Any]:
    arguments = draw(
        st.builds(lambda d: msgspec.json.encode(d).decode(), st.dictionaries(words, json_values))
        | words
    )
    item = {
        "type": "function_call",
        "call_id": draw(ids),
        "name": draw(ids),
        "arguments": arguments,
    }
    if draw(st.booleans()):
        item |= {"id": draw(ids), "status": "completed"}
    return item


@st.composite
def output_items(draw: st.DrawFn) -> dict[str, Any]:
    output = draw(words | text_parts("input_text"))
    return {"type": "function_call_output", "call_id": draw(ids), "output": output}


other_items = st.builds(
    lambda kind, extra: {"type": kind, **extra},
    st.sampled_from(["reasoning", "web_search_call", "item_reference", "compaction", "x_new"]),
    st.dictionaries(st.sampled_from(["id", "summary", "status", "encrypted_content"]), json_values),
)


def _unique_calls(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The SDK never repeats a call id (a call's id names one invocation)."""
    for index, item in enumerate(items):
        if item.get("type") == "function_call":
            item["call_id"] = f"{item['call_id']}-{index}"
    return items


any_items = st.lists(
    st.one_of(message_items(), call_items(), output_items(), other_items), max_size=12
).map(_unique_calls)


@given(any_items)
def test_any_items_round_trip_through_messages(items: list[dict[str, Any]]) -> None:
    """items -> Messages -> items is exact, whatever the kinds and their order (none dropped)."""
    messages = items_to_messages(items)
    assert messages_to_items(messages) == items
    encoded = msgspec.msgpack.encode(messages)  # as the log stores them
    assert messages_to_items(msgspec.msgpack.decode(encoded, type=list[Message])) == items


@given(conversations(max_rounds=4, pending_last_step=True))
def test_plain_messages_round_trip_through_items(conversation: list[Message]) -> None:
    """Messages -> items -> Messages is exact for messages without metadata.

    Tool names are left out: the SDK's outputs do not carry them.
    """
    plain = [
        msgspec.structs.replace(m, name=None if m.role == "tool" else m.name, metadata={})
        for m in conversation
    ]
    again = items_to_messages(messages_to_items(plain))
    assert again == plain
    assert all(not m.metadata for m in again)


@st.composite
def sdk_conversations(draw: st.DrawFn) -> list[list[dict[str, Any]]]:
    """A valid conversation as the SDK writes it: batches of decorated items."""
    conversation = draw(conversations(max_rounds=3))
    batches: list[list[dict[str, Any]]] = [[]]
    for message in conversation:
        items = message_to_items(msgspec.structs.replace(message, metadata={}))
        for item in items:
            if item.get("role") == "assistant" and draw(st.booleans()):
                item |= {"type": "message", "id": draw(ids), "status": "completed"}
                item["content"] = [
                    {"type": "output_text", "text": item["content"], "annotations": []}
                ]
            if item.get("type") == "function_call" and draw(st.booleans()):
                item["id"] = draw(ids)
        if message.role == "assistant" and draw(st.booleans()):
            items.insert(0, draw(other_items))
        if message.role in ("user", "system") and batches[-1]:
            batches.append([])  # the SDK saves each turn's input apart
        batches[-1].extend(items)
    return [batch for batch in batches if batch]


@given(batches=sdk_conversations())
def test_a_ledger_session_returns_what_was_stored(tmp_path_factory: Any, batches: Any) -> None:
    """Through a real LMDB host: the raw tail and the (uncompacted) view give the items back."""
    path: Path = tmp_path_factory.mktemp("db")
    items = [item for batch in batches for item in batch]

    async def run(session: LedgerSession) -> tuple[Any, Any]:
        for batch in batches:
            await session.add_items(batch)
        return await session.get_items(limit=len(items)), await session.get_items()

    unmasked = Config(context_window=10**6, micro_keep_recent=10**4)
    with Host.open(path, config=unmasked, options=HostOptions(durability="none")) as host:
        tail, view = asyncio.run(run(LedgerSession(host.session("s"))))
    # The Config is decoded from the log this time.
    with Host.open(path, options=HostOptions(durability="none")) as host:
        again = asyncio.run(LedgerSession(host.session("s")).get_items(limit=len(items) + 5))
    assert tail == view == again == items
