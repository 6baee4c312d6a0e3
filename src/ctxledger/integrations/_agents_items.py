"""SDK items <-> ctxledger messages, losslessly (see :mod:`ctxledger.integrations.openai_agents`).

This module imports nothing of the SDK: items are plain dicts (``TResponseInputItem``), or
pydantic models with ``model_dump``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, cast

import msgspec

from ctxledger.errors import InvalidMessageError
from ctxledger.events._msgpack import array_header
from ctxledger.messages import Message, ToolCall

__all__ = [
    "METADATA_KEY",
    "RecentFingerprints",
    "RenderedView",
    "ViewRenderer",
    "item_kind",
    "items_to_messages",
    "message_to_items",
    "messages_to_items",
    "normalise_item",
]

_copy_encoder = msgspec.msgpack.Encoder()
_copy_decoder = msgspec.msgpack.Decoder()

#: Key of ``Message.metadata`` that holds the SDK items a message stands for.
METADATA_KEY = "openai_agents"

_MESSAGE_ROLES = {
    "user": "user",
    "system": "system",
    "developer": "system",
    "assistant": "assistant",
}
_TEXT_KEYS = ("text", "refusal")
_copy_encoder = msgspec.msgpack.Encoder()
_copy_decoder = msgspec.msgpack.Decoder()
_json_decoder = msgspec.json.Decoder()


def item_kind(item: Mapping[str, Any]) -> str:
    """``"call"``, ``"out"`` or ``"msg"`` for a function call, its output or a message, else
    ``"other"`` (reasoning and every other kind)."""
    kind = item.get("type")
    if kind == "function_call":
        if isinstance(item.get("call_id"), str) and item["call_id"] and item.get("name"):
            return "call"
    elif kind == "function_call_output":
        if isinstance(item.get("call_id"), str) and item["call_id"]:
            return "out"
    elif kind in (None, "message") and item.get("role") in _MESSAGE_ROLES:
        return "msg"
    return "other"


def _text_of(content: Any) -> str:
    """The text of a message content or a tool output: a string, or its text parts joined."""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    if isinstance(content, list):
        for part in content:
            if isinstance(part, dict):
                texts.extend(part[key] for key in _TEXT_KEYS if isinstance(part.get(key), str))
    return "\n".join(texts)


def _strip_text(item: dict[str, Any], field: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split ``item[field]`` (a message content or a tool output) into the message text and how
    to put it back: ``{"k": "str"}`` (the field was that text), ``{"k": "part", "at", "key"}``
    (the text of its only text part), or ``{"k": "raw"}`` (kept in the item as it is)."""
    value = item.get(field)
    if isinstance(value, str):
        stripped = {key: v for key, v in item.items() if key != field}
        return stripped, {"k": "str"}
    if isinstance(value, list):
        where = [
            (index, key)
            for index, part in enumerate(value)
            if isinstance(part, dict)
            for key in _TEXT_KEYS
            if isinstance(part.get(key), str)
        ]
        if len(where) == 1:
            index, key = where[0]
            parts = list(value)
            parts[index] = {k: v for k, v in parts[index].items() if k != key}
            return {**item, field: parts}, {"k": "part", "at": index, "key": key}
    return item, {"k": "raw"}


def _put_text(stripped: dict[str, Any], field: str, how: Mapping[str, Any], text: str) -> None:
    kind = how["k"]
    if kind == "str":
        stripped[field] = text
    elif kind == "part":
        parts = stripped[field] = list(stripped[field])
        parts[how["at"]] = {**parts[how["at"]], how["key"]: text}
    elif _text_of(stripped.get(field)) != text:  # raw, but the view altered the text
        stripped[field] = text


class _Run:
    """Consecutive items that become one message."""

    def __init__(self) -> None:
        self.role: str | None = None  # None: only passive items so far
        self.entries: list[dict[str, Any]] = []
        self.items: list[dict[str, Any]] = []
        self.content = ""
        self.calls: list[ToolCall] = []
        self.call_id: str | None = None
        self.has_text = False

    def add(self, item: dict[str, Any], entry: dict[str, Any]) -> None:
        self.items.append(item)
        self.entries.append(entry)

    def message(self) -> Message:
        role = self.role or "assistant"  # passive items alone ride on an empty assistant message
        message = Message(
            role=role,
            content=self.content,
            tool_calls=tuple(self.calls),
            tool_call_id=self.call_id if role == "tool" else None,
        )
        if message_to_items(message) != self.items:
            message = msgspec.structs.replace(message, metadata={METADATA_KEY: self.entries})
        return message


