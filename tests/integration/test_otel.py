"""OpenTelemetry: spans and metrics of real sessions, with the SDK's in-memory exporter and with
an OTLP/HTTP exporter posting to a receiver on 127.0.0.1."""

from __future__ import annotations

import inspect
import threading
import types
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel test dependencies are not installed")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from ctxledger import (
    AnthropicSummarizer,
    Config,
    Host,
    OpenAIChatSummarizer,
    Session,
)
from ctxledger.events import CheckpointCreated, SummaryPrepared
from ctxledger.integrations.otel import CtxledgerInstrumentor
from ctxledger.tooling.workload import iter_agent_steps
from fake_llm_server import CannedResponse, FakeLLMServer

CONFIG = Config(context_window=8000, compression_threshold=0.8, min_retain_rounds=1)


@pytest.fixture
def telemetry() -> Iterator[tuple[InMemorySpanExporter, InMemoryMetricReader]]:
    """The instrumentor on in-memory providers; uninstrumented after the test."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    instrumentor = CtxledgerInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        yield exporter, reader
    finally:
        instrumentor.uninstrument()
        tracer_provider.shutdown()
        meter_provider.shutdown()


def _run(path: Path, steps: int = 30, summarizer: Any = None, sid: str = "otel-1") -> list[Any]:
    """Drive one session; return its CheckpointCreated events."""
    options = {"summarizer": summarizer} if summarizer is not None else {}
    with Host.open(path, config=CONFIG, **options) as host:
        session = host.session(sid)
        for index, step in enumerate(iter_agent_steps(2, steps=steps)):
            session.append_many(step)
            session.prepare_step()
            if index == steps // 2:
                session.compact(focus="keep the names")
            session.wait_background()
        return [
            r.event for r in host.log.iter_events(sid) if isinstance(r.event, CheckpointCreated)
        ]


def _named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def _metrics(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found[metric.name] = list(metric.data.data_points)
    return found


def test_every_step_and_every_compaction_is_a_span(
    tmp_path: Path, telemetry: tuple[InMemorySpanExporter, InMemoryMetricReader]
) -> None:
    """One prepare_step span per step; one compaction span per checkpoint, with its numbers."""
    exporter, _ = telemetry
    created = _run(tmp_path / "db")
    spans = exporter.get_finished_spans()
    assert len(_named(spans, "ctxledger.prepare_step")) == 30
    compactions = _named(spans, "ctxledger.compaction")
    assert len(compactions) == len(created) >= 2
    by_id = {span.attributes["ctxledger.compaction.checkpoint_id"]: span for span in compactions}
    for event in created:
        span = by_id[event.checkpoint.id]
        attributes = span.attributes or {}
        assert attributes["ctxledger.compaction.reason"] == event.checkpoint.reason
        assert attributes["ctxledger.compaction.tokens_before"] == event.checkpoint.tokens_before
        assert attributes["ctxledger.compaction.tokens_after"] == event.checkpoint.tokens_after
        assert attributes["ctxledger.compaction.prepared"] == event.prepared
        assert attributes["ctxledger.compaction.summarizer"] == "ExtractiveSummarizer"
        assert attributes["ctxledger.compaction.waited_seconds"] >= 0
        assert span.parent is not None  # a child of the call that made it
    assert {span.name for span in spans} >= {"ctxledger.compact"}
    assert all(span.attributes.get("gen_ai.conversation.id") == "otel-1" for span in spans)


def test_every_background_summary_is_a_span_and_each_compaction_links_the_one_it_used(
    tmp_path: Path, telemetry: tuple[InMemorySpanExporter, InMemoryMetricReader]
) -> None:
    """Summaries prepared between steps (the default Config prepares them in the background,
    some superseded before any checkpoint used them) are each a ``ctxledger.summary.prepare``
    span by the time the host has closed; a compaction from a prepared summary links it. Two
    sessions on one host: each span names its own."""
    exporter, _ = telemetry
    config = Config(context_window=8000, compression_threshold=0.8, min_retain_rounds=1)
    # The host's clock stands still: the pace is unknown, so summaries are prepared whenever
    # due, whatever the machine's load (a slow summary at the wall clock's pace is not).
    with Host.open(tmp_path / "db", config=config, clock=lambda: 1_800_000_000.0) as host:
        sessions = [host.session("bg-a"), host.session("bg-b")]
        for step in iter_agent_steps(5, steps=40):
            for session in sessions:
                session.append_many(step)
                session.prepare_step()
        for session in sessions:
            session.wait_background()
        recorded = {
            session.id: [r.event for r in host.log.iter_events(session.id)] for session in sessions
        }
    spans = exporter.get_finished_spans()
    for session_id, events in recorded.items():
        mine = [
            s for s in spans if (s.attributes or {}).get("gen_ai.conversation.id") == session_id
        ]
        prepares = _named(tuple(mine), "ctxledger.summary.prepare")
        prepared = [e for e in events if isinstance(e, SummaryPrepared)]
        assert prepared, "the workload should prepare summaries in the background"
        assert sorted(
            s.attributes["ctxledger.compaction.compaction_id"] for s in prepares
        ) == sorted(e.compaction_id for e in prepared)
        contexts = {s.context.span_id for s in prepares}
        used = [e for e in events if isinstance(e, CheckpointCreated) and e.prepared]
        compactions = [
            s
            for s in _named(tuple(mine), "ctxledger.compaction")
            if s.attributes["ctxledger.compaction.prepared"]
        ]
        assert len(compactions) == len(used)
        for span in compactions:
            assert [link.context.span_id for link in span.links] in ([c] for c in contexts)


def test_a_step_span_describes_the_view(
    tmp_path: Path, telemetry: tuple[InMemorySpanExporter, InMemoryMetricReader]
) -> None:
    """The view's estimate, size and newest seq are on the step's span."""
    exporter, _ = telemetry
    with Host.open(tmp_path / "db", config=CONFIG) as host:
        session = host.session("one")
        session.append_many(next(iter_agent_steps(0, steps=1)))
        view = session.prepare_step()
    (span,) = _named(exporter.get_finished_spans(), "ctxledger.prepare_step")
    attributes = span.attributes or {}
    assert attributes["ctxledger.view.estimated_tokens"] == view.estimated_tokens
    assert attributes["ctxledger.view.messages"] == len(view.messages)
    assert attributes["ctxledger.view.through_seq"] == view.through_seq


def test_a_session_step_is_traced_like_prepare_step(
    tmp_path: Path, telemetry: tuple[InMemorySpanExporter, InMemoryMetricReader]
) -> None:
    """Session.step (what the framework drop-ins call) gets a ctxledger.step span describing
    the view it served, and its compactions are children of it."""
    exporter, _ = telemetry
    foreground = CONFIG.replace(prepare_threshold=0.0)  # every compaction within its step
    with Host.open(tmp_path / "db", config=foreground) as host:
        session = host.session("one")
        views = [session.step(messages) for messages in iter_agent_steps(0, steps=30)]
        checkpoints = session.checkpoints()
    spans = exporter.get_finished_spans()
    steps = _named(spans, "ctxledger.step")
    assert len(steps) == 30 and not _named(spans, "ctxledger.prepare_step")
    attributes = steps[-1].attributes or {}
    assert attributes["ctxledger.view.through_seq"] == views[-1].through_seq
    assert attributes["ctxledger.view.messages"] == len(views[-1].messages)
    compactions = _named(spans, "ctxledger.compaction")
    assert checkpoints and len(compactions) >= len(checkpoints)
    step_ids = {span.context.span_id for span in steps}
    assert all(span.parent is not None and span.parent.span_id in step_ids for span in compactions)


def test_metrics_count_views_compactions_by_reason_and_waits(
    tmp_path: Path, telemetry: tuple[InMemorySpanExporter, InMemoryMetricReader]
) -> None:
    """View tokens histogram, compactions counter by reason, wait histogram."""
    _, reader = telemetry
    created = _run(tmp_path / "db")
    found = _metrics(reader)
    assert sum(point.count for point in found["ctxledger.view.tokens"]) == 30
    counted: dict[str, int] = {}
    for point in found["ctxledger.compactions"]:
        reason = point.attributes["ctxledger.compaction.reason"]
        counted[reason] = counted.get(reason, 0) + point.value
    expected: dict[str, int] = {}
    for event in created:
        expected[event.checkpoint.reason] = expected.get(event.checkpoint.reason, 0) + 1
    assert counted == expected and "manual" in counted
    assert sum(point.count for point in found["ctxledger.compaction.wait"]) == len(created)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_llm_summariser_calls_are_genai_client_spans(
    tmp_path: Path,
    telemetry: tuple[InMemorySpanExporter, InMemoryMetricReader],
    provider: str,
) -> None:
    """Each summariser call to a real HTTP server is a CLIENT span with model and usage, under
    the compaction it served, carrying the session id."""
    exporter, _ = telemetry
    with FakeLLMServer() as server:
        server.queue(*[CannedResponse(reply=f"## Completed work\n- part {n}") for n in range(200)])
        if provider == "openai":
            summarizer: Any = OpenAIChatSummarizer(server.openai_base_url, "fake-gpt")
        else:
            summarizer = AnthropicSummarizer("fake-claude", api_key="k", base_url=server.url)
        with summarizer:
            created = _run(tmp_path / "db", steps=24, summarizer=summarizer, sid="llm")
        requests = len(server.requests)
    spans = exporter.get_finished_spans()
    calls = [span for span in spans if span.name.startswith("chat ")]
    assert created and len(calls) == requests
    model = "fake-gpt" if provider == "openai" else "fake-claude"
    parents = {span.context.span_id: span for span in spans}
    for span in calls:
        attributes = span.attributes or {}
        assert span.kind.name == "CLIENT" and span.name == f"chat {model}"
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.provider.name"] == provider
        assert attributes["gen_ai.request.model"] == model
        assert attributes["gen_ai.usage.input_tokens"] == 1
        assert attributes["gen_ai.usage.output_tokens"] == 1
        assert attributes["gen_ai.conversation.id"] == "llm"
        assert attributes["server.address"] == "127.0.0.1"
        assert span.parent is not None
        parent = parents[span.parent.span_id].name
        assert parent in ("ctxledger.compaction", "ctxledger.summary.prepare")


def test_a_failed_llm_call_is_an_error_span_under_a_failed_compaction(
    tmp_path: Path, telemetry: tuple[InMemorySpanExporter, InMemoryMetricReader]
) -> None:
    """The server answers 500: the call span and its compaction span are errors."""
    exporter, _ = telemetry
    with (
        FakeLLMServer(status=500, body="boom") as server,
        OpenAIChatSummarizer(server.openai_base_url, "fake-gpt") as summarizer,
        # No background summary: the failing one is the manual compaction, alone.
        Host.open(
            tmp_path / "db", config=CONFIG.replace(prepare_threshold=0.0), summarizer=summarizer
        ) as host,
    ):
        session = host.session("fails")
        for step in iter_agent_steps(2, steps=6):
            session.append_many(step)
        result = session.compact()
    assert not result.compacted
    spans = exporter.get_finished_spans()
    (failed,) = _named(spans, "ctxledger.compaction")
    assert failed.status.status_code.name == "ERROR"
    calls = [span for span in spans if span.name == "chat fake-gpt"]
    assert calls and all(span.status.status_code.name == "ERROR" for span in calls)
    assert all(span.parent and span.parent.span_id == failed.context.span_id for span in calls)


def test_uninstrument_puts_every_method_back(tmp_path: Path) -> None:
    """Zero cost when not instrumented: every class holds exactly its own attributes again,
    an inherited method (the async twins, ``Host.close``, a summariser's ``__call__``) is not
    left behind in the subclass's dict, and the traced methods are plain functions (no proxy
    made on every call)."""
    classes = (Session, Host, OpenAIChatSummarizer, AnthropicSummarizer)
    before = {cls: dict(vars(cls)) for cls in classes}
    call = OpenAIChatSummarizer.__call__
    instrumentor = CtxledgerInstrumentor()
    instrumentor.instrument(tracer_provider=TracerProvider(), meter_provider=MeterProvider())
    try:
        for name in ("prepare_step", "aprepare_step", "astep", "compact"):
            traced = vars(Session)[name]
            assert traced is not before[Session].get(name)
            assert type(traced) is types.FunctionType
            assert inspect.iscoroutinefunction(traced) == name.startswith("a")
        assert "close" in vars(Host) and "__call__" in vars(OpenAIChatSummarizer)
    finally:
        instrumentor.uninstrument()
    for cls in classes:
        assert dict(vars(cls)) == before[cls], cls.__name__
    assert "aprepare_step" not in vars(Session) and "close" not in vars(Host)
    assert OpenAIChatSummarizer.__call__ is call
    assert CtxledgerInstrumentor() is instrumentor  # the convention's singleton


def test_async_steps_are_spans_too(
    tmp_path: Path, telemetry: tuple[InMemorySpanExporter, InMemoryMetricReader]
) -> None:
    """aprepare_step is traced like prepare_step."""
    import asyncio

    exporter, _ = telemetry

    async def main() -> None:
        with Host.open(tmp_path / "db", config=CONFIG) as host:
            session = await host.asession("async")
            for step in iter_agent_steps(1, steps=5):
                await session.aappend_many(step)
                await session.aprepare_step()

    asyncio.run(main())
    spans = _named(exporter.get_finished_spans(), "ctxledger.prepare_step")
    assert len(spans) == 5 and all(s.attributes["gen_ai.conversation.id"] == "async" for s in spans)


class _Receiver(ThreadingHTTPServer):
    """A tiny OTLP/HTTP receiver on 127.0.0.1: keeps every POSTed body by path."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                receiver.posts.append((self.path, self.rfile.read(length)))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


