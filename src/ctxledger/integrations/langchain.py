"""ctxledger for LangChain v1 agents and LangGraph (``pip install 'ctxledger[langchain]'``).

* :class:`LedgerMiddleware` is an agent middleware for ``langchain.agents.create_agent``. Before
  each model call it appends the agent's new messages (those after the last one it recorded) to
  a ctxledger session, then hands the model the session's bounded view (compacted when needed,
  recorded as served) instead of the full message list; after the call it records the model's
  answer. The graph's own state is left untouched: it keeps every message.
* :class:`LedgerHooks` does the same for LangGraph's ``create_react_agent``: its
  ``pre_model_hook`` returns ``{"llm_input_messages": view}``, its ``post_model_hook`` records the
  answer and changes nothing.

A middleware or hooks object takes a :class:`ctxledger.Session` (one conversation) or a
:class:`ctxledger.Host` (one session per LangGraph ``thread_id``). Messages convert both ways
(:func:`to_message`, :func:`from_message`), tool calls included; everything a LangChain message
carries besides role, text, tool calls and name (its id, metadata, content blocks, usage) rides
in ``metadata["langchain"]``, so a message converts back exactly. The view's summary reaches the
model as a ``SystemMessage``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import msgspec

from ctxledger.errors import InvalidMessageError
from ctxledger.messages import Message, ToolCall
from ctxledger.runtime.host import Host
from ctxledger.runtime.session import Session

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        messages_from_dict,
    )
    from langgraph.config import get_config
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "ctxledger.integrations.langchain needs LangChain v1 and LangGraph: "
        "pip install 'ctxledger[langchain]'"
    ) from exc

__all__ = [
    "METADATA_KEY",
    "LedgerHooks",
    "LedgerMiddleware",
    "from_message",
    "from_messages",
    "to_message",
    "to_messages",
]

#: Key of ``Message.metadata`` that holds what a LangChain message carries besides the fields.
METADATA_KEY = "langchain"

_ROLES = {"human": "user", "ai": "assistant", "AIMessageChunk": "assistant", "system": "system"}
_CHAT_ROLES = {"user", "assistant", "system"}
#: How many of a session's newest messages are searched for the last one a graph recorded.
_LOOKBACK = 64


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
    return SystemMessage(content=message.content, name=message.name)  # system, summary


def from_message(message: Message) -> BaseMessage:
    """Convert a ctxledger message (of history or of a view) to a LangChain message.

    A message made by :func:`to_message` comes back as it was, with the text the message now
    carries (a masked or truncated tool result stays so). A summary becomes a ``SystemMessage``.
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


def _lc_id(message: Message) -> str | None:
    kept = message.metadata.get(METADATA_KEY) if message.metadata else None
    if isinstance(kept, dict):
        found = kept["data"].get("id")
        return found if isinstance(found, str) else None
    return None


