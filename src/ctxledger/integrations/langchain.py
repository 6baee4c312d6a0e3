"""ctxledger for LangChain v1 agents and LangGraph (``pip install 'ctxledger[langchain]'``).

* :class:`LedgerMiddleware` is an agent middleware for ``langchain.agents.create_agent``. Before
  each model call it appends the agent's new messages (those after the last one it recorded) to
  a ctxledger session, then hands the model the session's bounded view (compacted when needed,
  recorded as served, one commit) instead of the full message list; after the call it records the
  answer and, just before it in the same commit, its usage (``AIMessage.usage_metadata``, cache
  reads and writes included). When the
  model rejects the prompt as too long (:func:`ctxledger.is_prompt_too_long`), it compacts the
  session (harder on each attempt) and calls the model again with the smaller view, up to
  ``Config.max_reactive_retries`` times, then raises :class:`~ctxledger.ContextOverflowError`
  (from the model's error). The graph's own state is left untouched: it keeps every message,
  and a rejected call adds nothing to it.
* :class:`LedgerHooks` does the same for LangGraph's ``create_react_agent``, except the retry
  (a hook cannot repeat the model call): its ``pre_model_hook`` returns ``{"llm_input_messages":
  view}``, its ``post_model_hook`` records the answer and its usage and changes nothing.

A middleware or hooks object takes a :class:`ctxledger.Session` (one conversation) or a
:class:`ctxledger.Host` (one session per LangGraph ``thread_id``). Messages convert both ways
(:func:`to_message`, :func:`from_message`), tool calls included; everything a LangChain message
carries besides role, text, tool calls and name (its id, metadata, content blocks, usage) rides
in ``metadata["langchain"]``, so a message converts back exactly.

The model gets no system message after another message: the view's summary reaches it as a
``HumanMessage`` where the view has it (after the system prompt and the kept first request), and
a system message appended mid-conversation as a ``HumanMessage`` too, as
:meth:`ctxledger.ModelView.to_anthropic` does; providers such as Anthropic reject system messages
there, or apply them to the whole conversation.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple, cast

from ctxledger._logging import get_logger
from ctxledger.actors.host import Host
from ctxledger.actors.session import Session
from ctxledger.domain import ModelView, ReportedUsage, is_prompt_too_long
from ctxledger.domain.commands import usage_of
from ctxledger.errors import ContextOverflowError, InvalidUsageError
from ctxledger.messages import Message

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langgraph.config import get_config

    from ctxledger.integrations._langchain_messages import (
        METADATA_KEY,
        from_message,
        from_messages,
        langchain_id,
        to_message,
        to_messages,
    )
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
    "usage_counts",
]

_log = get_logger(__name__)
#: How many of a session's newest messages are searched for the last one a graph recorded.
_LOOKBACK = 64


def usage_counts(message: BaseMessage) -> tuple[int, int, int, int] | None:
    """(input, output, cache-read, cache-write) tokens of an ``AIMessage.usage_metadata``.

    LangChain's ``input_tokens`` counts every input token, cache reads and writes included
    (``input_token_details.cache_read`` / ``cache_creation``), as ctxledger's prompt tokens do.
    None for other messages, and for a model that reported no usage.
    """
    usage = getattr(message, "usage_metadata", None) if isinstance(message, AIMessage) else None
    if not usage:
        return None
    prompt = usage.get("input_tokens") or 0
    completion = usage.get("output_tokens") or 0
    details = usage.get("input_token_details") or {}
    if prompt <= 0 and completion <= 0:
        return None
    return prompt, completion, details.get("cache_read") or 0, details.get("cache_creation") or 0


class _Ledger:
    """Keeps sessions in step with a graph's messages (shared by the middleware and the hooks)."""

    def __init__(self, source: Session | Host) -> None:
        if not isinstance(source, Session | Host):
            raise TypeError(f"expected a ctxledger Session or Host, got {type(source).__name__}")
        self.source = source
        self._last: dict[str, str | None] = {}  # session id -> LangChain id of its newest message
        # The last view's messages, converted: seq -> (text, sent as a system message, message).
        self._converted: dict[str, dict[int, tuple[str, bool, BaseMessage]]] = {}
        # The last view of each session as served and as converted (see convert()).
        self._last_view: dict[str, _Converted] = {}
        self._lock = threading.Lock()

    def session(self) -> Session:
        if isinstance(self.source, Session):
            return self.source
        thread = get_config().get("configurable", {}).get("thread_id")
        if thread is None:
            raise ValueError("LedgerMiddleware on a Host needs a thread_id in the graph's config")
        return self.source.session(str(thread))

    def sync(
        self, session: Session, messages: Sequence[BaseMessage], *, serve: bool = False
    ) -> ModelView | None:
        """Append the messages after the newest one recorded (all of them if it is not there,
        as when the graph's own memory was lost: the ledger keeps the conversation).

        With ``serve``, the last batch and the next view are one step (:meth:`Session.step`,
        one commit) and the view is returned.
        """
        with self._lock:
            if session.id not in self._last:
                # The newest message that came from LangChain (recovery may have answered an
                # interrupted call after it).
                recent = session.current_messages(_LOOKBACK)
                found = (langchain_id(m) for m in reversed(recent))
                self._last[session.id] = next((i for i in found if i is not None), None)
            last = self._last[session.id]
        start = 0
        if last is not None:
            for index in range(len(messages) - 1, -1, -1):
                if messages[index].id == last:
                    start = index + 1
                    break
        return self.record(session, [m for m in messages[start:] if m.type != "remove"], serve)

    def record(
        self, session: Session, messages: Sequence[BaseMessage], serve: bool = False
    ) -> ModelView | None:
        """Append ``messages``; an answer's usage is recorded just before the answer (it
        measured the prompt that ends where the answer begins), in the answer's commit. With
        ``serve``, the last batch is appended by :meth:`Session.step` and the view it serves is
        returned."""
        # Batches that each begin with an answer (and its usage), but the first.
        batches: list[tuple[ReportedUsage | None, list[BaseMessage]]] = [(None, [])]
        for message in messages:
            counts = usage_counts(message)
            if counts is not None:
                batches.append((_checked_usage(session, counts), []))
            batches[-1][1].append(message)
        *earlier, (usage, last) = batches
        for earlier_usage, batch in earlier:
            if batch or earlier_usage is not None:
                session.append_many(to_messages(batch), usage=earlier_usage)
        view = None
        if serve:
            try:
                view = session.step(to_messages(last), usage=usage)
            except Exception:
                # The messages may be recorded even so (a view refused for the budget is refused
                # after them): the next sync looks up the newest one recorded.
                with self._lock:
                    self._last.pop(session.id, None)
                raise
        elif last or usage is not None:
            session.append_many(to_messages(last), usage=usage)
        if messages:
            with self._lock:
                self._last[session.id] = messages[-1].id
        return view

    def view(self, session: Session, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Record the new messages and serve the session's view, in one step (one commit when
        no compaction is due); return the view converted."""
        view = self.sync(session, messages, serve=True)
        assert view is not None
        return self.convert(session, view.messages)

    def convert(self, session: Session, view: Sequence[Message]) -> list[BaseMessage]:
        """The view as the model's input: no system message after another message (see the
        module doc); each (seq, text) of consecutive views is converted once.

        A view that begins with the whole of the session's last one (the same messages: the
        common case between compactions) reuses that one's conversion and converts only what
        follows it, without walking the rest.
        """
        messages = tuple(view)
        with self._lock:
            known = self._converted.get(session.id, {})
            last = self._last_view.get(session.id)
        out: list[BaseMessage] = []
        converted: dict[int, tuple[str, bool, BaseMessage]] = {}
        begun = False
        start = 0
        if last is not None and messages[: len(last.messages)] == last.messages:
            start, begun = len(last.messages), last.begun
            out = list(last.converted)
            converted = dict(known)
        for message in messages[start:]:
            seq = message.seq
            as_system = message.role == "system" and not begun
            begun = begun or message.role != "system"
            hit = known.get(seq) if seq is not None else None
            if hit is not None and hit[0] == message.content and hit[1] == as_system:
                result = hit[2]
            elif message.role == "system" and not as_system:
                result = HumanMessage(content=message.content)
            else:
                result = from_message(message)
            if seq is not None:
                converted[seq] = (message.content, as_system, result)
            out.append(result)
        with self._lock:
            self._converted[session.id] = converted
            self._last_view[session.id] = _Converted(messages, tuple(out), begun)
        return out


class _Converted(NamedTuple):
    """A session's last view, as served and as converted, and whether a message other than a
    system message came in it (later system messages are sent as user messages)."""

    messages: tuple[Message, ...]
    converted: tuple[BaseMessage, ...]
    begun: bool


def _checked_usage(session: Session, counts: tuple[int, int, int, int]) -> ReportedUsage | None:
    """The usage report of ``counts``, or None (logged) if a count is bad: the answer is good,
    and a bad count must not lose it."""
    try:
        return usage_of(*counts).usage
    except InvalidUsageError as exc:
        _log.warning("usage_not_recorded", session_id=session.id, error=str(exc))
        return None


def _with_ids(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """Give each message an id (the graph keeps an id a message already has)."""
    return [m if m.id else m.model_copy(update={"id": str(uuid.uuid4())}) for m in messages]


def _compacted(session: Session, error: Exception) -> None:
    """After the model rejected the prompt: compact, or raise ContextOverflowError from it."""
    try:
        session.reactive_compact(error)
    except ContextOverflowError as overflow:
        raise overflow from error


class LedgerMiddleware(AgentMiddleware):
    """A ``create_agent`` middleware: the model sees the bounded view of a ctxledger session.

    Each model call's usage is recorded, and a call the model rejects as too long is compacted
    and made again (see the module doc).

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
        """Record the new messages, call the model on the view, record its answer.

        Raises:
            ContextOverflowError: The model still rejected the prompt as too long after
                ``Config.max_reactive_retries`` compactions (raised from its error).
        """
        ledger = self._ledger
        session = ledger.session()
        view = ledger.view(session, request.state["messages"])
        while True:
            try:
                response = handler(request.override(messages=cast(Any, view)))
            except Exception as exc:
                if not is_prompt_too_long(exc):
                    raise
                _compacted(session, exc)
                view = ledger.convert(session, session.prepare_step().messages)
                continue
            return self._answered(session, response)

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        """Async twin of :meth:`wrap_model_call` (the ledger work runs in a worker thread)."""
        ledger = self._ledger
        session = ledger.session()
        view = await asyncio.to_thread(ledger.view, session, request.state["messages"])
        while True:
            try:
                response = await handler(request.override(messages=cast(Any, view)))
            except Exception as exc:
                if not is_prompt_too_long(exc):
                    raise
                await asyncio.to_thread(_compacted, session, exc)
                served = await session.aprepare_step()
                view = ledger.convert(session, served.messages)
                continue
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

    The pre-model hook alone is enough: it records everything new, the previous answer (and its
    usage) included; the post-model hook records each answer as soon as it is made. A hook
    cannot repeat the model call: for retries after a prompt too long, use
    :class:`LedgerMiddleware` with ``create_agent``.

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
