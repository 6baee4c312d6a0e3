"""Report, UI and OpenTelemetry benchmark (issue 29).

1. ``ctxledger report``: time and size of the HTML report of the largest real trace in
   ../shared/traces (ingested with a 16k window and one retained round, so it compacts) and of
   a synthetic session of 10,000 steps (the workload, 24k window).
2. ``ctxledger ui``: on a log of 10,000 sessions, the time from opening the log to the first
   page (``GET /`` and ``GET /api/sessions?limit=50``) in a fresh process each run, and apart
   from it the time that process took to import ctxledger.
3. OpenTelemetry: wall and process CPU time per agent step (``append_many`` +
   ``prepare_step``), instrumented (SDK tracer and meter providers, spans batched to an exporter
   that drops them) against not instrumented, and against a floor (not instrumented, one bare
   SDK span per step made by the loop), the three in turn in every round of one process;
   medians and the ratios (target ≤ 1.05), with ``durability="sync"`` (the default) and
   ``"none"``, with background summaries (the default Config) and without (``FOREGROUND``:
   the same work in every round).

Usage::

    .venv/bin/python bench/bench_report.py                     # everything (several minutes)
    .venv/bin/python bench/bench_report.py --only otel --steps 400 --rounds 7
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ctxledger import Config, Host, HostOptions
from ctxledger.storage import open_log
from ctxledger.tooling.report import write_report
from ctxledger.tooling.workload import iter_agent_steps

TRACES = Path(
    os.environ.get("CTXLEDGER_TRACES", Path(__file__).resolve().parents[2] / "shared" / "traces")
)
WORKLOAD = Config(context_window=24_000, compression_threshold=0.8, min_retain_rounds=2)


def _median(values: list[float]) -> float:
    return statistics.median(values)


def bench_trace_report(work: Path, repeat: int) -> dict[str, Any]:
    """The largest trace, ingested as the CLI does, then reported ``repeat`` times."""
    found = TRACES.glob("*.jsonl") if TRACES.is_dir() else iter(())
    files = sorted(found, key=lambda p: p.stat().st_size)
    if not files:
        return {"skipped": f"no traces in {TRACES}"}
    largest = files[-1]
    db = work / "trace-db"
    subprocess.run(
        [str(Path(sys.executable).with_name("ctxledger")), "ingest", "--db", str(db), str(largest),
         "--session", "trace", "--window", "16000", "--min-retain-rounds", "1"],
        check=True, capture_output=True,
    )
    return _time_report(db, "trace", work / "trace.html", repeat) | {"trace": largest.name}


def bench_synthetic_report(work: Path, steps: int, repeat: int) -> dict[str, Any]:
    """A synthetic session of ``steps`` steps, reported ``repeat`` times."""
    db = work / "synthetic-db"
    started = time.perf_counter()
    with Host.open(db, config=WORKLOAD, options=HostOptions(durability="none")) as host:
        session = host.session("synthetic")
        for step in iter_agent_steps(0, steps=steps):
            session.append_many(step)
            session.prepare_step()
    made = time.perf_counter() - started
    return _time_report(db, "synthetic", work / "synthetic.html", repeat) | {
        "steps": steps,
        "generate_seconds": round(made, 1),
    }


def _time_report(db: Path, session: str, out: Path, repeat: int) -> dict[str, Any]:
    times = []
    written = None
    with open_log(db, readonly=True) as log:
        events = log.last_seq(session)
        for _ in range(repeat):
            started = time.perf_counter()
            written = write_report(log, session, out)
            times.append(time.perf_counter() - started)
    assert written is not None
    return {
        "events": events,
        "report_steps": written.steps,
        "compactions": written.compactions,
        "bytes": written.bytes,
        "seconds_median": round(_median(times), 3),
        "seconds_min": round(min(times), 3),
    }


def bench_ui_first_page(work: Path, sessions: int, repeat: int) -> dict[str, Any]:
    """A log of ``sessions`` sessions (one step each); first page time in fresh processes."""
    db = work / "many-db"
    started = time.perf_counter()
    with Host.open(
        db,
        config=WORKLOAD,
        options=HostOptions(durability="none", max_active_sessions=64),
    ) as host:
        for index in range(sessions):
            session = host.session(f"agent-{index:05d}")
            session.append_many(next(iter(iter_agent_steps(index, steps=1))))
            session.prepare_step()
    made = time.perf_counter() - started
    times = [_first_page(db) for _ in range(repeat)]
    served = [served for _, served in times]
    return {
        "sessions": sessions,
        "generate_seconds": round(made, 1),
        "open_to_first_page_median": round(_median(served), 3),
        "open_to_first_page_max": round(max(served), 3),
        "import_median": round(_median([imported for imported, _ in times]), 3),
    }


_FIRST_PAGE = """
import http.client, sys, time
started = time.perf_counter()
from ctxledger.storage import open_log
from ctxledger.tooling.ui import UiServer
imported = time.perf_counter()
with open_log(sys.argv[1], readonly=True) as log, UiServer(log, "127.0.0.1", 0) as ui:
    ui.start()
    for path in ("/", "/api/sessions?limit=50"):
        connection = http.client.HTTPConnection("127.0.0.1", ui.port, timeout=60)
        connection.request("GET", path)
        response = connection.getresponse()
        assert response.status == 200 and response.read()
        connection.close()
    print(imported - started, time.perf_counter() - imported)
