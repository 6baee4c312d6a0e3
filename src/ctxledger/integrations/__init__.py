"""Drop-in adapters for agent frameworks, each behind an optional extra.

* :mod:`ctxledger.integrations.openai_agents` (extra ``openai-agents``): ``LedgerSession``, a
  session for the OpenAI Agents SDK.
* :mod:`ctxledger.integrations.langchain` (extra ``langchain``): ``LedgerMiddleware`` for
  LangChain's ``create_agent`` and ``LedgerHooks`` for LangGraph's ``create_react_agent``.
* :mod:`ctxledger.integrations.otel` (extra ``otel``): ``CtxledgerInstrumentor``, OpenTelemetry
  spans and metrics of sessions, compactions and LLM summariser calls.

Importing this package imports no framework; each module imports its own.
"""

__all__: list[str] = []
