"""The spans and metrics of :mod:`ctxledger.integrations.otel`: from a call's result, from the
events the call recorded (told by the host as they commit), and from the LLM summariser calls
seen on the way."""

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
from ctxledger.storage import RecordedEvent

__all__ = ["CONVERSATION_ID", "Telemetry"]

#: The GenAI attribute that names the conversation: the session id on every span.
CONVERSATION_ID = "gen_ai.conversation.id"
_PREFIX = "ctxledger.compaction."
_SKEW_NS = 3_600 * 10**9  # log timestamps further than this from the call are not trusted
#: The events a span is made of; any other event only dates the agent's last step.
_COMPACTION_EVENTS = (CompactionStarted, SummaryPrepared, CheckpointCreated, CompactionFailed)


@dataclass
class _Cursor:
    """One traced session: its committed compaction events not yet made into spans, and what
    the earlier ones taught.

    The host tells :meth:`Telemetry.observe` each durable batch on its journal thread; the
    caller's thread takes them (:meth:`take`) after its call. Of the other events only the
    newest before each compaction event is kept (``agent``): all the spans need of them is the
    time of the agent's last step.
    """

    pending: list[RecordedEvent] = field(default_factory=list)
    agent: RecordedEvent | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    started: dict[str, tuple[int, bool]] = field(default_factory=dict)
    prepared: dict[str, tuple[int, SpanContext | None]] = field(default_factory=dict)
    last_agent_ns: int = 0

    def add(self, records: list[RecordedEvent]) -> None:
        """Keep a durable batch's compaction events (on the journal thread: quick)."""
        with self.lock:
            for record in records:
                if isinstance(record.event, _COMPACTION_EVENTS):
                    if self.agent is not None:
                        self.pending.append(self.agent)
                        self.agent = None
                    self.pending.append(record)
                else:
                    self.agent = record

    def take(self) -> list[RecordedEvent]:
        """The compaction events kept since the last take (with the agent events that date
        them), oldest first; nothing, without locking, when there are none."""
        if not self.pending:  # a batch added meanwhile is taken by the next call
            return []
        with self.lock:
            taken, self.pending = self.pending, []
        return taken


class Telemetry:
    """The tracer, the instruments and the traced sessions (:class:`_Cursor`), by log."""

    def __init__(self, tracer: Tracer, meter: Meter, calls: SummaryCalls) -> None:
        self.tracer = tracer
        self.calls = calls
        self.cursor_of: Callable[[Any], _Cursor | None] = lambda _session: None
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

    def track(self, log: object, session_id: str) -> _Cursor:
        """Trace the session ``session_id`` of ``log`` from now on (its cursor: one per
        session and log, however often the session is opened)."""
        with self._lock:
            return self._cursors.setdefault((id(log), session_id), _Cursor())

    def observer(self, log: object) -> Callable[[str, list[RecordedEvent]], None]:
        """What a host on ``log`` tells of each durable batch (on its journal thread): the
        batches of traced sessions are kept for the spans, the others ignored."""
        key, cursors = id(log), self._cursors

        def observe(session_id: str, records: list[RecordedEvent]) -> None:
            cursor = cursors.get((key, session_id))  # a dict read is atomic
            if cursor is not None:
                cursor.add(records)

        return observe

    def failed_call(
        self, name: str, session_id: str, started_ns: int, error: BaseException
    ) -> None:
        """The span of a Session call that raised: the exception recorded, the status set."""
        span = self._call_span(name, {CONVERSATION_ID: session_id}, started_ns)
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__qualname__}: {error}"))
        span.end()

    def flush(self, log: object) -> None:
        """Make the spans of what the sessions of ``log`` recorded since their last call
        (background summaries that finished after their session's last step) and forget the
        sessions; called as the host closes."""
        with self._lock:
            cursors = [(key[1], c) for key, c in self._cursors.items() if key[0] == id(log)]
            for session_id, _ in cursors:
                del self._cursors[(id(log), session_id)]
        now = time.time_ns()
        for session_id, cursor in cursors:
            for record in cursor.take():
                self._event(cursor, session_id, record, trace.INVALID_SPAN, now, now, None)

    def finish_call(self, session: Any, name: str, started_ns: int, result: object) -> None:
        """The span of a Session call that returned ``result`` (started at ``started_ns``, made
        now with every attribute at once: the SDK checks attributes once per call), and the
        spans of the compactions the session recorded since its last call.

        The span is not made current while the call runs: nothing runs under it on the caller's
        thread (summaries run on the host's threads and their spans are made from their events
        afterwards), and attaching a context costs as much as the rest of the span.
        """
        waited: float | None = None
        attributes: dict[str, Any] = {CONVERSATION_ID: session.id}
        if isinstance(result, ModelView):
            attributes["ctxledger.view.estimated_tokens"] = result.estimated_tokens
            attributes["ctxledger.view.tokens"] = result.view_tokens
            attributes["ctxledger.view.messages"] = len(result.messages)
            attributes["ctxledger.view.through_seq"] = result.through_seq
            attributes["ctxledger.view.checkpoint_id"] = result.checkpoint_id or ""
            self.view_tokens.record(result.estimated_tokens)
        elif isinstance(result, CompactionResult):
            waited = result.waited_seconds
            attributes[_PREFIX + "compacted"] = result.compacted
            attributes[_PREFIX + "outcome"] = result.reason
            attributes[_PREFIX + "prepared"] = result.prepared
            attributes[_PREFIX + "waited_seconds"] = result.waited_seconds
            attributes[_PREFIX + "tokens_before"] = result.tokens_before
            attributes[_PREFIX + "tokens_after"] = result.estimated_tokens
        span = self._call_span(name, attributes, started_ns)
        cursor = self.cursor_of(session)
        try:
            if cursor is not None:
                records = cursor.take()
                if records:
                    now = time.time_ns()
                    for record in records:
                        self._event(cursor, session.id, record, span, started_ns, now, waited)
        finally:
            span.end()

    def _call_span(self, name: str, attributes: dict[str, Any], started_ns: int) -> Span:
        """A Session call's span, started at ``started_ns`` with all its attributes at once."""
        return self.tracer.start_span(
            name, kind=SpanKind.INTERNAL, attributes=attributes, start_time=started_ns
        )

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


def _ns(timestamp: float) -> int:
    return int(timestamp * 1_000_000_000)