"""


def _first_page(db: Path) -> tuple[float, float]:
    """In a fresh process: seconds to import ctxledger's UI, and from opening the log to both
    first answers."""
    done = subprocess.run(
        [sys.executable, "-c", _FIRST_PAGE, str(db)], check=True, capture_output=True, text=True
    )
    imported, served = done.stdout.split()
    return float(imported), float(served)


class _Drop:
    """A span exporter that keeps nothing (what leaves the process is not measured here)."""

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


#: The OpenTelemetry run with background summaries off: the agent waits for each summary, so
#: every round does the same work (with them on, how many summaries a round prepares, and
#: discards, depends on the threads' timing: 46 to 90 in 400 steps, which moves a round's CPU
#: time more than the instrumentation does).
FOREGROUND = Config(
    context_window=24_000, compression_threshold=0.8, min_retain_rounds=2, prepare_threshold=0
)
_OTEL_MODES = ("plain", "floor", "instrumented")


def bench_otel(
    work: Path, steps: int, rounds: int, durability: str, config: Config = WORKLOAD
) -> dict[str, Any]:
    """Per-step wall and CPU time in three modes, in turn in every round: ``plain`` (not
    instrumented), ``floor`` (not instrumented, but the loop makes one bare SDK span around
    each ``prepare_step``: what any tracing of the call costs at least) and ``instrumented``.
    Ratios of the medians, and the median of each round's own ratio."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from ctxledger.integrations.otel import CtxledgerInstrumentor

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(_Drop()))  # type: ignore[arg-type]
    meter_provider = MeterProvider()
    instrumentor = CtxledgerInstrumentor()
    tracer = tracer_provider.get_tracer("bench-floor")
    wall: dict[str, list[float]] = {mode: [] for mode in _OTEL_MODES}
    cpu: dict[str, list[float]] = {mode: [] for mode in _OTEL_MODES}
    caller: dict[str, list[float]] = {mode: [] for mode in _OTEL_MODES}
    tracing: dict[str, list[float]] = {mode: [] for mode in ("floor", "instrumented")}
    for index in range(rounds):
        for mode in _OTEL_MODES:
            spent = [0.0]  # the calling thread's CPU seconds in the tracing work itself
            timed = _timed_finish(spent) if mode == "instrumented" else contextlib.nullcontext()
            with timed:
                if mode == "instrumented":
                    instrumentor.instrument(
                        tracer_provider=tracer_provider, meter_provider=meter_provider
                    )
                try:
                    db = work / f"otel-{durability}-{config.prepare_threshold}-{mode}-{index}"
                    spans = tracer if mode == "floor" else None
                    seconds, used, own = _steps(db, steps, durability, config, spans, spent)
                finally:
                    if mode == "instrumented":
                        instrumentor.uninstrument()
                wall[mode].append(seconds)
                cpu[mode].append(used)
                caller[mode].append(own)
                if mode in tracing:
                    tracing[mode].append(spent[0] / steps)
    tracer_provider.shutdown()

    def ratio(times: dict[str, list[float]], mode: str, base: str = "plain") -> float:
        return round(_median(times[mode]) / _median(times[base]), 3)

    def paired(times: dict[str, list[float]], mode: str) -> float:
        return round(_median([b / a for a, b in zip(times["plain"], times[mode], strict=True)]), 3)

    return {
        "durability": durability,
        "background": config.prepare_threshold != 0,
        "steps": steps,
        "rounds": rounds,
        **{f"{mode}_us_per_step": round(_median(wall[mode]) * 1e6, 1) for mode in _OTEL_MODES},
        "ratio": ratio(wall, "instrumented"),
        "paired_ratio": paired(wall, "instrumented"),
        "floor_ratio": ratio(wall, "floor"),
        **{f"{mode}_cpu_us_per_step": round(_median(cpu[mode]) * 1e6, 1) for mode in _OTEL_MODES},
        "cpu_ratio": ratio(cpu, "instrumented"),
        "cpu_paired_ratio": paired(cpu, "instrumented"),
        "cpu_floor_ratio": ratio(cpu, "floor"),
        "cpu_over_floor": ratio(cpu, "instrumented", "floor"),
        **{f"{mode}_caller_cpu_us": round(_median(caller[mode]) * 1e6, 1) for mode in _OTEL_MODES},
        # What tracing adds to the agent's own thread, as a share of a plain step's CPU (all
        # threads). It holds the variance of whatever else the calling thread does in a step
        # (all of it, with a caller-runs host: stop 43's reverted change): the next two measure
        # the tracing work in place instead.
        **{
            f"{mode}_caller_added_share": round(
                (_median(caller[mode]) - _median(caller["plain"])) / _median(cpu["plain"]), 4
            )
            for mode in ("floor", "instrumented")
        },
        # The calling thread's CPU in the tracing work itself, timed in place around it (the
        # bare span in the floor; Telemetry.finish_call, all the instrumentor does after the
        # call, when instrumented), per step and as a share of a plain step's CPU.
        **{f"{mode}_tracing_us": round(_median(tracing[mode]) * 1e6, 1) for mode in tracing},
        **{
            f"{mode}_tracing_share": round(_median(tracing[mode]) / _median(cpu["plain"]), 4)
            for mode in tracing
        },
    }


