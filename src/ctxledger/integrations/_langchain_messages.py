"""LangChain messages <-> ctxledger messages, losslessly (see
:mod:`ctxledger.integrations.langchain`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

import msgspec
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
)

from ctxledger.errors import InvalidMessageError
from ctxledger.messages import Message, ToolCall

__all__ = [
    "METADATA_KEY",
    "from_message",
    "from_messages",
    "langchain_id",
    "to_message",
    "to_messages",
]

#: Key of ``Message.metadata`` that holds what a LangChain message carries besides the fields.
METADATA_KEY = "langchain"


_ROLES = {"human": "user", "ai": "assistant", "AIMessageChunk": "assistant", "system": "system"}
_CHAT_ROLES = {"user", "assistant", "system"}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for block in content if isinstance(content, list) else ():
        if isinstance(block, str):
            texts.append(block)
        elif isinstance(block, dict) and isinstance(block.get("text"), str):
            texts.append(block["text"])
    return "\n".join(texts)


def _dump(message: BaseMessage) -> dict[str, Any]:
    try:
        data = msgspec.to_builtins(message.model_dump(), str_keys=True)
    except (TypeError, msgspec.EncodeError) as exc:
        raise InvalidMessageError(
            f"a {type(message).__name__} holds a value that is not JSON-compatible: {exc}"
        ) from None
    return cast(dict[str, Any], data)


def _arguments(args: Any) -> str:
    try:
        text = json.dumps(args)
    except (TypeError, ValueError):
        return "{}"
    return text if isinstance(args, dict) else "{}"


def to_message(message: BaseMessage) -> Message:
    """Convert a LangChain message to a ctxledger :class:`~ctxledger.Message`, losslessly.

    Human, AI, system and tool messages map to the roles ``user``, ``assistant``, ``system`` and
    ``tool`` (a ``ChatMessage`` by its role, anything else to ``user``); an AI message's tool
    calls become :class:`~ctxledger.ToolCall` s (arguments as JSON). Content blocks count with
    their text. What the fields cannot hold is kept in ``metadata["langchain"]``, so
    :func:`from_message` rebuilds the message exactly.

    Raises:
        InvalidMessageError: The message holds a value that is not JSON-compatible, or does not
            make a valid ctxledger message (a tool message without a call id).
    """
    kind = message.type
    if kind in _ROLES:
        role = _ROLES[kind]
    elif kind == "tool":
        role = "tool"
    elif kind == "chat" and getattr(message, "role", None) in _CHAT_ROLES:
        role = cast(str, message.role)  # type: ignore[attr-defined]
    else:
        role = "user"
    calls: tuple[ToolCall, ...] = ()
    if role == "assistant":
        calls = tuple(
            ToolCall(
                call.get("id") or f"{message.id or 'call'}-{index}",
                call["name"],
                _arguments(call.get("args")),
            )
            for index, call in enumerate(getattr(message, "tool_calls", ()))
        )
    plain = Message(
        role=role,
        content=_text(message.content),
        tool_calls=calls,
        tool_call_id=cast(str, getattr(message, "tool_call_id", None)) if role == "tool" else None,
        name=message.name,
    )
    data = _dump(message)
    canonical = _dump(_plain_message(plain))
    extra = {
        key: value
        for key, value in data.items()
        if canonical.get(key) != value and not (key == "content" and isinstance(value, str))
    }
    if not extra and kind == _plain_message(plain).type:
        return plain
    return msgspec.structs.replace(plain, metadata={METADATA_KEY: {"type": kind, "data": extra}})


def _plain_message(message: Message) -> BaseMessage:
    role = message.role
    if role == "user":
        return HumanMessage(content=message.content, name=message.name)
    if role == "assistant":
        calls = [
            {"name": c.name, "args": json.loads(c.arguments), "id": c.id, "type": "tool_call"}
            for c in message.tool_calls
        ]
        return AIMessage(content=message.content, tool_calls=calls, name=message.name)
    if role == "tool":
        return ToolMessage(
            content=message.content, tool_call_id=message.tool_call_id or "", name=message.name
        )
    if role == "summary":  # user-side: providers reject or hoist system text mid-conversation
        return HumanMessage(content=message.content)
    return SystemMessage(content=message.content, name=message.name)


def from_message(message: Message) -> BaseMessage:
    """Convert a ctxledger message (of history or of a view) to a LangChain message.

    A message made by :func:`to_message` comes back as it was, with the text the message now
    carries (a masked or truncated tool result stays so). A summary becomes a ``HumanMessage``.
    """
    kept = message.metadata.get(METADATA_KEY) if message.metadata else None
    plain = _plain_message(message)
    if not isinstance(kept, dict):
        return plain
    data = {**plain.model_dump(), **kept["data"]}
    if _text(data.get("content")) != message.content:  # the view altered it: plain text
        data["content"] = message.content
    return messages_from_dict([{"type": kept["type"], "data": data}])[0]


def to_messages(messages: Sequence[BaseMessage]) -> list[Message]:
    """Convert LangChain messages with :func:`to_message`."""
    return [to_message(message) for message in messages]


def from_messages(messages: Sequence[Message]) -> list[BaseMessage]:
    """Convert ctxledger messages with :func:`from_message`."""
    return [from_message(message) for message in messages]


def langchain_id(message: Message) -> str | None:
    """The id of the LangChain message ``message`` was made from, if it had one."""
    kept = message.metadata.get(METADATA_KEY) if message.metadata else None
    if isinstance(kept, dict):
        found = kept["data"].get("id")
        return found if isinstance(found, str) else None
    return None
