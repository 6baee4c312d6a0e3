"""Background compaction benchmark (issue 14): how long agents wait on summaries.

1. Live: several agent sessions on one real :class:`~ctxledger.Host` on LMDB (durability
   "sync"), each a thread that appends an agent step of the synthetic workload, compacts if
   needed, serves the view and then "calls the model" (sleeps 0.25 s). A summary takes 2 s (a
   sleep, then the offline extractive summary; one call per compaction: no chunking). The
   same run is made with background compaction on (``prepare_threshold`` at its default: the
   prepare point a quarter of the way from the target up to the threshold) and off (``0``),
   side by side, at each window of ``--windows`` (4k, 16k and 32k by default).
   Reported per system: automatic compactions, how many waited 0 s, the seconds agents waited
   on summaries in all and per compaction (``CompactionResult.waited_seconds``), and the
   median and worst step latency. Target: >= 90 % of automatic compactions wait 0 s.
2. Offline: summariser input on the real traces (../shared/traces) at a 32,000-token window,
   re-projected with :func:`ctxledger.replay.what_if` under both policies (the agent steps 0.25 s
   apart, summaries assumed to take 2 s). Background compaction may summarise a cut that is
   never used, or summarise a delta on top of a prepared summary; the target is at most +10 %
   summariser input characters over the synchronous policy.

Usage::

    .venv/bin/python bench/bench_background.py                 # full run
    .venv/bin/python bench/bench_background.py --quick         # a small smoke run
    .venv/bin/python bench/bench_background.py --skip-live     # the trace part only
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxledger import Config, ContextOverflowError, Host, Message
from ctxledger.events import MessageAppended, SessionOpened, ViewServed
from ctxledger.replay import what_if
from ctxledger.storage import MemoryEventLog
from ctxledger.summarizers import ExtractiveSummarizer, SummaryRequest
from ctxledger.tooling.traces import read_trace
from ctxledger.tooling.workload import iter_agent_steps

SUMMARY_SECONDS = 2.0
STEP_SECONDS = 0.25
WINDOW = 32_000
#: One summariser call per compaction (no chunking), so that a summary takes 2 s whatever its
#: size: the benchmark measures when agents wait, not how a summariser scales with its input.
LIVE_CONFIG = Config(context_window=WINDOW, summary_chunk_chars=10_000_000)
TRACES = Path(
    os.environ.get("CTXLEDGER_TRACES", Path(__file__).resolve().parents[2] / "shared" / "traces")
)


class SlowSummarizer:
    """The offline extractive summariser, after ``seconds`` of (simulated) LLM latency."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.inner = ExtractiveSummarizer()
        self.lock = threading.Lock()
        self.calls = 0
        self.input_chars = 0

    def __call__(self, request: SummaryRequest, /) -> str | None:
        with self.lock:
            self.calls += 1
            self.input_chars += request_chars(request)
        time.sleep(self.seconds)
        return self.inner(request)


def request_chars(request: SummaryRequest) -> int:
    """Characters the summariser is given: the messages and the previous summary."""
    return sum(len(m.content) for m in request.messages) + len(request.previous_summary or "")


@dataclass
class LiveRun:
    """What one live run measured."""

    prepare_threshold: float | None
    window: int = WINDOW
    waits: list[float] = field(default_factory=list)  # per automatic compaction
    prepared: int = 0
    latencies: list[float] = field(default_factory=list)
    summarizer_calls: int = 0
    summarizer_chars: int = 0
    seconds: float = 0.0
    refused: int = 0
    growths: list[int] = field(default_factory=list)  # view estimate rise over a plain step

    def row(self) -> dict[str, Any]:
        n = len(self.waits)
        zero = sum(1 for w in self.waits if w == 0.0)
        return {
            "window": self.window,
            "prepare_threshold": self.prepare_threshold,
            "compactions": n,
            "prepared": self.prepared,
            "zero_wait": zero,
            "zero_wait_share": zero / n if n else None,
            "waited_total": sum(self.waits),
            "waited_mean": sum(self.waits) / n if n else 0.0,
            "waited_median": statistics.median(self.waits) if n else 0.0,
            "waited_max": max(self.waits, default=0.0),
            "step_median": statistics.median(self.latencies),
            "step_max": max(self.latencies),
            "summarizer_calls": self.summarizer_calls,
            "summarizer_chars": self.summarizer_chars,
            "seconds": self.seconds,
            "refused": self.refused,
        }