@contextlib.contextmanager
def _timed_finish(spent: list[float]) -> Iterator[None]:
    """Add the calling thread's CPU in each ``Telemetry.finish_call`` to ``spent[0]`` (enter
    before instrumenting: the traced methods take the method when they are made)."""
    from ctxledger.integrations._otel_spans import Telemetry

    real = Telemetry.finish_call

    def finish_call(self: Telemetry, *args: Any) -> None:
        began = time.thread_time()
        try:
            real(self, *args)
        finally:
            spent[0] += time.thread_time() - began

    Telemetry.finish_call = finish_call  # type: ignore[method-assign]
    try:
        yield
    finally:
        Telemetry.finish_call = real  # type: ignore[method-assign]


def _steps(
    db: Path,
    steps: int,
    durability: str,
    config: Config = WORKLOAD,
    spans: Any = None,
    spent: list[float] | None = None,
) -> tuple[float, float, float]:
    """Wall, process CPU (every thread of the host counted) and the calling thread's CPU
    seconds per step; with ``spans`` (a tracer), one bare span around each ``prepare_step``."""
    options = HostOptions(durability=durability)  # type: ignore[arg-type]
    with Host.open(db, config=config, options=options) as host:
        session = host.session("s")
        work = list(iter_agent_steps(7, steps=steps))
        started, cpu, own = time.perf_counter(), time.process_time(), time.thread_time()
        for step in work:
            session.append_many(step)
            if spans is None:
                session.prepare_step()
                continue
            begun = time.time_ns()
            session.prepare_step()
            before = time.thread_time()
            spans.start_span(
                "ctxledger.prepare_step",
                attributes={"gen_ai.conversation.id": "s"},
                start_time=begun,
            ).end()
            if spent is not None:
                spent[0] += time.thread_time() - before
        return (
            (time.perf_counter() - started) / steps,
            (time.process_time() - cpu) / steps,
            (time.thread_time() - own) / steps,
        )


def main(argv: list[str] | None = None) -> None:
    """Run the benchmarks and print one JSON object (and write it with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["trace", "synthetic", "ui", "otel"], action="append")
    parser.add_argument("--steps", type=int, default=400, help="Steps per OpenTelemetry round.")
    parser.add_argument("--rounds", type=int, default=5, help="Rounds per OpenTelemetry mode.")
    parser.add_argument("--synthetic-steps", type=int, default=10_000)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="Also write the results here.")
    args = parser.parse_args(argv)
    chosen = set(args.only or ["trace", "synthetic", "ui", "otel"])
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ctxledger-bench-report-") as folder:
        work = Path(folder)
        for name, run in _plan(args, work):
            if name in chosen:
                print(f"running {name} …", file=sys.stderr, flush=True)
                results[name] = run()
                print(json.dumps({name: results[name]}), file=sys.stderr, flush=True)
    text = json.dumps(results, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


def _plan(args: argparse.Namespace, work: Path) -> Iterator[tuple[str, Any]]:
    yield "trace", lambda: bench_trace_report(work, args.repeat)
    yield "synthetic", lambda: bench_synthetic_report(work, args.synthetic_steps, args.repeat)
    yield "ui", lambda: bench_ui_first_page(work, args.sessions, args.repeat)
    yield "otel", lambda: {
        "sync": bench_otel(work, args.steps, args.rounds, "sync"),
        "none": bench_otel(work, args.steps, args.rounds, "none"),
        "sync_foreground": bench_otel(work, args.steps, args.rounds, "sync", FOREGROUND),
        "none_foreground": bench_otel(work, args.steps, args.rounds, "none", FOREGROUND),
    }


if __name__ == "__main__":
    main()
