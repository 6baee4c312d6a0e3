"""A ctxledger session for the OpenAI Agents SDK (``pip install 'ctxledger[openai-agents]'``).

:class:`LedgerSession` implements the SDK's ``Session`` protocol on a :class:`ctxledger.Session`;
run agents with ``run_config=session.run_config()``:

* ``add_items`` appends the items durably. Items map to ctxledger messages: user, system and
  developer messages one each; an assistant output message and the ``function_call`` items after
  it become one assistant message with :class:`~ctxledger.ToolCall` s; each
  ``function_call_output`` becomes a tool message. Reasoning items and every other kind ride
  along in the metadata of the message next to them (``metadata["openai_agents"]``, only when the
  items are not the plain rendering of the message), so every item round-trips exactly and none
  is dropped.
* ``get_items()`` returns the bounded model view in the SDK's item format: the summary of the
  active checkpoint as a user message, old tool outputs masked, oversize outputs truncated. It
  compacts first when needed and records the view as served, so ``ctxledger verify`` checks it.
  Without :meth:`~LedgerSession.run_config` the SDK calls the model only after storing the run's
  input (``add_items``), so the view's record goes with that append, one commit
  (``prepare_step(defer_record=True)``).
  No system or developer message follows a non-system item: one appended mid-conversation is
  sent as a user message (providers reject system text there, or apply it to everything).
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
item of that run. :meth:`LedgerSession.run_config` sends the bounded view on every model call
instead (``RunConfig.call_model_input_filter``), records each call's usage (in the commit that
stores the call's answer), and compacts and retries a call the provider rejects as too long
(:mod:`ctxledger.integrations._agents_model`).
The SDK stores a turn's items (``add_items``) just before its next model call asks for the view,
so in that mode ``add_items`` is a :meth:`ctxledger.Session.step`: the items and the view for the
next call are recorded in one commit, and the next ``get_items()`` hands out that view (unless
the session recorded something else through this object in between: usage, a pop, a clear).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

from ctxledger._logging import get_logger
from ctxledger.actors.session import Session
from ctxledger.domain import ModelView, ReportedUsage, is_prompt_too_long
from ctxledger.domain.commands import usage_of
from ctxledger.errors import (
    BudgetExceededError,
    ContextOverflowError,
    InvalidArgumentError,
    InvalidMessageError,
    InvalidUsageError,
)
from ctxledger.integrations._agents_items import (
    METADATA_KEY,
    RecentFingerprints,
    ViewRenderer,
    item_kind,
    items_to_messages,
    message_to_items,
    messages_to_items,
    normalise_item,
)
from ctxledger.messages import Message

try:
    from agents import Model, MultiProvider, RunConfig, TResponseInputItem
    from agents.run_config import CallModelData, ModelInputData

    from ctxledger.integrations._agents_model import LedgerModel, usage_counts
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "ctxledger.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'ctxledger[openai-agents]'"
    ) from exc

__all__ = [
    "METADATA_KEY",
    "LedgerModel",
    "LedgerSession",
    "items_to_messages",
    "message_to_items",
    "messages_to_items",
]

_log = get_logger(__name__)


def _fingerprint(item: Any) -> str:
    return json.dumps(item, sort_keys=True, default=str)


@dataclass(slots=True)
class _Turn:
    """The model call being made: the agent making it, and the input items after the view
    that the session has not stored yet (None: the input is not the session's view)."""

    agent: Any
    unsaved: list[Any] | None


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
        if not isinstance(remember, int) or isinstance(remember, bool) or remember < 0:
            raise InvalidArgumentError(
                "remember", f"must be an int of at least 0, got {remember!r}"
            )
        self.ledger = session
        self.session_id = session.id
        self._known = RecentFingerprints(remember)
        self._renderer = ViewRenderer()  # the views' items, each message rendered once
        self._turn: _Turn | None = None  # the model call of the run in progress
        # Whether a view is asked for on every model call (run_config() or filter_model_input):
        # then add_items serves the next call's view with the items, in one commit.
        self._per_call = False
        self._served: ModelView | None = None  # served by add_items, for the next get_items()
        # The last model call's usage, recorded with its answer by the next add_items.
        self._usage: ReportedUsage | None = None

    def __repr__(self) -> str:
        return f"<LedgerSession {self.session_id!r}>"

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """Return the bounded model view as SDK items (``limit=None``), else the raw tail.

        Without a limit the session compacts if needed and the view is recorded as served (when
        views are asked for on every model call, the one :meth:`add_items` served with the
        items just stored). With ``limit=N`` the newest ``N`` items still in the conversation
        are returned verbatim.
        """
        if limit is None:
            view, self._served = self._served, None
            if view is None:
                await self._record_held_usage()
                # Without a view per model call, the SDK stores the run's input before calling
                # the model: the view is recorded with that append.
                view = await self.ledger.aprepare_step(defer_record=not self._per_call)
            items, kept = self._render(view.messages)
            # The items the last view had were fingerprinted when it was served.
            self._known.add_all(_fingerprint(item) for item in items[kept:])
        else:
            if limit <= 0:
                return []
            messages = await self.ledger.acurrent_messages(limit)
            items = messages_to_items(messages)[-limit:]
        return cast(list[TResponseInputItem], items)

    def _render(self, messages: Iterable[Message]) -> tuple[list[dict[str, Any]], int]:
        """A view's items, and how many of the first ones the last view had (ViewRenderer)."""
        return self._renderer.render(messages)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` durably, as one atomic batch.

        When views are asked for on every model call (:meth:`run_config`), the view for the next
        call is served with them, in the same commit (:meth:`ctxledger.Session.step`).

        Function calls that continue the newest message (its calls are still unanswered, as
        after ``pop_item`` took some of them) are merged into it: the message is retracted and
        put back with them, in one atomic batch.

        Raises:
            InvalidMessageError: An item does not fit the conversation (for example an output
                for a call that was never made); nothing is written.
        """
        if not items:
            return
        self._served = None
        usage, self._usage = self._usage, None  # the answer's: recorded just before it
        try:
            messages = items_to_messages(items)
            if self._per_call:
                await self._step(messages, usage)
            else:
                await self.ledger.aappend_many(messages, usage=usage)
        except InvalidMessageError:
            # More calls for the newest assistant message (put back after pop_item took some of
            # its items): merge them into it, as one atomic retraction + append.
            if usage is not None:  # the answer's usage, alone, before the merged items
                await self.ledger.arecord_usage(usage)
            if not await asyncio.to_thread(self._extend_newest, items):
                raise
        self._known.add_all(_fingerprint(normalise_item(item)) for item in items)

    async def _step(self, messages: list[Message], usage: ReportedUsage | None) -> None:
        """Append ``messages`` (after ``usage``) and serve the next model call's view with them
        (one commit)."""
        # On a refusal the items are stored and no view is served: the next get_items() asks
        # again and raises it to the model call, as when the view was asked for on its own.
        with contextlib.suppress(BudgetExceededError, ContextOverflowError):
            self._served = await self.ledger.astep(messages, usage=usage)

    def _extend_newest(self, items: list[TResponseInputItem]) -> bool:
        newest = self.ledger.current_messages(1)
        if not newest or newest[0].role != "assistant" or not newest[0].tool_calls:
            return False
        if item_kind(normalise_item(items[0])) != "call":
            return False
        self.ledger.retract_last(items_to_messages([*message_to_items(newest[0]), *items]))
        return True

    async def pop_item(self) -> TResponseInputItem | None:
        """Withdraw the newest item and return it (None when the conversation is empty).

        Raises:
            InvalidSeqError: The newest item is covered by the active checkpoint's summary.
        """
        self._served = None
        await self._record_held_usage()
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
        self._served = None
        await self._record_held_usage()
        await self.ledger.aclear()

    async def filter_model_input(self, data: CallModelData[Any]) -> ModelInputData:
        """A ``RunConfig.call_model_input_filter``: send the bounded view on every model call.

        The SDK stores each turn's items before the next model call, so its input ends with
        items this session has stored; they are replaced by the session's current view (compacted
        if needed, recorded as served). Items at the end of the input that the session has not
        stored yet are kept after the view. When no input item is known, the input is sent as it
        is.
        """
        self._per_call = True
        given = list(data.model_data.input)
        known = self._known
        tail = len(given)
        while tail > 0 and _fingerprint(normalise_item(given[tail - 1])) not in known:
            tail -= 1
        if tail == 0:
            self._turn = _Turn(data.agent, None)
            return data.model_data
        view = await self.get_items()
        self._turn = _Turn(data.agent, given[tail:])
        return ModelInputData(
            input=[*view, *given[tail:]], instructions=data.model_data.instructions
        )

    def run_config(self, **options: Any) -> RunConfig:
        """Return a ``RunConfig`` for ``Runner.run`` on this session.

        Each model call of the run receives the bounded view, its usage is recorded, and a
        call the provider rejects as too long is compacted and retried (see the module doc).
        The call is made by the model the SDK would have used (the agent's, or ``model`` of
        ``options``).

        Args:
            options: Other ``RunConfig`` fields (``model``, ``model_provider``, ``model_settings``,
                ...); a ``call_model_input_filter`` of your own cannot be combined with it.

        Raises:
            ValueError: ``options`` holds a ``call_model_input_filter``.
        """
        if "call_model_input_filter" in options:
            raise ValueError(
                "run_config() installs its own call_model_input_filter; call "
                "session.filter_model_input(data) from yours and pass RunConfig yourself"
            )
        self._per_call = True
        model: str | Model | None = options.pop("model", None)
        provider = options.pop("model_provider", None) or MultiProvider()
        return RunConfig(
            model=LedgerModel(self, model, provider),
            model_provider=provider,
            call_model_input_filter=self.filter_model_input,
            **options,
        )

    # --- used by LedgerModel ---------------------------------------------------------------------

    def current_agent(self) -> Any:
        """The agent of the model call being made (None before the first)."""
        return self._turn.agent if self._turn is not None else None

    async def retry_input(self, error: Exception) -> list[Any] | None:
        """After the model call failed with ``error``: if the provider rejected the prompt as
        too long, compact (harder on each attempt) and return the input to send instead; None
        when ``error`` is something else, or the input was not this session's view.

        Raises:
            ContextOverflowError: ``Config.max_reactive_retries`` compactions did not make the
                prompt fit (raised from ``error``).
        """
        self._served = None
        turn = self._turn
        if turn is None or turn.unsaved is None or not is_prompt_too_long(error):
            return None
        await self._record_held_usage()
        try:
            await self.ledger.areactive_compact(error)
        except ContextOverflowError as overflow:
            raise overflow from error
        return [*await self.get_items(), *turn.unsaved]

    async def record_usage(self, usage: Any) -> None:
        """Record the usage of one model call (an SDK ``Usage``) now, in a commit of its own
        (after a usage :meth:`hold_usage` still holds). A call that reported none records
        nothing, and a report the session refuses is logged, not raised."""
        report = self._usage_report(usage)
        if report is not None:
            await self._record_held_usage()
            self._served = None  # the next view is to count it
            await self.ledger.arecord_usage(report)

    async def hold_usage(self, usage: Any) -> None:
        """Keep the usage of the model call just made (an SDK ``Usage``) until :meth:`add_items`
        stores the call's answer, and record it then, just before the answer, in the same
        commit (alone first if this session records anything else before): what
        :meth:`run_config`'s model does with each call's usage. A call that reported none
        holds nothing, and a report the session refuses is logged, not raised. A run that fails
        before its answer is stored records neither."""
        report = self._usage_report(usage)
        if report is not None:
            await self._record_held_usage()  # an earlier call's, stored with no answer of its own
            self._served = None  # the next view is to count it
            self._usage = report

    def _usage_report(self, usage: Any) -> ReportedUsage | None:
        """``usage`` as the session records it, or None (a refusal is logged)."""
        counts = usage_counts(usage)
        if counts is None:
            return None
        try:
            return usage_of(*counts).usage
        except InvalidUsageError as exc:  # the answer is good; a bad count must not lose it
            _log.warning("usage_not_recorded", session_id=self.session_id, error=str(exc))
            return None

    async def _record_held_usage(self) -> None:
        """Record the usage held for an answer not stored yet, alone."""
        usage, self._usage = self._usage, None
        if usage is not None:
            await self.ledger.arecord_usage(usage)