def test_spans_reach_an_otlp_http_receiver(tmp_path: Path) -> None:
    """Through the real OTLP/HTTP exporter: the receiver decodes compaction spans that carry
    the session id and the compaction's attributes."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    receiver = _Receiver()
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    provider = TracerProvider()
    endpoint = f"http://127.0.0.1:{receiver.server_address[1]}/v1/traces"
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    instrumentor = CtxledgerInstrumentor()
    instrumentor.instrument(tracer_provider=provider, meter_provider=MeterProvider())
    try:
        created = _run(tmp_path / "db", steps=20, sid="otlp")
        assert provider.force_flush(30_000)
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
        receiver.shutdown()
        receiver.server_close()
        thread.join(timeout=10)
    spans = []
    for path, body in receiver.posts:
        assert path == "/v1/traces"
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                spans.extend(scope.spans)

    def attributes(span: Any) -> dict[str, Any]:
        out = {}
        for item in span.attributes:
            value = item.value
            out[item.key] = getattr(value, value.WhichOneof("value"))
        return out

    compactions = [attributes(s) for s in spans if s.name == "ctxledger.compaction"]
    assert len(compactions) == len(created) >= 1
    for found in compactions:
        assert found["gen_ai.conversation.id"] == "otlp"
        assert {"ctxledger.compaction.reason", "ctxledger.compaction.tokens_before"} <= found.keys()
    assert sum(1 for s in spans if s.name == "ctxledger.prepare_step") == 20
