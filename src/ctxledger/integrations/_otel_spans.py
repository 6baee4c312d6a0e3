"""The spans and metrics of :mod:`ctxledger.integrations.otel`: from a call's result, from the
events the call recorded in the log, and from the LLM summariser calls seen on the way."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
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
from ctxledger.integrations._otel_calls import SummaryCall, SummaryCalls
from ctxledger.storage import EventLog, RecordedEvent

__all__ = ["CONVERSATION_ID", "Telemetry"]

#: The GenAI attribute that names the conversation: the session id on every span.
CONVERSATION_ID = "gen_ai.conversation.id"
_PREFIX = "ctxledger.compaction."
_LOOKBACK = 512  # the most events read back after one call
_SKEW_NS = 3_600 * 10**9  # log timestamps further than this from the call are not trusted
_SLOW_NS = 20 * 10**6  # a step this long may have waited on a summariser: read what it recorded


@dataclass
class _Cursor:
    """What has been read of one session's events, and what it taught."""

    event_seq: int | None = None
    checkpoint_id: str | None = None
    started: dict[str, tuple[int, bool]] = field(default_factory=dict)
    prepared: dict[str, tuple[int, SpanContext | None]] = field(default_factory=dict)
    last_agent_ns: int = 0
    calls_seen: int = 0


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

    def failed_call(
        self, name: str, session_id: str, started_ns: int, error: BaseException
    ) -> None:
        """The span of a Session call that raised: the exception recorded, the status set."""
        span = self._call_span(name, {CONVERSATION_ID: session_id}, started_ns)
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__qualname__}: {error}"))
        span.end()

    def flush(self, log: EventLog) -> None:
        """Make the spans of what the sessions of ``log`` recorded since they were last read
        (background summaries that finished after their session's last step); called as the
        host closes."""
        with self._lock:
            cursors = [(key[1], c) for key, c in self._cursors.items() if key[0] == id(log)]
        now = time.time_ns()
        for session_id, cursor in cursors:
            if cursor.event_seq is None:
                continue
            try:
                # Back to the last event read (at most _LOOKBACK), not only to the last step.
                for record in _recent(log, session_id, cursor.event_seq):
                    self._event(cursor, session_id, record, trace.INVALID_SPAN, now, now, None)
            except CtxLedgerError:  # the host is closing: what cannot be read is left
                continue
        with self._lock:
            for session_id, _ in cursors:
                self._cursors.pop((id(log), session_id), None)

    def finish_call(self, session: Any, name: str, started_ns: int, result: object) -> None:
        """The span of a Session call that returned ``result`` (started at ``started_ns``, made
        now with every attribute at once: the SDK checks attributes once per call), and the
        spans of what the call recorded.

        The span is not made current while the call runs: nothing runs under it on the caller's
        thread (summaries run on the host's threads and their spans are made from the log
        afterwards), and attaching a context costs as much as the rest of the span.
        """
        waited: float | None = None
        log = self.log_of(session)
        cursor = self._cursor(log, session.id) if log is not None else None
        read = True
        attributes: dict[str, Any] = {CONVERSATION_ID: session.id}
        if isinstance(result, ModelView):
            attributes["ctxledger.view.estimated_tokens"] = result.estimated_tokens
            attributes["ctxledger.view.tokens"] = result.view_tokens
            attributes["ctxledger.view.messages"] = len(result.messages)
            attributes["ctxledger.view.through_seq"] = result.through_seq
            attributes["ctxledger.view.checkpoint_id"] = result.checkpoint_id or ""
            self.view_tokens.record(result.estimated_tokens)
            if cursor is not None:
                # Reading the log back costs more than the span: only when something may have
                # happened in this call (a new checkpoint, or long enough for a summariser).
                # An LLM summariser call finished since the last read (a background summary
                # between two steps, maybe superseded before any checkpoint used it): read it
                # back now, while it is still behind the previous step's view.
                finished = self.calls.finished
                read = (
                    cursor.event_seq is None
                    or result.checkpoint_id != cursor.checkpoint_id
                    or finished != cursor.calls_seen
                    or time.time_ns() - started_ns > _SLOW_NS
                )
                cursor.checkpoint_id = result.checkpoint_id
                cursor.calls_seen = finished
        elif isinstance(result, CompactionResult):
            waited = result.waited_seconds
            attributes[_PREFIX + "compacted"] = result.compacted
            attributes[_PREFIX + "outcome"] = result.reason
            attributes[_PREFIX + "prepared"] = result.prepared
            attributes[_PREFIX + "waited_seconds"] = result.waited_seconds
            attributes[_PREFIX + "tokens_before"] = result.tokens_before
            attributes[_PREFIX + "tokens_after"] = result.estimated_tokens
        span = self._call_span(name, attributes, started_ns)
        try:
            if log is not None and cursor is not None and read:
                self._recorded(log, cursor, session.id, span, started_ns, waited)
        except CtxLedgerError as exc:  # never fail the agent's call for its telemetry
            span.add_event("ctxledger.telemetry_unavailable", {"error": str(exc)})
        finally:
            span.end()

    def _call_span(self, name: str, attributes: dict[str, Any], started_ns: int) -> Span:
        """A Session call's span, started at ``started_ns`` with all its attributes at once."""
        return self.tracer.start_span(
            name, kind=SpanKind.INTERNAL, attributes=attributes, start_time=started_ns
        )

    def _cursor(self, log: EventLog, session_id: str) -> _Cursor:
        key = (id(log), session_id)
        cursor = self._cursors.get(key)  # a dict read is atomic: the lock only to add one
        if cursor is None:
            with self._lock:
                cursor = self._cursors.setdefault(key, _Cursor())
        return cursor

    def _recorded(
        self,
        log: EventLog,
        cursor: _Cursor,
        session_id: str,
        span: Span,
        started_ns: int,
        waited: float | None,
    ) -> None:
        records = _recent(log, session_id, cursor.event_seq or 0)
        now = time.time_ns()
        for record in records:
            self._event(cursor, session_id, record, span, started_ns, now, waited)
        cursor.event_seq = records[-1].seq if records else max(cursor.event_seq or 0, 0)

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

    def _llm_call(self, session_id: str, call: SummaryCall, parent: Any) -> None:
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


def _recent(log: EventLog, session_id: str, floor: int) -> list[RecordedEvent]:
    """The session's events after seq ``floor`` (the last one read), at most the newest
    :data:`_LOOKBACK`.

    Always back to ``floor``, never only to the previous step: a summariser call can be counted
    finished before its ``SummaryPrepared`` reaches the log (the counter moves in the
    summariser's thread, the event is written after it returns), so the read that the count
    triggered may miss the event, and a later read that stopped at the previous step's view
    would skip it for good (a summariser call with no span). Reads are gated by
    :meth:`Telemetry.finish_call`, so each event is decoded about once.
    """
    high = log.last_seq(session_id)
    bottom = max(floor, high - _LOOKBACK)
    return log.read(session_id, bottom + 1, high) if high > bottom else []


def _ns(timestamp: float) -> int:
    return int(timestamp * 1_000_000_000)