def normalise_item(item: Any) -> dict[str, Any]:
    """A JSON-compatible copy of an SDK item (a dict, or a pydantic model).

    Raises:
        InvalidMessageError: The item is neither, or holds a value JSON cannot carry.
    """
    if not isinstance(item, Mapping) and hasattr(item, "model_dump"):
        item = item.model_dump(mode="json", exclude_unset=True)
    if not isinstance(item, Mapping):
        raise InvalidMessageError(f"an SDK item must be a dict, got {type(item).__name__}")
    try:
        copied = msgspec.to_builtins(dict(item), str_keys=True)
    except (TypeError, msgspec.EncodeError) as exc:
        raise InvalidMessageError(f"an SDK item is not JSON-compatible: {exc}") from None
    return cast(dict[str, Any], copied)


def items_to_messages(items: Iterable[Any]) -> list[Message]:
    """Convert SDK input items (``TResponseInputItem`` dicts) to ctxledger messages, losslessly.

    Grouping: a user, system or developer message is one message (developer as ``system``); an
    assistant output message and the function calls that follow it, up to the first output,
    are one assistant message; each function call output is one tool message. Reasoning items and
    other kinds join the message that follows them (or the last one, at the end of the batch;
    alone, an empty assistant message). :func:`message_to_items` returns the items exactly.

    Raises:
        InvalidMessageError: An item is not a JSON-compatible dict.
    """
    runs: list[_Run] = []
    current: _Run | None = None  # an assistant run that may take more calls
    passive = _Run()

    def start(role: str) -> _Run:
        nonlocal passive
        run = passive
        run.role = role
        passive = _Run()
        runs.append(run)
        return run

    for raw in items:
        item = normalise_item(raw)
        kind = item_kind(item)
        if kind == "msg":
            role = _MESSAGE_ROLES[item["role"]]
            if role == "assistant" and current is not None and current.has_text and current.calls:
                current.add(item, {"t": "other", "item": item})  # a second text among calls
                continue
            if role == "assistant" and current is not None and not current.has_text:
                run = current
            else:
                run = start(role)
                current = run if role == "assistant" else None
            stripped, how = _strip_text(item, "content")
            run.content, run.has_text = _text_of(item.get("content")), True
            run.add(item, {"t": "msg", "item": stripped, **how})
        elif kind == "call":
            if current is None:
                current = start("assistant")
            arguments = item.get("arguments")
            valid = isinstance(arguments, str) and _is_object(arguments)
            current.calls.append(
                ToolCall(item["call_id"], item["name"], arguments if valid else "{}")  # type: ignore[arg-type]
            )
            dropped = ("call_id", "name", "arguments") if valid else ("call_id", "name")
            stripped = {key: v for key, v in item.items() if key not in dropped}
            current.add(item, {"t": "call", "item": stripped})
        elif kind == "out":
            current = None
            run = start("tool")
            run.call_id = item["call_id"]
            stripped, how = _strip_text(item, "output")
            run.content = _text_of(item.get("output"))
            run.add(item, {"t": "out", "item": stripped, **how})
        elif current is not None:
            current.add(item, {"t": "other", "item": item})
        else:
            passive.add(item, {"t": "other", "item": item})
    if passive.items:
        if runs:
            runs[-1].items += passive.items
            runs[-1].entries += passive.entries
        else:
            runs.append(passive)
    return [run.message() for run in runs]


def _is_object(arguments: str) -> bool:
    try:
        return isinstance(_json_decoder.decode(arguments), dict)
    except msgspec.DecodeError:
        return False


def message_to_items(message: Message) -> list[dict[str, Any]]:
    """Render a ctxledger message (of history or of a view) as SDK input items.

    A message made by :func:`items_to_messages` gives back its items, with the text the message
    now carries (a masked or truncated output stays masked or truncated). Other messages take the
    plain form: a ``{"role", "content"}`` message (a summary as a user message, since providers
    reject or hoist system text once the conversation has begun; an assistant's text, even
    empty, before its ``function_call`` items), ``function_call_output`` for a tool result.
    """
    entries = message.metadata.get(METADATA_KEY) if message.metadata else None
    if not isinstance(entries, list):
        return _plain_items(message)
    items: list[dict[str, Any]] = []
    calls = iter(message.tool_calls)
    for entry in entries:
        item = dict(_copy_decoder.decode(_copy_encoder.encode(entry["item"])))
        kind = entry["t"]
        if kind == "msg":
            _put_text(item, "content", entry, message.content)
        elif kind == "out":
            _put_text(item, "output", entry, message.content)
        elif kind == "call":
            call = next(calls)
            item["call_id"], item["name"] = call.id, call.name
            item.setdefault("arguments", call.arguments)
        items.append(item)
    return items


