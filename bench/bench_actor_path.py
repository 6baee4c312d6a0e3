"""The actor path's own cost (issue 28): CPU per append and per step, and two checkouts compared.

One run measures this checkout with ``durability="none"`` (no fsync, so the actors' share is what
varies): 3,000 sequential ``append`` calls of one session with background compaction off and
with it on (the default; every append then publishes its batch to the budget actor), the CPU
per step of :func:`bench_host.cpu_per_step` (50 sessions, their first 20 steps) and the closed
loop of 16 sessions (:func:`bench_host.closed_threads`). CPU is ``time.process_time`` (every
thread), the steadiest figure on a loaded machine.

``--pair OTHER_SRC`` runs the same measures alternately against another checkout's ``src``
(``PYTHONPATH``) and this one, ``--rounds`` times, and prints the medians of each side and the
median of the per-pair ratios (this / other). ``--mailbox`` compares, in one process, pykka's
public path (``on_receive``, its ``queue.Queue`` inbox) with the private fast path the history
actor used before issue 28 (a ``queue.SimpleQueue`` inbox and its own dispatch ahead of pykka's
``_handle_receive``): CPU per message for 20,000 tells, 15 alternating trials.

Usage::

    .venv/bin/python bench/bench_actor_path.py
    .venv/bin/python bench/bench_actor_path.py --pair /tmp/before/src --rounds 6
    .venv/bin/python bench/bench_actor_path.py --mailbox
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pykka

HERE = Path(__file__).resolve().parent


def appends(count: int, prepare: float | None) -> dict[str, float]:
    """CPU and latency per sequential append of one session (background off when 0.0)."""
    from ctxledger import Config, Host, HostOptions, Message

    config = Config(context_window=10_000_000, prepare_threshold=prepare)
    tag = "append_bg" if prepare is None else "append"
    with tempfile.TemporaryDirectory() as folder:
        options = HostOptions(durability="none")
        with Host.open(Path(folder) / "db", options=options, config=config) as host:
            session = host.session("a")
            session.append(Message.user("warm"))
            latencies = []
            cpu = time.process_time()
            for n in range(count):
                started = time.perf_counter()
                session.append(Message.user(f"m{n}"))
                latencies.append(time.perf_counter() - started)
            cpu = time.process_time() - cpu
    latencies.sort()
    return {f"{tag}_cpu_us": cpu / count * 1e6, f"{tag}_p50_us": latencies[count // 2] * 1e6}


def one_run() -> dict[str, float]:
    """Every figure of this checkout (or of the one on ``PYTHONPATH``), once."""
    sys.path.insert(0, str(HERE))
    import bench_host

    figures = {**appends(3000, 0.0), **appends(3000, None)}
    cpu = bench_host.cpu_per_step("none", 50, 20)
    figures["step_cpu_us"] = cpu["cpu_us_per_step"]
    closed = bench_host.closed_threads(16, 40, "none")
    figures["closed16_steps_per_s"] = closed["steps_per_s"]
    return figures


def pair(other_src: str, rounds: int) -> None:
    """Alternate the other checkout and this one; print medians and per-pair ratios."""
    sides = {"other": other_src, "this": str(HERE.parent / "src")}
    rows: dict[str, list[dict[str, float]]] = {"other": [], "this": []}
    for _ in range(rounds):
        for side, src in sides.items():
            env = {**os.environ, "PYTHONPATH": src}
            out = subprocess.run(
                [sys.executable, __file__, "--json"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
                cwd=tempfile.gettempdir(),
            )
            rows[side].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(side, rows[side][-1], flush=True)
    for key in rows["this"][0]:
        other = [row[key] for row in rows["other"]]
        this = [row[key] for row in rows["this"]]
        ratios = [b / a for a, b in zip(other, this, strict=True)]
        print(
            f"{key:22} other {statistics.median(other):10.1f}  this {statistics.median(this):10.1f}"
            f"  this/other per pair: median {statistics.median(ratios):.2f}"
            f" ({min(ratios):.2f}-{max(ratios):.2f}, {len(ratios)} pairs)"
        )


class _Public(pykka.ThreadingActor):
    use_daemon_thread = True

    def __init__(self, done: threading.Lock, count: int) -> None:
        super().__init__()
        self.done, self.count, self.seen = done, count, 0

    def on_receive(self, message: Any) -> None:
        self.seen += 1
        if self.seen == self.count:
            self.done.release()


class _Private(_Public):
    @staticmethod
    def _create_actor_inbox() -> Any:
        return queue.SimpleQueue()

    def _handle_receive(self, message: Any) -> Any:
        if type(message) is _Message:
            return self.on_receive(message)
        return super()._handle_receive(message)


class _Message:
    __slots__ = ()


def mailbox(trials: int = 15, count: int = 20_000) -> None:
    """CPU per message, public path against the private one, alternating trials."""
    cpu: dict[str, list[float]] = {"private": [], "public": []}
    for _ in range(trials):
        for name, cls in (("private", _Private), ("public", _Public)):
            done = threading.Lock()
            done.acquire()
            ref = cls.start(done, count)
            message = _Message()
            started = time.process_time()
            for _ in range(count):
                ref.tell(message)
            done.acquire()
            cpu[name].append((time.process_time() - started) / count * 1e6)
            ref.stop()
    ratios = [b / a for a, b in zip(cpu["private"], cpu["public"], strict=True)]
    print(
        f"CPU per message: private {statistics.median(cpu['private']):.2f} us, public "
        f"{statistics.median(cpu['public']):.2f} us; public/private per trial: median "
        f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}, {trials} trials)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pair", metavar="OTHER_SRC", help="compare with another checkout's src")
    parser.add_argument("--rounds", type=int, default=6, help="pairs of runs with --pair")
    parser.add_argument("--mailbox", action="store_true", help="pykka's public path vs private")
    parser.add_argument("--json", action="store_true", help="one run, its figures as JSON")
    args = parser.parse_args()
    if args.mailbox:
        mailbox()
    elif args.pair:
        pair(args.pair, args.rounds)
    elif args.json:
        print(json.dumps(one_run()))
    else:
        for key, value in one_run().items():
            print(f"{key:22} {value:10.1f}")


if __name__ == "__main__":
    main()
