"""Background compaction benchmark (issue 14): how long agents wait on summaries.

1. Live: several agent sessions on one real :class:`~ctxledger.Host` on LMDB (durability
   "sync"), each a thread that appends an agent step of the synthetic workload, compacts if
   needed, serves the view and then "calls the model" (sleeps 0.25 s). A summary takes 2 s (a
   sleep, then the offline extractive summary; one call per compaction: no chunking). The
   same run is made with background compaction on (``prepare_threshold`` at its default: the
   prepare point a tenth of the way from the target up to the threshold, a quarter for
   ``--schemas 4``) and off (``0``),
   side by side, at each window of ``--windows`` (4k, 16k and 32k by default).
   Reported per system: automatic compactions, how many waited 0 s, the seconds agents waited
   on summaries in all and per compaction (``CompactionResult.waited_seconds``), and the
   median and worst step latency. Target: >= 90 % of automatic compactions wait 0 s.
2. Simulated (``--simulate``, deterministic): the same workload, each agent's conversation
   recorded once with a step every 0.25 s and re-projected with :func:`ctxledger.replay.what_if`
   (summaries 2 s, run until ready, one at a time per session, as a host runs them; no shared
   pool). Reported per window: compactions, how many wait 0 s, and the **ceiling**: how many
   could wait 0 s at all. A compaction can only if a summary started 8 steps earlier (2 s at a
   step every 0.25 s), cut at that step's newest boundary (the deepest cut it could make),
   with the smallest summary and no fact block, gives a view within the absorb limit (half the
   gap above the target) at the threshold: any later start is not ready, any earlier one
   absorbs more growth. Where the ceiling is below 90 %, no runtime reaches the target.
3. Offline: summariser input on the real traces (../shared/traces) at a 32,000-token window,
   re-projected with :func:`ctxledger.replay.what_if` under both policies (the agent steps 0.25 s
   apart, summaries assumed to take 2 s). Background compaction may summarise a cut that is
   never used, or summarise a delta on top of a prepared summary; the target is at most +10 %
   summariser input characters over the synchronous policy.

Usage::

    .venv/bin/python bench/bench_background.py                 # full run
    .venv/bin/python bench/bench_background.py --quick         # a small smoke run
    .venv/bin/python bench/bench_background.py --skip-live     # the trace part only
    .venv/bin/python bench/bench_background.py --simulate --skip-live --skip-traces
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

from ctxledger import Config, ContextOverflowError, Host, HostOptions, Message
from ctxledger.domain import CharTokenizer, SessionState
from ctxledger.domain.cuts import CutMeasure
from ctxledger.domain.policy import marks, smallest_summary
from ctxledger.events import MessageAppended, SessionOpened, ViewServed
from ctxledger.replay import WhatIfStep, what_if
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
    schema: int = LIVE_CONFIG.schema_version
    pool: int = 4  # summariser workers (and background compactions) of the host
    waits: list[float] = field(default_factory=list)  # per automatic compaction
    own_latencies: list[float] = field(default_factory=list)  # steps, less waiting on summaries
    prepared: int = 0
    latencies: list[float] = field(default_factory=list)
    summarizer_calls: int = 0
    summarizer_chars: int = 0
    seconds: float = 0.0
    refused: int = 0
    # Per agent: its steps' messages and the indices of the steps that compacted (the ceiling).
    conversations: list[list[list[Message]]] = field(default_factory=list)
    compacted_steps: list[list[int]] = field(default_factory=list)
    ceiling: int | None = None  # compactions that could wait 0 s at all (see ceiling())

    def row(self) -> dict[str, Any]:
        n = len(self.waits)
        zero = sum(1 for w in self.waits if w == 0.0)
        return {
            "window": self.window,
            "schema": self.schema,
            "pool": self.pool,
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
            "ceiling": self.ceiling,
        }


def live_run(
    prepare_threshold: float | None,
    sessions: int,
    steps: int,
    window: int = WINDOW,
    schema: int = LIVE_CONFIG.schema_version,
    pool: int | None = None,
) -> LiveRun:
    """Drive ``sessions`` agents for ``steps`` steps each on one host; see the module doc.
    ``pool``: summariser workers and background compactions host-wide (default: HostOptions')."""
    options = (
        HostOptions()
        if pool is None
        else (HostOptions(compaction_workers=pool, background_compactions=pool))
    )
    config = LIVE_CONFIG.replace(
        context_window=window, prepare_threshold=prepare_threshold, schema_version=schema
    )
    summarizer = SlowSummarizer(SUMMARY_SECONDS)
    run = LiveRun(prepare_threshold, window, schema, options.compaction_workers)
    lock = threading.Lock()
    failures: list[BaseException] = []
    started = time.perf_counter()
    run.conversations = [list(iter_agent_steps(seed=n, steps=steps)) for n in range(sessions)]
    run.compacted_steps = [[] for _ in range(sessions)]
    with (
        tempfile.TemporaryDirectory() as tmp,
        Host.open(Path(tmp) / "db", config=config, summarizer=summarizer, options=options) as host,
    ):
        barrier = threading.Barrier(sessions)

        def agent(index: int) -> None:
            try:
                session = host.session(f"agent-{index:02d}")
                work = run.conversations[index]
                barrier.wait()
                for number, step in enumerate(work):
                    begun = time.perf_counter()
                    session.append_many(step)
                    result = session.compact_if_needed()
                    try:
                        session.prepare_step()
                    except ContextOverflowError:
                        # The newest step alone does not fit this window (a few parallel reads
                        # of long files at 4k): refused, nothing served; the agent goes on.
                        with lock:
                            run.refused += 1
                    took = time.perf_counter() - begun
                    with lock:
                        run.latencies.append(took)
                        # The step without waiting for a summary: the pace the agent would
                        # keep if it never waited (the ceiling's steps per summary).
                        run.own_latencies.append(took - result.waited_seconds)
                        if result.compacted:
                            run.waits.append(result.waited_seconds)
                            run.prepared += result.prepared
                            run.compacted_steps[index].append(number)
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
    if prepare_threshold != 0:
        # A 2 s summary spans this many of the run's own steps (a step is the model call and
        # the step's own latency, measured, less what it waited on summaries: where every step
        # waits, as at 4k, the waits would otherwise make the steps look slow enough for any
        # summary).
        period = STEP_SECONDS + statistics.median(run.own_latencies)
        span = max(1, round(SUMMARY_SECONDS / period))
        run.ceiling = sum(
            ceiling(config, conversation, compacted, span)
            for conversation, compacted in zip(run.conversations, run.compacted_steps, strict=True)
        )
    return run


def ceiling(config: Config, steps: list[list[Message]], compacted: list[int], span: int) -> int:
    """How many of the compactions at step indices ``compacted`` could have waited 0 s at all.

    One could only if a summary started ``span`` steps earlier (as late as a summary can start
    and still be ready), cut at that step's newest boundary (the deepest cut it could make),
    with the smallest summary (a quarter of its room) and no fact block, gives at the threshold
    a view the policy activates without waiting: within half the gap above the target
    (:func:`ctxledger.domain.policy.absorbs`). A later start is not ready; an earlier one cuts
    no deeper and absorbs more growth; a larger summary or a block only adds. So a compaction
    this says no to waits whatever the runtime does (the masking of the view served then is
    approximated by the fold of the appended messages).
    """
    state = SessionState.new("ceiling", config)
    tokenizer = CharTokenizer()
    ends: list[int] = []
    seq = 0
    for step in steps:
        seq += len(step)
        ends.append(seq)
    smallest = smallest_summary(config.sizes().summary_chars)
    possible = 0
    seq = 0
    for index in compacted:
        while seq < ends[index]:
            message = steps_message(steps, seq)
            seq += 1
            state.apply(MessageAppended(message=message.with_seq(seq)))
        start = index - span
        if start < 0:
            continue  # the session began less than a summary's time before
        in_force = marks(state)
        limit = in_force.target + (in_force.threshold - in_force.target) // 2
        cut = state.boundary_at_or_before(ends[start] + 1) or 1
        measure = CutMeasure(state, tokenizer, "threshold_exceeded", smallest, "")
        possible += measure.exact(cut) <= limit
    return possible


def steps_message(steps: list[list[Message]], seq: int) -> Message:
    """The message at 0-based position ``seq`` of the conversation ``steps``."""
    for step in steps:
        if seq < len(step):
            return step[seq]
        seq -= len(step)
    raise IndexError(seq)


# --- simulated (deterministic) ------------------------------------------------------------------


def workload_log(seed: int, steps: int) -> tuple[str, MemoryEventLog, list[list[Message]]]:
    """A log of the workload agent ``seed`` as it ran: a step every 0.25 s, a view after each,
    under a window nothing compacts in (what_if decides every compaction itself)."""
    work = list(iter_agent_steps(seed=seed, steps=steps))
    name = f"agent-{seed:02d}"
    clock = _Clock()
    log = MemoryEventLog(clock=clock)
    opened = Config(context_window=10_000_000)
    log.append(name, [SessionOpened(session_id=name, config=opened)], expected_seq=0)
    seq = 0
    for index, step in enumerate(work):
        clock.now = index * STEP_SECONDS
        appended = []
        for message in step:
            seq += 1
            appended.append(MessageAppended(message=message.with_seq(seq)))
        log.append(name, appended, expected_seq=log.last_seq(name))
        clock.now += 0.001
        served = ViewServed(
            through_seq=seq, estimated_tokens=0, view_hash="", checkpoint_id=None, message_count=0
        )
        log.append(name, [served], expected_seq=log.last_seq(name))
    return name, log, work


def simulated_run(
    window: int,
    prepare_threshold: float | None,
    sessions: int,
    steps: int,
    schema: int = LIVE_CONFIG.schema_version,
) -> dict[str, Any]:
    """The live workload re-projected with what_if at simulated time (see the module doc)."""
    config = LIVE_CONFIG.replace(
        context_window=window, prepare_threshold=prepare_threshold, schema_version=schema
    )
    compactions = zero = prepared = calls = chars = possible = 0
    waited = 0.0
    for seed in range(sessions):
        name, log, work = workload_log(seed, steps)
        counting = _Counting()
        report = what_if(log, name, config, summarizer=counting, summary_seconds=SUMMARY_SECONDS)
        done: list[WhatIfStep] = [step for step in report.steps if step.compacted]
        compactions += len(done)
        zero += sum(1 for step in done if step.waited_seconds == 0.0)
        prepared += sum(1 for step in done if step.prepared)
        waited += sum(step.waited_seconds for step in done)
        calls += counting.calls
        chars += counting.chars
        indices = [index for index, step in enumerate(report.steps) if step.compacted]
        span = round(SUMMARY_SECONDS / STEP_SECONDS)
        possible += ceiling(config, work, indices, span)
    return {
        "window": window,
        "schema": schema,
        "prepare_threshold": prepare_threshold,
        "compactions": compactions,
        "prepared": prepared,
        "zero_wait": zero,
        "zero_wait_share": zero / compactions if compactions else None,
        "ceiling": possible if prepare_threshold != 0 else None,
        "waited_total": waited,
        "summarizer_calls": calls,
        "summarizer_chars": chars,
    }


def simulated_markdown(rows: list[dict[str, Any]], sessions: int, steps: int) -> str:
    out = [
        f"### Simulated: {sessions} agents x {steps} steps, a step every {STEP_SECONDS} s, "
        f"summaries {SUMMARY_SECONDS:.0f} s (what_if; deterministic)",
        "",
        "| window | Config schema | prepare_threshold | auto compactions | prepared | waited 0 s | "
        "could wait 0 s (ceiling) | waited (simulated) | summariser calls | summariser input "
        "chars |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        n = r["compactions"]
        share = f"{r['zero_wait_share']:.0%}" if r["zero_wait_share"] is not None else "-"
        roof = "-" if r["ceiling"] is None else f"{r['ceiling']} ({r['ceiling'] / n:.0%})"
        prepare = "default" if r["prepare_threshold"] is None else r["prepare_threshold"]
        out.append(
            f"| {r['window']:,} | {r['schema']} | {prepare} | {n} | {r['prepared']} | "
            f"{r['zero_wait']} ({share}) "
            f"| {roof if n else '-'} | {r['waited_total']:.1f} s | {r['summarizer_calls']} | "
            f"{r['summarizer_chars']:,} |"
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
        "| window | Config schema | summariser pool | prepare_threshold | auto compactions | "
        "prepared | waited 0 s | could wait 0 s (ceiling) | waited total | per compaction (mean "
        "/ median / max) | step latency median / max | summariser calls | summariser input "
        "chars | refused steps |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        share = f"{r['zero_wait_share']:.0%}" if r["zero_wait_share"] is not None else "-"
        prepare = "default" if r["prepare_threshold"] is None else r["prepare_threshold"]
        n = r["compactions"]
        roof = "-" if r["ceiling"] is None or not n else f"{r['ceiling']} ({r['ceiling'] / n:.0%})"
        out.append(
            f"| {r['window']:,} | {r['schema']} | {r['pool']} | {prepare} | {n} | "
            f"{r['prepared']} | {r['zero_wait']} ({share}) | {roof} | {r['waited_total']:.2f} s | "
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


def _grid(args: argparse.Namespace) -> list[tuple[int, int, float | None]]:
    """(window, schema, prepare_threshold) of every run, in the order of the arguments."""
    grid: list[tuple[int, int, float | None]] = []
    schemas = [int(value) for value in args.schemas.split(",") if value.strip()]
    for window in (int(value) for value in args.windows.split(",") if value.strip()):
        for value in args.thresholds.split(","):
            threshold = None if value.strip() == "default" else float(value)
            for schema in schemas:
                grid.append((window, schema, threshold))
    return grid


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
    parser.add_argument(
        "--schemas",
        default=str(LIVE_CONFIG.schema_version),
        help="Config schemas to run, comma-separated (4: the two marks as first released, "
        "for a before/after in one run)",
    )
    parser.add_argument(
        "--simulate",
        action="store_true",
        help="also the deterministic simulated runs (what_if at simulated time) per window",
    )
    parser.add_argument(
        "--pool",
        type=int,
        default=None,
        help="summariser workers and background compactions of the live host (default: "
        "HostOptions' 4 and 4)",
    )
    parser.add_argument("--skip-live", action="store_true")
    parser.add_argument("--skip-traces", action="store_true")
    args = parser.parse_args(argv)
    sessions, steps = (2, 60) if args.quick else (args.sessions, args.steps)
    if not args.skip_live:
        rows = []
        for window, schema, threshold in _grid(args):
            rows.append(live_run(threshold, sessions, steps, window, schema, args.pool).row())
            print(f"live window={window} prepare={threshold}: {rows[-1]}", file=sys.stderr)
        print(live_markdown(rows, sessions, steps))
        print()
    if args.simulate:
        simulated = []
        for window, schema, threshold in _grid(args):
            simulated.append(simulated_run(window, threshold, sessions, steps, schema))
            print(f"simulated window={window} prepare={threshold}: {simulated[-1]}",
                  file=sys.stderr)  # fmt: skip
        print(simulated_markdown(simulated, sessions, steps))
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