def _plain_items(message: Message) -> list[dict[str, Any]]:
    role = message.role
    if role == "tool":
        return [
            {
                "type": "function_call_output",
                "call_id": message.tool_call_id,
                "output": message.content,
            }
        ]
    # An assistant message always opens with its text item (even empty), so that its calls are
    # not read back as the calls of the assistant message before it.
    items: list[dict[str, Any]] = [
        {"role": "user" if role == "summary" else role, "content": message.content}
    ]
    items.extend(
        {
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments,
        }
        for call in message.tool_calls
    )
    return items


def messages_to_items(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Render messages as SDK input items, in order (see :func:`message_to_items`)."""
    return [item for message in messages for item in message_to_items(message)]


class RenderedView(NamedTuple):
    """A session's last view as served, its items encoded one by one, and whether a message
    other than a system message came in it (later system messages are sent as user ones)."""

    messages: tuple[Message, ...]
    parts: tuple[bytes, ...]
    begun: bool


class ViewRenderer:
    """Renders a session's views as SDK items for ``LedgerSession.get_items``: each (seq, text)
    is rendered once and kept encoded, item by item, so that every view hands out fresh item
    dicts at the cost of one decode of them all."""

    __slots__ = ("_last", "_rendered")

    def __init__(self) -> None:
        # The last view's items, encoded, by seq; and that view as a whole.
        self._rendered: dict[int, tuple[str, tuple[bytes, ...]]] = {}
        self._last: RenderedView | None = None

    def render(self, messages: Iterable[Message]) -> tuple[list[dict[str, Any]], int]:
        """Render a view's messages; return the items and how many of the first ones the last
        view had.

        A view that begins with the whole of the last one (the same messages: the common case
        between compactions) takes that one's encoded items and renders only what follows it.

        System messages stay system messages only before the conversation's first other
        message; after it they are sent as user messages (so is the summary, see
        :func:`message_to_items`): no model input has a system message after another one.
        """
        shown = tuple(messages)
        known, last = self._rendered, self._last
        parts: list[bytes] = []
        rendered: dict[int, tuple[str, tuple[bytes, ...]]] = {}
        begun = False
        start = kept = 0
        if last is not None and shown[: len(last.messages)] == last.messages:
            start, begun, kept = len(last.messages), last.begun, len(last.parts)
            parts = list(last.parts)
            rendered = dict(known)
        for message in shown[start:]:
            seq = message.seq
            late_system = begun and message.role == "system"
            begun = begun or message.role != "system"
            hit = known.get(seq) if seq is not None else None
            if hit is not None and hit[0] == message.content:
                encoded = hit[1]
            elif late_system:
                encoded = (_copy_encoder.encode({"role": "user", "content": message.content}),)
            else:
                encoded = tuple(_copy_encoder.encode(item) for item in message_to_items(message))
            if seq is not None:
                rendered[seq] = (message.content, encoded)
            parts.extend(encoded)
        self._rendered = rendered
        self._last = RenderedView(shown, tuple(parts), begun)
        encoded_all = array_header(len(parts)) + b"".join(parts)
        items: list[dict[str, Any]] = _copy_decoder.decode(encoded_all)
        return items, kept


class RecentFingerprints:
    """The fingerprints of the items stored and served most recently, at most ``size``
    distinct ones (one stored again counts as recent again); a membership test costs one
    lookup, not a set made of them all."""

    __slots__ = ("_seen", "_size")

    def __init__(self, size: int) -> None:
        self._size = size
        self._seen: dict[str, None] = {}

    def add_all(self, fingerprints: Iterable[str]) -> None:
        seen = self._seen
        for fingerprint in fingerprints:
            seen.pop(fingerprint, None)
            seen[fingerprint] = None
        while len(seen) > self._size:
            del seen[next(iter(seen))]

    def __contains__(self, fingerprint: object) -> bool:
        return fingerprint in self._seen

    def __len__(self) -> int:
        return len(self._seen)
