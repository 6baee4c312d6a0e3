"""The spans and metrics of :mod:`ctxledger.integrations.otel`: from a call's result, from the
events the call recorded in the log, and from the LLM summariser calls seen on the way."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.metrics import Meter
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, Tracer

from ctxledger import CompactionResult, ModelView
from ctxledger.domain.usage import parse_usage
from ctxledger.errors import CtxLedgerError
from ctxledger.events import (
    CheckpointCreated,
    CompactionFailed,
    CompactionStarted,
    SummaryPrepared,
)
from ctxledger.storage import EventLog, RecordedEvent

__all__ = ["CONVERSATION_ID", "SummaryCalls", "Telemetry"]

#: The GenAI attribute that names the conversation: the session id on every span.
CONVERSATION_ID = "gen_ai.conversation.id"
_PREFIX = "ctxledger.compaction."
_KEPT_CALLS = 512  # LLM summariser calls waiting to be matched with the compaction they served
_LOOKBACK = 64  # events read back on the first call seen for a session
_SKEW_NS = 3_600 * 10**9  # log timestamps further than this from the call are not trusted


@dataclass
class _Call:
    """One LLM summariser call, as seen when it was made."""

    start_ns: int
    provider: str
    model: str
    url: str
    previous: str | None
    end_ns: int = 0
    output: str | None = None
    error: str | None = None
    usage: Any = None
    response: dict[str, Any] = field(default_factory=dict)


class SummaryCalls:
    """Records the LLM summariser calls (any thread) until the log says which compaction each
    served; the session is not known where the summariser runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: OrderedDict[int, _Call] = OrderedDict()
        self._local = threading.local()
        self._number = 0

    def wrap_call(self, wrapped: Callable[..., Any], instance: Any, args: Any, kw: Any) -> Any:
        """Wraps ``HttpSummarizer.__call__``: times the call, keeps its outcome."""
        request = args[0] if args else kw.get("request")
        call = _Call(
            start_ns=time.time_ns(),
            provider=str(getattr(instance, "provider", "")),
            model=str(getattr(instance, "model", "")),
            url=str(getattr(instance, "url", "")),
            previous=getattr(request, "previous_summary", None),
        )
        self._local.call = call
        try:
            result = wrapped(*args, **kw)
        except BaseException as exc:
            call.error = type(exc).__qualname__
            raise
        finally:
            self._local.call = None
            call.end_ns = time.time_ns()
            with self._lock:
                self._number += 1
                self._done[self._number] = call
                while len(self._done) > _KEPT_CALLS:
                    self._done.popitem(last=False)
        call.output = result if isinstance(result, str) else None
        if not result and call.error is None:
            call.error = "summary_unavailable"
        return result

    def wrap_answer(self, wrapped: Callable[..., Any], instance: Any, args: Any, kw: Any) -> Any:
        """Wraps the summarisers' ``answer(body)``: keeps the response's usage and model."""
        call: _Call | None = getattr(self._local, "call", None)
        body = args[0] if args else kw.get("body")
        if call is not None and isinstance(body, dict):
            call.usage = body.get("usage")
            call.response = {key: body.get(key) for key in ("model", "id", "stop_reason")}
            choices = body.get("choices")
            if isinstance(choices, list) and choices and isinstance(choices[0], dict):
                call.response["stop_reason"] = choices[0].get("finish_reason")
        return wrapped(*args, **kw)

    def take_chain(self, summary: str, calls: int) -> list[_Call]:
        """The calls that wrote ``summary``: the last one returned it, each earlier one returned
        the previous summary of the next (chunked summaries), oldest first."""
        chain: list[_Call] = []
        wanted: str | None = summary
        with self._lock:
            while wanted and len(chain) < max(calls, 1):
                found = next((k for k, c in self._done.items() if c.output == wanted), None)
                if found is None:
                    break
                call = self._done.pop(found)
                chain.append(call)
                wanted = call.previous
        return chain[::-1]

    def take_failed(self, start_ns: int, end_ns: int) -> list[_Call]:
        """Failed calls that ended in ``[start_ns, end_ns]``."""
        with self._lock:
            keys = [
                k
                for k, c in self._done.items()
                if c.error and c.output is None and start_ns <= c.end_ns <= end_ns
            ]
            return [self._done.pop(k) for k in keys]


@dataclass
class _Cursor:
    """What has been read of one session's events, and what it taught."""

    event_seq: int | None = None
    started: dict[str, tuple[int, bool]] = field(default_factory=dict)
    prepared: dict[str, tuple[int, SpanContext | None]] = field(default_factory=dict)
    last_agent_ns: int = 0


