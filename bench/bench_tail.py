"""What makes the slow steps (issue 28's latency targets): variants side by side, one process.

1. One session, closed loop as ``bench_host.py --sizes 1`` (300 steps back to back, window
   32,000, durability ``sync``): p50 / p99 / max of a step, and the slowest steps with the events
   the log holds between the view they served and the one before (a compaction started in the
   background, a prepared summary activated, a foreground one).
2. The open loop of ``bench_host.py`` (1,024 sessions, one step per second each) with the
   offline extractive summariser (the default), with a summariser that answers at once, and
   with background summaries off, in turn, ``--rounds`` times: p50 / p99 of a step from the
   moment it was due, and CPython's full collections during the run, the generation of its
   workload included (count, longest).

Usage::

    .venv/bin/python bench/bench_tail.py                  # both parts (about 6 minutes)
    .venv/bin/python bench/bench_tail.py --skip open      # the one-session part only
    .venv/bin/python bench/bench_tail.py --open-seconds 10 --rounds 1
"""

from __future__ import annotations

import argparse
import collections
import gc
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_host

from ctxledger import Config, Host, HostOptions, SummaryRequest


def at_once(request: SummaryRequest) -> str:
    """A summariser that costs nothing: what is left is the library's own work."""
    return f"summary of {len(request.messages)} messages"


VARIANTS: dict[str, dict[str, Any]] = {
    "extractive (default)": {"config": bench_host.CONFIG},
    "summariser at once": {"config": bench_host.CONFIG, "summarizer": at_once},
    "background off": {"config": Config(context_window=32_000, prepare_threshold=0)},
}
_CURRENT: dict[str, Any] = {}


@contextmanager
def _host(durability: str, sessions: int, config: Config | None = None) -> Iterator[Host]:
    extra = {"summarizer": _CURRENT["summarizer"]} if "summarizer" in _CURRENT else {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        Host.open(
            Path(tmp) / "db",
            config=config or _CURRENT["config"],
            options=HostOptions(
                durability=durability,  # type: ignore[arg-type]
                max_active_sessions=max(1024, sessions),
            ),
            **extra,
        ) as host,
    ):
        yield host


class _FullCollections:
    """Times CPython's generation-2 collections while it is entered."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append(time.perf_counter() - self._started)

    def __enter__(self) -> _FullCollections:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


def one_session(steps: int, top: int) -> None:
    """Part 1: one session back to back; the slowest steps and what the log says of them."""
    _CURRENT.clear()
    _CURRENT.update(VARIANTS["extractive (default)"])
    work = bench_host.workloads(1, steps, 2)[0]
    with _host("sync", 1) as host:
        session = host.session("one")
        for step in work[:2]:
            session.step(step)
        latencies = []
        for step in work[2:]:
            started = time.perf_counter()
            session.step(step)
            latencies.append(time.perf_counter() - started)
        events = [record.event for record in host.log.read("one")]
    between: list[list[str]] = [[]]
    for event in events:
        name = type(event).__name__
        if name == "ViewServed":
            between.append([])
        elif name not in ("MessageAppended", "SessionOpened"):
            if getattr(event, "background", False):
                name += " (background)"
            if getattr(event, "prepared", False):
                name += " (prepared)"
            between[-1].append(name)
    between = between[2:]  # what the two warm-up steps wrote
    ordered = sorted(latencies)
    print(
        f"one session, {len(latencies)} steps: p50 {bench_host.percentile(ordered, 0.5) * 1e3:.2f}"
        f" ms, p99 {bench_host.percentile(ordered, 0.99) * 1e3:.2f} ms, max"
        f" {ordered[-1] * 1e3:.1f} ms; slowest:",
        flush=True,
    )
    for index in sorted(range(len(latencies)), key=lambda n: -latencies[n])[:top]:
        told = dict(collections.Counter(between[index])) if index < len(between) else {}
        print(f"  step {index:3d} {latencies[index] * 1e3:7.2f} ms  {told or 'nothing else'}")


def open_variants(seconds: float, rounds: int) -> None:
    """Part 2: the open loop under each variant in turn."""
    rows: dict[str, list[tuple[float, float, int, float]]] = {name: [] for name in VARIANTS}
    for round_ in range(rounds):
        for name, variant in VARIANTS.items():
            _CURRENT.clear()
            _CURRENT.update(variant)
            gc.collect()
            with _FullCollections() as collections_:
                row = bench_host.open_loop(1024, seconds, "sync")
            longest = max(collections_.pauses, default=0.0)
            rows[name].append((row["p50_ms"], row["p99_ms"], len(collections_.pauses), longest))
            print(
                f"open loop, {name:20s} round {round_}: p50 {row['p50_ms']:.2f} ms, p99"
                f" {row['p99_ms']:.2f} ms; full collections {len(collections_.pauses)},"
                f" longest {longest * 1e3:.0f} ms",
                flush=True,
            )
    print("\n| variant | p50 ms | p99 ms | full collections (longest ms) |\n|---|---:|---:|---|")
    for name, got in rows.items():
        print(
            f"| {name} | {', '.join(f'{r[0]:.2f}' for r in got)} | "
            f"{', '.join(f'{r[1]:.1f}' for r in got)} | "
            f"{', '.join(f'{r[2]} ({r[3] * 1e3:.0f})' for r in got)} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=300, help="one-session steps")
    parser.add_argument("--top", type=int, default=8, help="slowest steps listed")
    parser.add_argument("--open-seconds", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--skip", default="", help="parts to skip, comma-separated: one,open")
    args = parser.parse_args()
    bench_host.new_host = _host  # type: ignore[assignment]
    skip = set(args.skip.split(","))
    if "one" not in skip:
        one_session(args.steps, args.top)
    if "open" not in skip:
        open_variants(args.open_seconds, args.rounds)


if __name__ == "__main__":
    main()
