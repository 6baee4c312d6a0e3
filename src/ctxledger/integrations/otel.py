"""OpenTelemetry traces and metrics of what the context layer did (extra ``otel``).

:class:`CtxledgerInstrumentor` follows the OpenTelemetry instrumentor convention
(``CtxledgerInstrumentor().instrument(tracer_provider=..., meter_provider=...)``,
``uninstrument()``): it wraps public methods of :class:`ctxledger.Session`,
:class:`ctxledger.Host` and the HTTP summarisers when instrumented and puts back exactly what
each class held after, so an application that never instruments pays nothing.

Spans (each carries ``gen_ai.conversation.id`` = the session id, so they join the agent
framework's own spans in Langfuse, Phoenix or any OTLP backend):

- ``ctxledger.prepare_step`` around :meth:`Session.prepare_step` (and its async twin), with the
  view's estimate, token count, message count, newest seq and checkpoint, and ``ctxledger.step``
  around :meth:`Session.step` (and ``astep``, which the agent-framework drop-ins call) with the
  same attributes; ``ctxledger.compact``,
  ``ctxledger.reactive_compact`` and ``ctxledger.compact_if_needed`` around those calls.
- ``ctxledger.compaction`` for each compaction, made from the events the session recorded
  (the host tells the instrumentor each durable batch as it commits, before the call that
  wrote it returns; only the compaction events are kept, and nothing is read back from the
  log): attributes
  ``ctxledger.compaction.reason``, ``.tokens_before``, ``.tokens_after``, ``.prepared``,
  ``.waited_seconds``, ``.summarizer`` (and ``.checkpoint_id``, ``.summary_seconds``); a child of
  the call that made it, from its ``CompactionStarted`` to its ``CheckpointCreated``. A failed
  compaction is one too, with an error status. A summary prepared in the background is a
  ``ctxledger.summary.prepare`` span of its own trace, linked from the compaction that uses it.
- Each call of an LLM summariser (:class:`~ctxledger.OpenAIChatSummarizer`,
  :class:`~ctxledger.AnthropicSummarizer`) as a GenAI client span ``chat <model>``
  (``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.model``,
  ``gen_ai.response.model``, ``gen_ai.usage.input_tokens`` / ``output_tokens``,
  ``server.address``, ``error.type``), timed when the call was made and placed under the
  compaction it served once the log shows which one that was.

Metrics: ``ctxledger.view.tokens`` (histogram of served views' estimates),
``ctxledger.compactions`` (counter by ``ctxledger.compaction.reason``, ``.prepared`` and
``.outcome``), ``ctxledger.compaction.wait`` (histogram of seconds the agent waited on summaries).

Limits: what the host's threads recorded between two calls of a session (a summary prepared in
the background, maybe never used; a background compaction that failed) is traced at the
session's next traced call, or when the host closes; an LLM call is matched with its compaction
by the summary text it returned.

Instrument before opening hosts: a session is traced fully when it was opened through
:meth:`Host.session` (or ``asession``, or :meth:`Session.fork`) while instrumented; the log it
lives in is learnt there.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
import weakref
from collections.abc import Callable, Collection
from typing import Any

try:
    from opentelemetry import metrics, trace
    from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
        BaseInstrumentor,
    )
    from wrapt import wrap_function_wrapper
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "ctxledger.integrations.otel needs OpenTelemetry: pip install 'ctxledger[otel]'"
    ) from exc

import ctxledger
from ctxledger import AnthropicSummarizer, Host, OpenAIChatSummarizer, Session
from ctxledger.integrations._otel_calls import SummaryCalls
from ctxledger.integrations._otel_spans import CONVERSATION_ID, Telemetry

__all__ = ["CONVERSATION_ID", "CtxledgerInstrumentor"]

_SESSION_CALLS = {
    "prepare_step": "ctxledger.prepare_step",
    "aprepare_step": "ctxledger.prepare_step",
    "step": "ctxledger.step",
    "astep": "ctxledger.step",
    "compact": "ctxledger.compact",
    "acompact": "ctxledger.compact",
    "reactive_compact": "ctxledger.reactive_compact",
    "areactive_compact": "ctxledger.reactive_compact",
    "compact_if_needed": "ctxledger.compact_if_needed",
    "acompact_if_needed": "ctxledger.compact_if_needed",
}
_OPENERS = (("Host", Host, "session"), ("Host", Host, "asession"), ("Session", Session, "fork"))
_SUMMARIZERS: tuple[type, ...] = (OpenAIChatSummarizer, AnthropicSummarizer)
_INHERITED = object()  # a method the class inherits (not in its own dict)


class CtxledgerInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Traces and measures ctxledger sessions (see the module docstring).

    A singleton, as every OpenTelemetry instrumentor: ``CtxledgerInstrumentor()`` is always the
    same object, ``instrument()`` twice warns and does nothing.

    Example:
        >>> from ctxledger.integrations.otel import CtxledgerInstrumentor
        >>> CtxledgerInstrumentor().instrument()    # the global providers
        >>> CtxledgerInstrumentor().uninstrument()
    """

    _telemetry: Telemetry | None = None
    _hosts: weakref.WeakSet[Host] = weakref.WeakSet()  # noqa: RUF012 - a singleton
    #: What each replaced class attribute was (``_INHERITED``: not in the class's own dict).
    _replaced: dict[tuple[type, str], object] = {}  # noqa: RUF012 - one instance (a singleton)

    def instrumentation_dependencies(self) -> Collection[str]:
        """Nothing outside ctxledger is instrumented."""
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        tracer = trace.get_tracer(
            __name__, ctxledger.__version__, kwargs.get("tracer_provider")
        )
        meter = metrics.get_meter(__name__, ctxledger.__version__, kwargs.get("meter_provider"))
        telemetry = self._telemetry = Telemetry(tracer, meter, SummaryCalls())
        # Each traced session's log and cursor; each host told to report its commits.
        traced: weakref.WeakKeyDictionary[Session, tuple[Any, Any]] = weakref.WeakKeyDictionary()
        hosts = self._hosts = weakref.WeakSet()
        telemetry.cursor_of = lambda session: traced.get(session, (None, None))[1]
        lock = threading.Lock()

        def learn(session: object, log: object) -> None:
            if isinstance(session, Session) and log is not None:
                cursor = telemetry.track(log, session.id)
                with lock:
                    traced[session] = (log, cursor)

        def watch(host: Host) -> None:
            with lock:
                if host in hosts:
                    return
                hosts.add(host)
            host._observe_commits(telemetry.observer(host.log))

        def opened(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
            if isinstance(instance, Host):
                watch(instance)  # before the session opens: its first commits are told
            if inspect.iscoroutinefunction(wrapped):

                async def opening() -> Any:
                    session = await wrapped(*args, **kwargs)
                    learn(session, instance.log)
                    return session

                return opening()
            session = wrapped(*args, **kwargs)
            if isinstance(instance, Host):
                learn(session, instance.log)
            else:
                learn(session, traced.get(instance, (None, None))[0])
            return session

        def closing(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
            if not instance.closed:
                instance._observe_commits(None)
                telemetry.flush(instance.log)
            return wrapped(*args, **kwargs)

        # What each class held is noted first (an inherited method too: the async twins,
        # Host.close, the summarisers' __call__), so uninstrument() leaves it as it was.
        for _name, owner, method in _OPENERS:
            self._note(owner, method)
            wrap_function_wrapper(owner, method, opened)
        self._note(Host, "close")
        wrap_function_wrapper(Host, "close", closing)
        for method, span_name in _SESSION_CALLS.items():
            self._note(Session, method)
            setattr(Session, method, _traced(telemetry, span_name, getattr(Session, method)))
        for summarizer in _SUMMARIZERS:
            self._note(summarizer, "__call__")
            wrap_function_wrapper(summarizer, "__call__", telemetry.calls.wrap_call)
            self._note(summarizer, "answer")
            wrap_function_wrapper(summarizer, "answer", telemetry.calls.wrap_answer)

    def _note(self, owner: type, method: str) -> None:
        self._replaced[owner, method] = vars(owner).get(method, _INHERITED)

    def _uninstrument(self, **kwargs: Any) -> None:
        for host in list(self._hosts):
            if not host.closed:
                host._observe_commits(None)
        self._hosts = weakref.WeakSet()
        for (owner, method), original in self._replaced.items():
            if original is _INHERITED:
                delattr(owner, method)
            else:
                setattr(owner, method, original)
        self._replaced.clear()
        self._telemetry = None


def _traced(telemetry: Telemetry, span_name: str, function: Callable[..., Any]) -> Any:
    """``function`` (a Session method) traced: the call's span is made once the call has
    returned or raised, with its start time, so the SDK handles each span once (see
    :meth:`Telemetry.finish_call`).

    A plain function, not a ``wrapt`` proxy: it binds as any method does, without a proxy
    object made and called through on every call (5-10 µs of the agent's thread per step,
    measured in place; the span itself costs 30-40 µs there).
    """
    finish, failed, time_ns = telemetry.finish_call, telemetry.failed_call, time.time_ns
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def traced_coroutine(self: Session, *args: Any, **kwargs: Any) -> Any:
            started = time_ns()
            try:
                result = await function(self, *args, **kwargs)
            except BaseException as exc:
                failed(span_name, self.id, started, exc)
                raise
            finish(self, span_name, started, result)
            return result

        return traced_coroutine

    @functools.wraps(function)
    def traced(self: Session, *args: Any, **kwargs: Any) -> Any:
        started = time_ns()
        try:
            result = function(self, *args, **kwargs)
        except BaseException as exc:
            failed(span_name, self.id, started, exc)
            raise
        finish(self, span_name, started, result)
        return result

    return traced
