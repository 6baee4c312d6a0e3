"""Host benchmark (issue 4): steps per second and re-open time, with real durability.

1. Steps per second (append the messages of one agent step + ``prepare_step``) for 1, 16 and 128
   concurrent sessions, each driven by its own thread, offline summariser, durability "sync".
   Reports medians of per-step latency, total steps/s and the thread count while running.
2. The time to re-open a host with 1,000 sessions of 200 messages each: ``Host.open`` plus the
   first view of every session (which replays its log, from the newest snapshot).

Usage::

    .venv/bin/python bench/bench_host.py                 # full run
    .venv/bin/python bench/bench_host.py --quick         # a small smoke run
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

from ctxledger import Config, Host
from ctxledger.tooling.workload import iter_agent_steps, take_messages

CONFIG = Config(context_window=32_000)


def quiet_logs() -> None:
    """The application decides about logging: keep the benchmark's output clean."""


def run_steps(sessions: int, steps: int, durability: str) -> dict[str, float]:
    """Drive ``sessions`` threads for ``steps`` steps each; return throughput figures."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        Host.open(
            Path(tmp) / "db",
            config=CONFIG,
            durability=durability,
            max_active_sessions=max(128, sessions),
        ) as host,
    ):
        latencies: list[list[float]] = [[] for _ in range(sessions)]
        threads_seen: list[int] = []
        barrier = threading.Barrier(sessions + 1)

        def drive(index: int) -> None:
            session = host.session(f"agent-{index}")
            work = list(iter_agent_steps(seed=index, steps=steps))
            barrier.wait()
            for step in work:
                started = time.perf_counter()
                session.append_many(step)
                session.prepare_step()
                latencies[index].append(time.perf_counter() - started)

        workers = [threading.Thread(target=drive, args=(n,)) for n in range(sessions)]
        for worker in workers:
            worker.start()
        barrier.wait()
        began = time.perf_counter()
        while any(worker.is_alive() for worker in workers):
            threads_seen.append(threading.active_count())
            time.sleep(0.05)
        elapsed = time.perf_counter() - began
        flat = sorted(lat for per in latencies for lat in per)
        return {
            "sessions": sessions,
            "steps": len(flat),
            "steps_per_s": len(flat) / elapsed,
            "p50_ms": statistics.median(flat) * 1000,
            "p99_ms": flat[int(len(flat) * 0.99) - 1] * 1000,
            "threads": max(threads_seen, default=threading.active_count()) - sessions,
        }


def reopen(sessions: int, messages: int) -> dict[str, float]:
    """Fill a host with ``sessions`` x ``messages``, then time re-opening and recovering all."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "db"
        with Host.open(path, config=CONFIG, durability="none", max_active_sessions=16) as host:
            for index in range(sessions):
                session = host.session(f"s{index}")
                batch = take_messages(seed=index, count=messages)
                session.append_many(batch)
                session.build_model_view()
        began = time.perf_counter()
        with Host.open(path, config=CONFIG, max_active_sessions=64) as host:
            opened = time.perf_counter()
            for index in range(sessions):
                host.session(f"s{index}").build_model_view()
            recovered = time.perf_counter()
            threads = threading.active_count()
        return {
            "sessions": sessions,
            "messages_each": messages,
            "open_s": opened - began,
            "open_and_recover_all_s": recovered - began,
            "per_session_ms": (recovered - opened) / sessions * 1000,
            "threads": threads,
        }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--durability", default="sync", choices=["sync", "group", "none"])
    args = parser.parse_args()
    quiet_logs()
    steps = 20 if args.quick else 120
    print(f"steps per second, durability={args.durability}, {steps} steps per session")
    print(f"{'sessions':>8} {'steps':>7} {'steps/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'threads':>8}")
    for sessions in (1, 16, 128):
        row = run_steps(sessions, steps if sessions < 128 else steps // 2, args.durability)
        print(
            f"{row['sessions']:>8} {row['steps']:>7} {row['steps_per_s']:>9.0f} "
            f"{row['p50_ms']:>8.2f} {row['p99_ms']:>8.2f} {row['threads']:>8}"
        )
    count, size = (100, 50) if args.quick else (1000, 200)
    row = reopen(count, size)
    print(
        f"\nre-open {row['sessions']} sessions x {row['messages_each']} messages: "
        f"Host.open {row['open_s'] * 1000:.1f} ms, open + recover every session "
        f"{row['open_and_recover_all_s']:.2f} s ({row['per_session_ms']:.2f} ms/session, "
        f"{row['threads']} threads)"
    )


if __name__ == "__main__":
    main()