class _Ledger:
    """Keeps sessions in step with a graph's messages (shared by the middleware and the hooks)."""

    def __init__(self, source: Session | Host) -> None:
        if not isinstance(source, Session | Host):
            raise TypeError(f"expected a ctxledger Session or Host, got {type(source).__name__}")
        self.source = source
        self._last: dict[str, str | None] = {}  # session id -> LangChain id of its newest message
        self._converted: dict[str, dict[int, tuple[str, BaseMessage]]] = {}  # the last view's
        self._lock = threading.Lock()

    def session(self) -> Session:
        if isinstance(self.source, Session):
            return self.source
        thread = get_config().get("configurable", {}).get("thread_id")
        if thread is None:
            raise ValueError("LedgerMiddleware on a Host needs a thread_id in the graph's config")
        return self.source.session(str(thread))

    def sync(self, session: Session, messages: Sequence[BaseMessage]) -> None:
        """Append the messages after the newest one recorded (all of them if it is not there,
        as when the graph's own memory was lost: the ledger keeps the conversation)."""
        with self._lock:
            if session.id not in self._last:
                # The newest message that came from LangChain (recovery may have answered an
                # interrupted call after it).
                recent = session.current_messages(_LOOKBACK)
                found = (_lc_id(m) for m in reversed(recent))
                self._last[session.id] = next((i for i in found if i is not None), None)
            last = self._last[session.id]
        start = 0
        if last is not None:
            for index in range(len(messages) - 1, -1, -1):
                if messages[index].id == last:
                    start = index + 1
                    break
        self.record(session, [m for m in messages[start:] if m.type != "remove"])

    def record(self, session: Session, messages: Sequence[BaseMessage]) -> None:
        if not messages:
            return
        session.append_many(to_messages(messages))
        with self._lock:
            self._last[session.id] = messages[-1].id

    def view(self, session: Session, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        self.sync(session, messages)
        view = session.prepare_step().messages
        # Consecutive views share most messages: convert each (seq, text) once.
        with self._lock:
            known = self._converted.get(session.id, {})
        converted: dict[int, tuple[str, BaseMessage]] = {}
        out: list[BaseMessage] = []
        for message in view:
            seq = message.seq
            hit = known.get(seq) if seq is not None else None
            if hit is not None and hit[0] == message.content:
                result = hit[1]
            else:
                result = from_message(message)
            if seq is not None:
                converted[seq] = (message.content, result)
            out.append(result)
        with self._lock:
            self._converted[session.id] = converted
        return out


def _with_ids(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """Give each message an id (the graph keeps an id a message already has)."""
    return [m if m.id else m.model_copy(update={"id": str(uuid.uuid4())}) for m in messages]


class LedgerMiddleware(AgentMiddleware):
    """A ``create_agent`` middleware: the model sees the bounded view of a ctxledger session.

    Example::

        agent = create_agent(model, tools, middleware=[LedgerMiddleware(host)])
        agent.invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "t1"}})

    Args:
        source: A session (every thread shares it) or a host (one session per ``thread_id``).
    """

    def __init__(self, source: Session | Host) -> None:
        super().__init__()
        self._ledger = _Ledger(source)

    def wrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], ModelResponse],
    ) -> ModelResponse:
        """Record the new messages, call the model on the view, record its answer."""
        session = self._ledger.session()
        view = self._ledger.view(session, request.state["messages"])
        response = handler(request.override(messages=cast(Any, view)))
        return self._answered(session, response)

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        """Async twin of :meth:`wrap_model_call` (the ledger work runs in a worker thread)."""
        session = self._ledger.session()
        view = await asyncio.to_thread(self._ledger.view, session, request.state["messages"])
        response = await handler(request.override(messages=cast(Any, view)))
        return await asyncio.to_thread(self._answered, session, response)

    def _answered(self, session: Session, response: ModelResponse) -> ModelResponse:
        result = _with_ids(response.result)
        self._ledger.record(session, result)
        return ModelResponse(result=result, structured_response=response.structured_response)


class LedgerHooks:
    """``pre_model_hook`` and ``post_model_hook`` for LangGraph's ``create_react_agent``.

    Example::

        hooks = LedgerHooks(host.session("agent-7"))
        agent = create_react_agent(model, tools, pre_model_hook=hooks.pre_model_hook,
                                   post_model_hook=hooks.post_model_hook)

    The pre-model hook alone is enough: it records everything new, the previous answer included;
    the post-model hook records each answer as soon as it is made.

    Args:
        source: A session (every thread shares it) or a host (one session per ``thread_id``).
    """

    def __init__(self, source: Session | Host) -> None:
        self._ledger = _Ledger(source)

    def pre_model_hook(self, state: Any) -> dict[str, Any]:
        """Record the new messages; return the view as ``llm_input_messages`` (state unchanged)."""
        session = self._ledger.session()
        return {"llm_input_messages": self._ledger.view(session, _messages(state))}

    def post_model_hook(self, state: Any) -> dict[str, Any]:
        """Record the model's answer (the newest message); change nothing in the state."""
        self._ledger.sync(self._ledger.session(), _messages(state))
        return {}


def _messages(state: Any) -> list[BaseMessage]:
    messages = state["messages"] if isinstance(state, dict) else state.messages
    return list(messages)
