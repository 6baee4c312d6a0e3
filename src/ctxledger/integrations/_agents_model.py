"""The model of a run on a :class:`~ctxledger.integrations.openai_agents.LedgerSession`.

:meth:`LedgerSession.run_config` installs :class:`LedgerModel` as the run's model. Every model
call of the run goes through it to the model the agent would have used anyway (its own
``Model``, or the one its name resolves to), and on the way:

* the response's usage (``ModelResponse.usage``, cached and cache-write tokens included) is
  recorded in the session once per call, in the commit that stores the call's answer
  (:meth:`LedgerSession.hold_usage`), so ``Config.max_total_tokens``, ``Session.cost()`` and
  the calibration of the estimate work as with :meth:`ctxledger.Session.record_usage`;
* a prompt-too-long rejection (:func:`ctxledger.is_prompt_too_long`) compacts the session
  (:meth:`ctxledger.Session.reactive_compact`, harder on each attempt) and sends the same call
  again with the smaller view, up to ``Config.max_reactive_retries`` times, then raises
  :class:`~ctxledger.ContextOverflowError` (from the provider's error). The SDK sees one
  successful call: nothing is stored twice, in the ledger or in the SDK's session.

A streamed call is retried only when the rejection comes before its first event (as providers
reject an oversized prompt).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from agents import Model, ModelProvider, ModelResponse, ModelSettings, ModelTracing
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import TResponseInputItem, TResponseStreamEvent
from agents.models import get_default_model_settings
from agents.tool import Tool
from openai.types.responses.response_prompt_param import ResponsePromptParam

__all__ = ["LedgerModel", "usage_counts"]


class _Ledgered(Protocol):
    """What the model needs of its LedgerSession."""

    def current_agent(self) -> Any: ...

    def retry_input(self, error: Exception) -> Awaitable[list[Any] | None]: ...

    def hold_usage(self, usage: Any) -> Awaitable[None]: ...


def usage_counts(usage: Any) -> tuple[int, int, int, int] | None:
    """(input, output, cached, cache-write) tokens of an SDK ``Usage`` or an OpenAI Responses
    ``ResponseUsage`` (input counts cached ones); None when the model reported nothing."""
    if usage is None:
        return None
    prompt = getattr(usage, "input_tokens", 0) or 0
    completion = getattr(usage, "output_tokens", 0) or 0
    details = getattr(usage, "input_tokens_details", None)
    cached = getattr(details, "cached_tokens", 0) or 0
    written = getattr(details, "cache_write_tokens", 0) or 0
    if prompt <= 0 and completion <= 0:
        return None
    return prompt, completion, cached, written


def _implicit_settings(agent: Any) -> ModelSettings:
    """The settings an agent has when none were given (as the SDK decides it)."""
    model = agent.model
    if model is None:
        return get_default_model_settings()
    if isinstance(model, str):
        return get_default_model_settings(model)
    return ModelSettings()


class LedgerModel(Model):
    """Calls the agent's own model; records usage; compacts and retries a prompt too long.

    Args:
        session: The LedgerSession of the run.
        model: The run's ``RunConfig.model`` as given (a name or a ``Model``), or None to use
            each agent's own.
        provider: Resolves model names (the run's ``RunConfig.model_provider``).
    """

    def __init__(
        self, session: _Ledgered, model: str | Model | None, provider: ModelProvider
    ) -> None:
        self._session = session
        self._model = model
        self._provider = provider
        self._used: dict[int, Model] = {}
        self._last: Model | None = None

    def _resolve(self, passed: ModelSettings) -> tuple[Model, ModelSettings]:
        """The model the SDK would have called, and the settings it would have passed."""
        agent = self._session.current_agent()
        chosen = self._model if self._model is not None else getattr(agent, "model", None)
        if isinstance(chosen, Model):
            inner = chosen
        else:
            inner = self._provider.get_model(chosen)
            # With a Model as RunConfig.model the SDK drops a named model's default settings
            # (they depend on the name); put them back under what it passed.
            if agent is not None and agent.model_settings == _implicit_settings(agent):
                passed = get_default_model_settings(chosen).resolve(passed)
        self._used[id(inner)] = inner
        self._last = inner
        return inner, passed

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        """Call the model; on a prompt too long, compact and call again (see the module doc)."""
        inner, settings = self._resolve(model_settings)
        while True:
            try:
                response = await inner.get_response(
                    system_instructions,
                    input,
                    settings,
                    tools,
                    output_schema,
                    handoffs,
                    tracing,
                    previous_response_id=previous_response_id,
                    conversation_id=conversation_id,
                    prompt=prompt,
                )
            except Exception as exc:
                retry = await self._session.retry_input(exc)
                if retry is None:
                    raise
                input = retry
                continue
            await self._session.hold_usage(response.usage)
            return response

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """Stream the model's answer; a prompt too long before the first event is compacted and
        streamed again; the usage of the completed response is recorded."""
        inner, settings = self._resolve(model_settings)
        while True:
            started = False
            try:
                async for event in inner.stream_response(
                    system_instructions,
                    input,
                    settings,
                    tools,
                    output_schema,
                    handoffs,
                    tracing,
                    previous_response_id=previous_response_id,
                    conversation_id=conversation_id,
                    prompt=prompt,
                ):
                    started = True
                    if event.type == "response.completed":
                        await self._session.hold_usage(event.response.usage)
                    yield event
                return
            except Exception as exc:
                retry = None if started else await self._session.retry_input(exc)
                if retry is None:
                    raise
                input = retry

    def get_retry_advice(self, request: Any) -> Any:
        """The advice of the model that made the failed call."""
        return self._last.get_retry_advice(request) if self._last is not None else None

    async def _cleanup_on_run_end(self, owner: object) -> None:
        # The SDK tells the models it resolved (this one) that the run ended; pass it on.
        used, self._used = list(self._used.values()), {}
        for model in used:
            cleanup: Callable[[object], Awaitable[None]] = model._cleanup_on_run_end
            await cleanup(owner)
