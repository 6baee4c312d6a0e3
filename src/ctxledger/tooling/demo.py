"""``ctxledger demo``: many agents, compaction, a crash, exact recovery, and a picture of it.

The run, in four acts:

1. A child process (:mod:`ctxledger.tooling.demo_worker`) opens a host on a local folder and
   drives 16+
   agent sessions from threads, each from the built-in deterministic workload (and, with
   ``--traces``, one per real trace file). A small window makes compaction visible; one agent
   asks for a manual compaction and another's simulated provider rejects a prompt as too long.
2. Midway the parent SIGKILLs the child, then re-opens the folder (recovery by replay) and
   checks that every message the child acknowledged is there, unaltered.
3. :func:`ctxledger.replay.verify` re-derives every served view and checkpoint from the log.
4. A fresh child finishes the run; the log is verified again, a summary table is printed and a
   token plot is written.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ctxledger.actors.host import Host, HostOptions
from ctxledger.config import Config
from ctxledger.domain import CharTokenizer
from ctxledger.replay import verify
from ctxledger.storage import LmdbEventLog
from ctxledger.tooling._demo_result import (
    DemoResult,
    count,
    plot,
    report_agent,
    session_table,
    summary,
    verify_line,
)
from ctxledger.tooling.demo_worker import AgentPlan, Plan, agent_steps, strip_seq
from ctxledger.tooling.report import write_report
from ctxledger.tooling.timeline import session_timeline, split_steps
from ctxledger.tooling.traces import read_trace

__all__ = [
    "DEFAULT_STEPS",
    "DEMO_CONFIG",
    "FAST_CONFIG",
    "FAST_STEPS",
    "DemoFailed",
    "DemoOptions",
    "DemoResult",
    "run_demo",
]

#: The demo's Config: a 24k window, so compaction shows within a few dozen steps.
DEMO_CONFIG = Config(context_window=24_000, compression_threshold=0.8, min_retain_rounds=2)
#: ``--fast``: a 12k window, so the short run still compacts.
FAST_CONFIG = DEMO_CONFIG.replace(context_window=12_000)
#: Steps (model calls) per synthetic agent by default, and with ``--fast``.
DEFAULT_STEPS = 160
FAST_STEPS = 24
_WORKER = (sys.executable, "-m", "ctxledger.tooling.demo_worker")


class DemoFailed(RuntimeError):
    """Raised when the demo cannot run (for example the host process failed on its own)."""


@dataclass(frozen=True)
class DemoOptions:
    """What ``ctxledger demo`` was asked for.

    Attributes:
        directory: The demo's folder (its ``log/`` holds the LMDB event log).
        sessions: Synthetic agents (at least 1).
        steps: Steps per synthetic agent (default: 160, or 24 with ``fast``).
        traces: A folder of ``*.jsonl`` traces; one more agent replays each.
        fast: A short run for tests.
        seed: Seeds the synthetic workload.
    """

    directory: Path = Path("ctxledger-demo")
    sessions: int = 16
    steps: int | None = None
    traces: Path | None = None
    fast: bool = False
    seed: int = 0


def run_demo(
    options: DemoOptions, *, out: TextIO | None = None, err: TextIO | None = None
) -> DemoResult:
    """Run the demo; print the narrative and the summary to ``out``, progress to ``err``.

    Raises:
        DemoFailed: The host process failed by itself, or the options make no run.
        TraceFormatError: A trace file under ``options.traces`` is malformed.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    started = time.perf_counter()
    plan, paths = _prepare(options)
    result = DemoResult(planned_steps=sum(agent.steps for agent in plan.agents))
    workload = sum(1 for agent in plan.agents if agent.trace is None)
    print(
        f"ctxledger demo: {len(plan.agents)} agents on one host ({workload} synthetic, "
        f"{len(plan.agents) - workload} from traces), {result.planned_steps:,} model calls, "
        f"window {plan.config.context_window:,} tokens, offline summariser",
        file=out,
    )
    print(f"event log: {paths.log}", file=out, flush=True)
    acked: dict[str, tuple[int, str]] = {}
    progress = _Progress(err, result.planned_steps)

    kill_after = max(1, result.planned_steps // 2)
    steps, killed = _run_worker(
        paths, acked, progress, "running agents", kill_after, waited=result.waited
    )
    result.steps_before_kill = steps
    if not killed:
        raise DemoFailed("the run finished before the planned crash; use more --steps")
    print(
        f"[1/4] SIGKILLed the host process after {steps:,} of {result.planned_steps:,} "
        "acknowledged steps",
        file=out,
        flush=True,
    )

    _recover(plan, acked, result)
    print(
        f"[2/4] reopened the log: {result.recovered_sessions}/{len(plan.agents)} sessions "
        "recovered "
        f"in {result.recovery_seconds:.2f} s ({result.recovered_events:,} events replayed); "
        f"{count(result.lost_messages, 'acknowledged message')} lost; "
        f"{count(result.interrupted, 'interrupted tool call')} answered",
        file=out,
        flush=True,
    )

    result.verify_after_crash = verify(paths.log)
    print(
        f"[3/4] verify after the crash: {verify_line(result.verify_after_crash)}",
        file=out,
        flush=True,
    )

    _, _ = _run_worker(paths, acked, progress, "finishing", None, done=steps, waited=result.waited)
    result.verify_at_end = verify(paths.log)
    print(
        "[4/4] a fresh host process finished the run; verify: " + verify_line(result.verify_at_end),
        file=out,
        flush=True,
    )

    with LmdbEventLog.open(paths.log, readonly=True) as log:
        tokenizer = CharTokenizer()
        result.timelines = [
            session_timeline(log, a.session_id, tokenizer=tokenizer) for a in plan.agents
        ]
    result.plot = plot(result.timelines, plan.agents, paths.plot, err)
    result.report_session = report_agent(result.timelines)
    if result.report_session:
        with LmdbEventLog.open(paths.log, readonly=True) as log:
            result.report = write_report(log, result.report_session, paths.report).path
    result.seconds = time.perf_counter() - started
    print(file=out)
    print(session_table(result.timelines, plan.agents, result.waited), file=out)
    print(file=out)
    print(summary(result, plan), file=out, flush=True)
    return result


# --- preparation ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Paths:
    root: Path
    log: Path
    plan: Path
    worker_log: Path
    plot: Path
    report: Path


def _prepare(options: DemoOptions) -> tuple[Plan, _Paths]:
    if options.sessions < 1:
        raise DemoFailed("--sessions must be at least 1")
    steps = (
        options.steps
        if options.steps is not None
        else FAST_STEPS
        if options.fast
        else DEFAULT_STEPS
    )
    if steps < 4:
        raise DemoFailed("--steps must be at least 4")
    root = options.directory
    paths = _Paths(
        root,
        root / "log",
        root / "plan.json",
        root / "worker.log",
        root / "tokens.png",
        root / "report.html",
    )
    root.mkdir(parents=True, exist_ok=True)
    # The demo owns these names inside its folder and starts afresh; nothing else is touched.
    shutil.rmtree(paths.log, ignore_errors=True)
    for stale in (paths.plan, paths.worker_log, paths.plot, paths.report):
        stale.unlink(missing_ok=True)
    agents = [
        AgentPlan(
            session_id=f"agent-{index:02d}",
            steps=steps,
            seed=options.seed * 1000 + index,
            # One agent asks for a manual compaction, another hits a "prompt too long": both
            # early enough to happen before the crash.
            manual_at=steps // 4 if index == 1 % options.sessions else None,
            reactive_at=steps // 3 if index == 2 % options.sessions else None,
        )
        for index in range(options.sessions)
    ]
    agents += _trace_agents(options.traces)
    config = FAST_CONFIG if options.fast else DEMO_CONFIG
    plan = Plan(db=str(paths.log), config=config, agents=tuple(agents))
    plan.save(paths.plan)
    return plan, paths


def _trace_agents(folder: Path | None) -> list[AgentPlan]:
    if folder is None:
        return []
    if not folder.is_dir():
        raise DemoFailed(f"--traces: '{folder}' is not a folder")
    files = sorted(folder.glob("*.jsonl"))
    if not files:
        raise DemoFailed(f"--traces: no *.jsonl trace files in '{folder}'")
    return [
        AgentPlan(
            session_id=f"trace-{path.stem}",
            steps=sum(1 for _ in split_steps(read_trace(path))),
            trace=str(path.resolve()),
        )
        for path in files
    ]


# --- the host process -----------------------------------------------------------------------------


def _run_worker(
    paths: _Paths,
    acked: dict[str, tuple[int, str]],
    progress: _Progress,
    label: str,
    kill_after: int | None,
    *,
    done: int = 0,
    waited: dict[str, float] | None = None,
) -> tuple[int, bool]:
    """Run a worker until it ends, or SIGKILL it once ``kill_after`` steps were acknowledged.

    Each acknowledged step's wait on summaries is added to ``waited[session]``.
    """
    with paths.worker_log.open("a") as worker_log:
        process = subprocess.Popen(
            [*_WORKER, str(paths.plan)],
            stdout=subprocess.PIPE,
            stderr=worker_log,
            text=True,
            bufsize=1,
        )
    assert process.stdout is not None
    killed = False
    try:
        for line in process.stdout:
            parts = line.split()
            if not parts or parts[0] != "ack":
                continue
            _, session_id, _step, seq, view_hash, step_waited = parts
            acked[session_id] = (int(seq), view_hash)
            if waited is not None:
                waited[session_id] = waited.get(session_id, 0.0) + float(step_waited)
            done += 1
            progress.update(label, done)
            if kill_after is not None and done >= kill_after:
                os.kill(process.pid, signal.SIGKILL)
                killed = True
                break
    finally:
        process.stdout.close()
        status = process.wait()
        progress.clear()
    if not killed and status != 0:
        raise DemoFailed(f"the host process failed (exit status {status}); see {paths.worker_log}")
    return done, killed


def _recover(plan: Plan, acked: dict[str, tuple[int, str]], result: DemoResult) -> None:
    """Re-open the log after the kill and check every acknowledged message is there."""
    started = time.perf_counter()
    options = HostOptions(max_active_sessions=len(plan.agents))
    with Host.open(plan.db, config=plan.config, options=options) as host:
        histories = {a.session_id: host.session(a.session_id).history() for a in plan.agents}
        result.recovery_seconds = time.perf_counter() - started
        result.recovered_events = sum(host.log.last_seq(sid) for sid in histories)
    for agent in plan.agents:
        history = histories[agent.session_id]
        seq, _ = acked.get(agent.session_id, (0, ""))
        planned = [strip_seq(m) for step in agent_steps(agent) for m in step][:seq]
        kept = [strip_seq(m) for m in history[:seq]]
        result.lost_messages += sum(1 for a, b in zip(planned, kept, strict=False) if a != b)
        result.lost_messages += max(0, seq - len(history))
        result.interrupted += sum(1 for m in history if m.metadata.get("synthetic"))
        result.recovered_sessions += int(len(history) >= seq)


# --- output ---------------------------------------------------------------------------------------


class _Progress:
    """One live line on a terminal; a line per quarter otherwise."""

    def __init__(self, stream: TextIO, total: int) -> None:
        self.stream = stream
        self.total = max(1, total)
        self.live = stream.isatty()
        self._shown = 0.0
        self._quarter = -1

    def update(self, label: str, done: int) -> None:
        share = done / self.total
        if self.live:
            now = time.monotonic()
            if now - self._shown < 0.1 and done < self.total:
                return
            self._shown = now
            bar = "#" * int(share * 30)
            self.stream.write(f"\r  {label:<16} [{bar:<30}] {done:,}/{self.total:,} steps ")
            self.stream.flush()
        elif int(share * 4) > self._quarter:
            self._quarter = int(share * 4)
            print(f"  {label}: {done:,}/{self.total:,} steps", file=self.stream, flush=True)

    def clear(self) -> None:
        if self.live:
            self.stream.write("\r" + " " * 72 + "\r")
            self.stream.flush()