class Telemetry:
    """The tracer, the instruments and what has been read of each session's events."""

    def __init__(self, tracer: Tracer, meter: Meter, calls: SummaryCalls) -> None:
        self.tracer = tracer
        self.calls = calls
        self.log_of: Callable[[Any], EventLog | None] = lambda _session: None
        self.view_tokens = meter.create_histogram(
            "ctxledger.view.tokens", unit="{token}", description="Estimated tokens of served views"
        )
        self.compactions = meter.create_counter(
            "ctxledger.compactions", unit="{compaction}", description="Compactions, by reason"
        )
        self.wait = meter.create_histogram(
            "ctxledger.compaction.wait",
            unit="s",
            description="Seconds the agent waited on a summary",
        )
        self._lock = threading.Lock()
        self._cursors: dict[tuple[int, str], _Cursor] = {}

    @contextmanager
    def call_span(self, name: str, session_id: str) -> Iterator[Span]:
        """A span around one Session call; exceptions are recorded on it."""
        with self.tracer.start_as_current_span(
            name, kind=SpanKind.INTERNAL, attributes={CONVERSATION_ID: session_id}
        ) as span:
            yield span

    def finish_call(self, session: Any, span: Span, started_ns: int, result: object) -> None:
        """Describe the call's result on its span, then make spans of what it recorded."""
        waited: float | None = None
        if isinstance(result, ModelView):
            span.set_attributes(
                {
                    "ctxledger.view.estimated_tokens": result.estimated_tokens,
                    "ctxledger.view.tokens": result.view_tokens,
                    "ctxledger.view.messages": len(result.messages),
                    "ctxledger.view.through_seq": result.through_seq,
                    "ctxledger.view.checkpoint_id": result.checkpoint_id or "",
                }
            )
            self.view_tokens.record(result.estimated_tokens)
        elif isinstance(result, CompactionResult):
            waited = result.waited_seconds
            span.set_attributes(
                {
                    _PREFIX + "compacted": result.compacted,
                    _PREFIX + "outcome": result.reason,
                    _PREFIX + "prepared": result.prepared,
                    _PREFIX + "waited_seconds": result.waited_seconds,
                    _PREFIX + "tokens_before": result.tokens_before,
                    _PREFIX + "tokens_after": result.estimated_tokens,
                }
            )
        log = self.log_of(session)
        if log is None:
            return
        try:
            self._recorded(log, session.id, span, started_ns, waited)
        except CtxLedgerError as exc:  # never fail the agent's call for its telemetry
            span.add_event("ctxledger.telemetry_unavailable", {"error": str(exc)})

    def _recorded(
        self, log: EventLog, session_id: str, span: Span, started_ns: int, waited: float | None
    ) -> None:
        with self._lock:
            cursor = self._cursors.setdefault((id(log), session_id), _Cursor())
        if cursor.event_seq is None:  # first call seen: only what it recorded is of interest
            last = log.last_seq(session_id)
            records = [
                r
                for r in log.read(session_id, max(1, last - _LOOKBACK + 1), last or None)
                if _ns(r.timestamp) >= started_ns
            ] if last else []
        else:
            records = list(log.iter_events(session_id, cursor.event_seq + 1))
        now = time.time_ns()
        for record in records:
            self._event(cursor, session_id, record, span, started_ns, now, waited)
            cursor.event_seq = record.seq
        if cursor.event_seq is None:
            cursor.event_seq = log.last_seq(session_id)

    def _event(
        self,
        cursor: _Cursor,
        session_id: str,
        record: RecordedEvent,
        call: Span,
        started_ns: int,
        now_ns: int,
        waited: float | None,
    ) -> None:
        event = record.event
        at = _ns(record.timestamp)
        if not started_ns - _SKEW_NS <= at <= now_ns + _SKEW_NS:
            at = now_ns  # a log clock that is not wall time: place it at the end of the call
        in_call = at >= started_ns
        if isinstance(event, CompactionStarted):
            cursor.started[event.compaction_id] = (at, event.background)
        elif isinstance(event, SummaryPrepared):
            begin = cursor.started.pop(event.compaction_id, (at, True))[0]
            context = self._prepared(session_id, event, begin, at)
            cursor.prepared[event.compaction_id] = (at, context)
        elif isinstance(event, CheckpointCreated | CompactionFailed):
            began = cursor.started.pop(event.compaction_id, None)
            foreground = began is not None and not began[1]
            begin = max(started_ns, cursor.last_agent_ns)
            if foreground and began is not None:
                begin = began[0]
            ready = cursor.prepared.pop(event.compaction_id, (0, None))
            if waited is None:
                if foreground:
                    waited_now = (at - begin) / 1e9
                elif ready[0] > started_ns and in_call:  # the call waited for the summary
                    waited_now = (at - started_ns) / 1e9
                else:
                    waited_now = 0.0
            else:
                waited_now = waited
            parent = trace.set_span_in_context(call) if in_call else None
            self._compaction(session_id, event, min(begin, at), at, waited_now, parent, ready[1])
        if not (
            isinstance(event, SummaryPrepared)
            or (isinstance(event, CompactionStarted | CompactionFailed) and event.background)
        ):
            cursor.last_agent_ns = at

    def _compaction(
        self,
        session_id: str,
        event: CheckpointCreated | CompactionFailed,
        begin: int,
        end: int,
        waited: float,
        parent: Any,
        prepared_from: SpanContext | None,
    ) -> None:
        links = [Link(prepared_from)] if prepared_from is not None else []
        span = self.tracer.start_span(
            "ctxledger.compaction", context=parent, kind=SpanKind.INTERNAL, start_time=begin,
            links=links,
        )
        attributes: dict[str, Any] = {CONVERSATION_ID: session_id}
        if isinstance(event, CheckpointCreated):
            checkpoint = event.checkpoint
            reason: str = checkpoint.reason
            prepared, outcome = event.prepared, "compacted"
            attributes.update(
                {
                    _PREFIX + "reason": checkpoint.reason,
                    _PREFIX + "tokens_before": checkpoint.tokens_before,
                    _PREFIX + "tokens_after": checkpoint.tokens_after,
                    _PREFIX + "prepared": event.prepared,
                    _PREFIX + "waited_seconds": waited,
                    _PREFIX + "summarizer": checkpoint.summarizer,
                    _PREFIX + "summary_seconds": checkpoint.summary_seconds,
                    _PREFIX + "checkpoint_id": checkpoint.id,
                    _PREFIX + "covers_through_seq": checkpoint.covers_through_seq,
                }
            )
            calls = [] if event.prepared else self.calls.take_chain(
                checkpoint.summary, checkpoint.summarizer_calls
            )
        else:
            reason, prepared, outcome = event.reason, False, "failed"
            attributes.update(
                {
                    _PREFIX + "reason": event.reason,
                    _PREFIX + "prepared": False,
                    _PREFIX + "waited_seconds": waited,
                    _PREFIX + "detail": event.detail,
                }
            )
            span.set_status(Status(StatusCode.ERROR, event.reason))
            calls = self.calls.take_failed(begin, end)
        span.set_attributes(attributes)
        context = trace.set_span_in_context(span)
        for call in calls:
            self._llm_call(session_id, call, context)
        span.end(end_time=max(begin, end))
        labels: dict[str, str | bool] = {_PREFIX + "reason": reason, _PREFIX + "prepared": prepared}
        self.compactions.add(1, {**labels, _PREFIX + "outcome": outcome})
        self.wait.record(waited, {_PREFIX + "reason": reason})

    def _prepared(
        self, session_id: str, event: SummaryPrepared, begin: int, end: int
    ) -> SpanContext:
        span = self.tracer.start_span(
            "ctxledger.summary.prepare",
            context=trace.set_span_in_context(trace.INVALID_SPAN),
            kind=SpanKind.INTERNAL,
            start_time=min(begin, end),
            attributes={
                CONVERSATION_ID: session_id,
                _PREFIX + "compaction_id": event.compaction_id,
                _PREFIX + "summarizer": event.summarizer,
                _PREFIX + "summary_seconds": event.summary_seconds,
                _PREFIX + "covers_through_seq": event.covers_through_seq,
            },
        )
        context = trace.set_span_in_context(span)
        for call in self.calls.take_chain(event.summary, event.summarizer_calls):
            self._llm_call(session_id, call, context)
        span.end(end_time=max(begin, end))
        return span.get_span_context()

    def _llm_call(self, session_id: str, call: _Call, parent: Any) -> None:
        """The GenAI client span of one summariser call, under the span it served."""
        where = urlsplit(call.url)
        attributes: dict[str, Any] = {
            CONVERSATION_ID: session_id,
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": call.provider,
            "gen_ai.request.model": call.model,
        }
        if where.hostname:
            attributes["server.address"] = where.hostname
            attributes["server.port"] = where.port or (443 if where.scheme == "https" else 80)
        if call.response.get("model"):
            attributes["gen_ai.response.model"] = str(call.response["model"])
        if call.response.get("id"):
            attributes["gen_ai.response.id"] = str(call.response["id"])
        if call.response.get("stop_reason"):
            attributes["gen_ai.response.finish_reasons"] = [str(call.response["stop_reason"])]
        if call.usage is not None:
            try:
                usage = parse_usage(call.usage)
            except CtxLedgerError:
                usage = None
            if usage is not None:
                attributes["gen_ai.usage.input_tokens"] = usage.prompt_tokens
                attributes["gen_ai.usage.output_tokens"] = usage.completion_tokens
        span = self.tracer.start_span(
            f"chat {call.model}", context=parent, kind=SpanKind.CLIENT,
            start_time=call.start_ns, attributes=attributes,
        )
        if call.error:
            span.set_attribute("error.type", call.error)
            span.set_status(Status(StatusCode.ERROR, call.error))
        span.end(end_time=max(call.start_ns, call.end_ns))


def _ns(timestamp: float) -> int:
    return int(timestamp * 1_000_000_000)
