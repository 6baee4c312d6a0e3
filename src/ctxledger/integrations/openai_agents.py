"""A ctxledger session for the OpenAI Agents SDK (``pip install 'ctxledger[openai-agents]'``).

:class:`LedgerSession` implements the SDK's ``Session`` protocol on a :class:`ctxledger.Session`:

* ``add_items`` appends the items durably. Items map to ctxledger messages: user, system and
  developer messages one each; an assistant output message and the ``function_call`` items after
  it become one assistant message with :class:`~ctxledger.ToolCall` s; each
  ``function_call_output`` becomes a tool message. Reasoning items and every other kind ride
  along in the metadata of the message next to them (``metadata["openai_agents"]``, only when the
  items are not the plain rendering of the message), so every item round-trips exactly and none
  is dropped.
* ``get_items()`` returns the bounded model view in the SDK's item format: the summary of the
  active checkpoint as a system message, old tool outputs masked, oversize outputs truncated. It
  compacts first when needed and records the view as served, so ``ctxledger verify`` checks it.
* ``get_items(limit=N)`` returns the newest ``N`` items still in the conversation, verbatim (the
  SDK reads the tail this way to reconcile its own writes), and records no view. The view is
  bounded already, so leave ``SessionSettings.limit`` unset: a limit would replace the view by
  that raw tail.
* ``pop_item`` and ``clear_session`` are events (:meth:`ctxledger.Session.retract_last`,
  :meth:`ctxledger.Session.clear`): history is never edited. ``pop_item`` removes the newest
  item; when it shares a message with earlier items (parallel calls), the message is retracted
  and the earlier items are put back in the same atomic batch. It raises
  :class:`~ctxledger.InvalidSeqError` when the newest item is already covered by a summary.

The SDK reads a session once per ``Runner.run``; within a run it sends the history plus every
item of that run. Pass :meth:`LedgerSession.run_config` (or :meth:`LedgerSession.filter_model_input`
as ``RunConfig.call_model_input_filter``) to send the bounded view on every model call instead.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, cast

import msgspec

from ctxledger.errors import InvalidMessageError
from ctxledger.messages import Message, ToolCall
from ctxledger.runtime.session import Session

try:
    from agents import RunConfig, TResponseInputItem
    from agents.run_config import CallModelData, ModelInputData
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "ctxledger.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'ctxledger[openai-agents]'"
    ) from exc

__all__ = ["METADATA_KEY", "LedgerSession", "items_to_messages", "message_to_items"]

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


def _kind(item: Mapping[str, Any]) -> str:
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


def _normalise(item: Any) -> dict[str, Any]:
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
        item = _normalise(raw)
        kind = _kind(item)
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
    plain form: a ``{"role", "content"}`` message (a summary as a system message; an assistant's
    text, even empty, before its ``function_call`` items), ``function_call_output`` for a tool
    result.
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
        {"role": "system" if role == "summary" else role, "content": message.content}
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


def _fingerprint(item: Any) -> str:
    return json.dumps(item, sort_keys=True, default=str)


class LedgerSession:
    """The OpenAI Agents SDK ``Session`` protocol on a :class:`ctxledger.Session`.

    Example::

        with Host.open("agent-db", config=Config(context_window=32_000)) as host:
            session = LedgerSession(host.session("user-42"))
            result = await Runner.run(agent, "hi", session=session, run_config=session.run_config())

    Attributes:
        session_id: The ctxledger session id.
        session_settings: Always None: the SDK's ``limit`` would replace the bounded view by a raw
            tail (see the module docstring).
        ledger: The ctxledger session.
    """

    session_settings: Any = None

    def __init__(self, session: Session, *, remember: int = 4096) -> None:
        """Wrap ``session``.

        Args:
            session: The ctxledger session (``host.session(id)``).
            remember: How many fingerprints of recently stored and served items
                :meth:`filter_model_input` keeps, to tell stored items from unsaved ones.
        """
        self.ledger = session
        self.session_id = session.id
        self._known: deque[str] = deque(maxlen=remember)
        self._rendered: dict[int, tuple[str, bytes]] = {}  # the last view's items, by seq

    def __repr__(self) -> str:
        return f"<LedgerSession {self.session_id!r}>"

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """Return the bounded model view as SDK items (``limit=None``), else the raw tail.

        Without a limit the session compacts if needed and the view is recorded as served. With
        ``limit=N`` the newest ``N`` items still in the conversation are returned verbatim.
        """
        if limit is None:
            view = await self.ledger.aprepare_step()
            items = self._render(view.messages)
            self._known.extend(_fingerprint(item) for item in items)
        else:
            if limit <= 0:
                return []
            messages = await self.ledger.acurrent_messages(limit)
            items = messages_to_items(messages)[-limit:]
        return cast(list[TResponseInputItem], items)

    def _render(self, messages: Iterable[Message]) -> list[dict[str, Any]]:
        """Render a view's messages; each (seq, text) is rendered once and kept encoded, so that
        every view hands out fresh item dicts at the cost of one decode."""
        rendered: dict[int, tuple[str, bytes]] = {}
        items: list[dict[str, Any]] = []
        known = self._rendered
        for message in messages:
            seq = message.seq
            hit = known.get(seq) if seq is not None else None
            if hit is not None and hit[0] == message.content:
                encoded = hit[1]
            else:
                encoded = _copy_encoder.encode(message_to_items(message))
            if seq is not None:
                rendered[seq] = (message.content, encoded)
            items.extend(_copy_decoder.decode(encoded))
        self._rendered = rendered
        return items

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` durably, as one atomic batch.

        Function calls that continue the newest message (its calls are still unanswered, as
        after ``pop_item`` took some of them) are merged into it: the message is retracted and
        put back with them, in one atomic batch.

        Raises:
            InvalidMessageError: An item does not fit the conversation (for example an output
                for a call that was never made); nothing is written.
        """
        if not items:
            return
        try:
            await self.ledger.aappend_many(items_to_messages(items))
        except InvalidMessageError:
            # More calls for the newest assistant message (put back after pop_item took some of
            # its items): merge them into it, as one atomic retraction + append.
            if not await asyncio.to_thread(self._extend_newest, items):
                raise
        self._known.extend(_fingerprint(_normalise(item)) for item in items)

    def _extend_newest(self, items: list[TResponseInputItem]) -> bool:
        newest = self.ledger.current_messages(1)
        if not newest or newest[0].role != "assistant" or not newest[0].tool_calls:
            return False
        if _kind(_normalise(items[0])) != "call":
            return False
        self.ledger.retract_last(items_to_messages([*message_to_items(newest[0]), *items]))
        return True

    async def pop_item(self) -> TResponseInputItem | None:
        """Withdraw the newest item and return it (None when the conversation is empty).

        Raises:
            InvalidSeqError: The newest item is covered by the active checkpoint's summary.
        """
        return await asyncio.to_thread(self._pop)

    def _pop(self) -> TResponseInputItem | None:
        newest = self.ledger.current_messages(1)
        if not newest:
            return None
        items = message_to_items(newest[0])
        self.ledger.retract_last(items_to_messages(items[:-1]) if len(items) > 1 else ())
        return cast(TResponseInputItem, items[-1]) if items else None

    async def clear_session(self) -> None:
        """Withdraw every item: later views start empty (history keeps them, as an event)."""
        await self.ledger.aclear()

    async def filter_model_input(self, data: CallModelData[Any]) -> ModelInputData:
        """A ``RunConfig.call_model_input_filter``: send the bounded view on every model call.

        The SDK stores each turn's items before the next model call, so its input ends with
        items this session has stored; they are replaced by the session's current view (compacted
        if needed, recorded as served). Items at the end of the input that the session has not
        stored yet are kept after the view. When no input item is known, the input is sent as it
        is.
        """
        given = list(data.model_data.input)
        known = set(self._known)
        tail = len(given)
        while tail > 0 and _fingerprint(_normalise(given[tail - 1])) not in known:
            tail -= 1
        if tail == 0:
            return data.model_data
        view = await self.get_items()
        return ModelInputData(
            input=[*view, *given[tail:]], instructions=data.model_data.instructions
        )

    def run_config(self, **options: Any) -> RunConfig:
        """Return a ``RunConfig`` whose model calls receive the bounded view.

        Args:
            options: Other ``RunConfig`` fields.
        """
        return RunConfig(call_model_input_filter=self.filter_model_input, **options)