def live_run(
    prepare_threshold: float | None, sessions: int, steps: int, window: int = WINDOW
) -> LiveRun:
    """Drive ``sessions`` agents for ``steps`` steps each on one host; see the module doc."""
    config = LIVE_CONFIG.replace(context_window=window, prepare_threshold=prepare_threshold)
    summarizer = SlowSummarizer(SUMMARY_SECONDS)
    run = LiveRun(prepare_threshold, window)
    lock = threading.Lock()
    failures: list[BaseException] = []
    started = time.perf_counter()
    with (
        tempfile.TemporaryDirectory() as tmp,
        Host.open(Path(tmp) / "db", config=config, summarizer=summarizer) as host,
    ):
        barrier = threading.Barrier(sessions)

        def agent(index: int) -> None:
            try:
                session = host.session(f"agent-{index:02d}")
                work = list(iter_agent_steps(seed=index, steps=steps))
                barrier.wait()
                last: int | None = None
                for step in work:
                    begun = time.perf_counter()
                    session.append_many(step)
                    result = session.compact_if_needed()
                    try:
                        estimate = session.prepare_step().estimated_tokens
                        if last is not None and not result.compacted:
                            with lock:
                                run.growths.append(estimate - last)
                        last = estimate
                    except ContextOverflowError:
                        # The newest step alone does not fit this window (a few parallel reads
                        # of long files at 4k): refused, nothing served; the agent goes on.
                        with lock:
                            run.refused += 1
                    took = time.perf_counter() - begun
                    with lock:
                        run.latencies.append(took)
                        if result.compacted:
                            run.waits.append(result.waited_seconds)
                            run.prepared += result.prepared
                    time.sleep(STEP_SECONDS)  # the model call
            except BaseException as exc:  # re-raised below
                failures.append(exc)

        threads = [threading.Thread(target=agent, args=(n,)) for n in range(sessions)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if failures:
        raise failures[0]
    run.seconds = time.perf_counter() - started
    run.summarizer_calls = summarizer.calls
    run.summarizer_chars = summarizer.input_chars
    return run


def room_row(run: LiveRun) -> dict[str, Any]:
    """The floor of a live run: how many of its agent steps fit between the prepare point and
    the threshold, against the steps a summary takes (``SUMMARY_SECONDS / STEP_SECONDS``). A
    compaction waits 0 s only if its summary, started at the prepare point, is ready before the
    threshold; when the steps are larger than that room allows, no scheduling avoids the wait
    at this window with this prepare point. A step's growth is measured in the same run: the
    rise of the served view's estimate over a step that did not compact (masking included).
    """
    sizes = LIVE_CONFIG.replace(
        context_window=run.window, prepare_threshold=run.prepare_threshold
    ).sizes()
    need = SUMMARY_SECONDS / STEP_SECONDS
    rises = [g for g in run.growths if g > 0]
    median = statistics.median(rises) if rises else 0
    room = sizes.threshold_tokens - sizes.prepare_tokens
    return {
        "window": run.window,
        "threshold_tokens": sizes.threshold_tokens,
        "prepare_tokens": sizes.prepare_tokens,
        "median_step_tokens": median,
        "room_steps": room / median if median else None,
        "gap_steps": (sizes.threshold_tokens - sizes.target_tokens) / median if median else None,
        "summary_steps": need,
    }


def room_markdown(rows: list[dict[str, Any]]) -> str:
    out = [
        "### The floor: room between the prepare point and the threshold, in agent steps",
        "",
        "| window | prepare point | threshold | median step (tokens) | room (steps) | the whole "
        "gap, target to threshold (steps) | a summary takes (steps) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        room = f"{r['room_steps']:.1f}" if r["room_steps"] is not None else "-"
        gap = f"{r['gap_steps']:.1f}" if r["gap_steps"] is not None else "-"
        out.append(
            f"| {r['window']:,} | {r['prepare_tokens']:,} | {r['threshold_tokens']:,} | "
            f"{r['median_step_tokens']:,.0f} | {room} | {gap} | {r['summary_steps']:.0f} |"
        )
    return "\n".join(out)


# --- summariser input on the real traces -------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def agent_steps(messages: list[Message]) -> list[list[Message]]:
    """Split a trace right before each assistant message (where an agent calls the model)."""
    steps: list[list[Message]] = [[]]
    for message in messages:
        if message.role == "assistant" and steps[-1]:
            steps.append([])
        steps[-1].append(message)
    return [step for step in steps if step]


def trace_log(name: str, messages: list[Message], opened: Config) -> MemoryEventLog:
    """A log of the trace as an agent made it: a step every 0.25 s, a view after each.

    It records no compaction, so what_if decides (and summarises) every one itself.
    """
    clock = _Clock()
    log = MemoryEventLog(clock=clock)
    log.append(name, [SessionOpened(session_id=name, config=opened)], expected_seq=0)
    seq = 0
    for index, step in enumerate(agent_steps(messages)):
        clock.now = index * STEP_SECONDS
        appended = []
        for message in step:
            seq += 1
            appended.append(MessageAppended(message=message.with_seq(seq)))
        log.append(name, appended, expected_seq=log.last_seq(name))
        clock.now += 0.001  # the view is served right after (a commit of its own)
        served = ViewServed(
            through_seq=seq, estimated_tokens=0, view_hash="", checkpoint_id=None, message_count=0
        )
        log.append(name, [served], expected_seq=log.last_seq(name))
    return log


class _Counting:
    def __init__(self) -> None:
        self.inner = ExtractiveSummarizer()
        self.calls = 0
        self.chars = 0

    def __call__(self, request: SummaryRequest, /) -> str | None:
        self.calls += 1
        self.chars += request_chars(request)
        return self.inner(request)


def trace_input(traces: dict[str, list[Message]], window: int = WINDOW) -> dict[str, Any]:
    """Summariser input (chars, calls) on every trace, synchronous vs background policy."""
    sync = Config(context_window=window, prepare_threshold=0.0)
    background = Config(context_window=window)  # prepare_threshold: the default (derived)
    totals: dict[str, dict[str, float]] = {}
    per_trace: dict[str, dict[str, int]] = {}
    for label, config in (("synchronous", sync), ("background", background)):
        total = {"chars": 0.0, "calls": 0.0, "compactions": 0.0, "in_time": 0.0, "late": 0.0}
        total["waited"] = 0.0
        for name, messages in sorted(traces.items()):
            log = trace_log(name, messages, sync)
            counting = _Counting()
            report = what_if(
                log, name, config, summarizer=counting, summary_seconds=SUMMARY_SECONDS
            )
            total["chars"] += counting.chars
            total["calls"] += counting.calls
            total["compactions"] += report.compactions
            total["in_time"] += report.prepared_in_time
            total["late"] += report.prepared_late
            total["waited"] += report.waited_seconds
            per_trace.setdefault(name, {})[label] = counting.chars
        totals[label] = total
    ratio = totals["background"]["chars"] / max(1.0, totals["synchronous"]["chars"])
    # Summaries prepared for sessions that end before the threshold (never needed in them).
    ended = sum(d["background"] for d in per_trace.values() if d["synchronous"] == 0)
    rest = (totals["background"]["chars"] - ended) / max(1.0, totals["synchronous"]["chars"])
    return {
        "totals": totals,
        "ratio": ratio,
        "ended_below_threshold_chars": ended,
        "ratio_without_them": rest,
        "per_trace": per_trace,
        "traces": len(traces),
    }


# --- output ------------------------------------------------------------------------------------


def live_markdown(rows: list[dict[str, Any]], sessions: int, steps: int) -> str:
    out = [
        f"### Live: {sessions} agents x {steps} steps, summariser {SUMMARY_SECONDS:.0f} s, "
        f"a step every {STEP_SECONDS} s, LMDB sync",
        "",
        "| window | prepare_threshold | auto compactions | prepared | waited 0 s | waited total | "
        "per compaction (mean / median / max) | step latency median / max | summariser calls | "
        "summariser input chars | refused steps |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        share = f"{r['zero_wait_share']:.0%}" if r["zero_wait_share"] is not None else "-"
        prepare = "default" if r["prepare_threshold"] is None else r["prepare_threshold"]
        out.append(
            f"| {r['window']:,} | {prepare} | {r['compactions']} | {r['prepared']} | "
            f"{r['zero_wait']} ({share}) | {r['waited_total']:.2f} s | "
            f"{r['waited_mean']:.3f} / {r['waited_median']:.3f} / {r['waited_max']:.3f} s | "
            f"{r['step_median'] * 1000:.1f} / {r['step_max'] * 1000:.0f} ms | "
            f"{r['summarizer_calls']} | {r['summarizer_chars']:,} | {r['refused']} |"
        )
    return "\n".join(out)


def trace_markdown(result: dict[str, Any]) -> str:
    t = result["totals"]
    out = [
        f"### Summariser input on {result['traces']} real traces, window {WINDOW:,} (what_if; "
        f"steps {STEP_SECONDS} s apart, summaries {SUMMARY_SECONDS:.0f} s)",
        "",
        "| policy | summariser input chars | calls | checkpoints | prepared in time | "
        "prepared late | waited (simulated) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label in ("synchronous", "background"):
        r = t[label]
        out.append(
            f"| {label} | {int(r['chars']):,} | {int(r['calls'])} | {int(r['compactions'])} | "
            f"{int(r['in_time'])} | {int(r['late'])} | {r['waited']:.1f} s |"
        )
    out.append("")
    out.append(f"background / synchronous input: {result['ratio']:.3f} (target <= 1.10)")
    out.append(
        f"of which {result['ended_below_threshold_chars']:,} chars were prepared in traces that "
        "end before reaching the threshold (the synchronous policy never compacts them); "
        f"without those: {result['ratio_without_them']:.3f}"
    )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--steps", type=int, default=320)
    parser.add_argument(
        "--windows", default="4000,16000,32000", help="the live part's windows, comma-separated"
    )
    parser.add_argument(
        "--thresholds",
        default="default,0",
        help="prepare_threshold values of the live part, comma-separated ('default': the "
        "derived prepare point; 0: synchronous)",
    )
    parser.add_argument("--skip-live", action="store_true")
    parser.add_argument("--skip-traces", action="store_true")
    args = parser.parse_args(argv)
    sessions, steps = (2, 60) if args.quick else (args.sessions, args.steps)
    if not args.skip_live:
        rows = []
        runs: list[LiveRun] = []
        for window in (int(value) for value in args.windows.split(",") if value.strip()):
            for value in args.thresholds.split(","):
                threshold = None if value.strip() == "default" else float(value)
                run = live_run(threshold, sessions, steps, window)
                runs.append(run)
                rows.append(run.row())
                print(f"live window={window} prepare={threshold}: {rows[-1]}", file=sys.stderr)
        print(live_markdown(rows, sessions, steps))
        print()
        print(room_markdown([room_row(run) for run in runs if run.prepare_threshold != 0]))
        print()
    if not args.skip_traces:
        files = sorted(TRACES.glob("*.jsonl")) if TRACES.is_dir() else []
        if not files:
            print(f"(no traces in {TRACES}: the trace part is skipped)")
        else:
            traces = {path.stem: read_trace(path) for path in files}
            print(trace_markdown(trace_input(traces)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
