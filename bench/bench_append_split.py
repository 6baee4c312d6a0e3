"""Where a sequential append's time goes: the storage's share and the runtime's (issue 28).

One conversation of the realistic message mix (``ctxledger.tooling.workload``, as ``peers.py``
appends it), appended one message at a time, durability "sync", through four paths that take
turns in each round (each in a fresh folder):

1. ``raw``: raw ``lmdb``, one write transaction per message (``peers.py``'s ``lmdb-txn1``);
2. ``log.append``: ``LmdbEventLog.append`` of the ``MessageAppended`` event, the caller blocked
   until its group commit is durable (one hand-off to the journal thread and back);
3. ``log.submit``: ``LmdbEventLog.submit`` with a callback that wakes the caller: the path a
   history actor uses (the callback runs on the journal thread);
4. ``Session.append``: the host, with its actors (what ``peers.py`` measures as ``ctxledger``).

For each: the latency p50 and p99 (wall clock, which a loaded machine's fsync dominates), and
what does not depend on the machine's load: CPU time per append (all threads of the process),
voluntary context switches per append (thread hand-offs and fsync waits) and KB written per
append (pages per commit). With ``--tmpfs`` the same paths run once more on ``/dev/shm``, where
fsync costs nothing: the remaining time is CPU and hand-offs. ``Session.append`` minus
``log.submit`` is the runtime's share; ``log.submit`` minus ``raw`` the storage's.

Usage::

    .venv/bin/python bench/bench_append_split.py                 # 2,000 messages, 5 rounds
    .venv/bin/python bench/bench_append_split.py --tmpfs --rounds 3
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from peers import as_dict, from_dict
from peers_systems import RawLmdb

from ctxledger import Host, HostOptions
from ctxledger.config import Config
from ctxledger.events import MessageAppended, SessionOpened
from ctxledger.messages import Message
from ctxledger.storage import LmdbEventLog, RecordedEvent
from ctxledger.tooling.workload import take_messages

#: One run's figures: p50 µs, p99 µs, CPU µs per append, voluntary switches per append, KB per
#: append.
Figures = tuple[float, float, float, float, float]


def written() -> int:
    """Bytes this process has caused to be written to storage (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/io") as stats:
            return int(dict(line.split(": ") for line in stats.read().splitlines())["write_bytes"])
    except OSError:
        return 0


def measure(append: Callable[[int], None], count: int) -> Figures:
    """Call ``append(0) ... append(count - 1)``, timing each; the run's figures."""
    latencies: list[float] = []
    clock = time.perf_counter_ns
    before, bytes_before = resource.getrusage(resource.RUSAGE_SELF), written()
    for index in range(count):
        started = clock()
        append(index)
        latencies.append((clock() - started) / 1000)
    after, bytes_after = resource.getrusage(resource.RUSAGE_SELF), written()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    latencies.sort()
    return (
        latencies[len(latencies) // 2],
        latencies[min(len(latencies) - 1, len(latencies) * 99 // 100)],
        cpu / count * 1e6,
        (after.ru_nvcsw - before.ru_nvcsw) / count,
        (bytes_after - bytes_before) / count / 1024,
    )


def run_raw(folder: Path, messages: list[Message]) -> Figures:
    """Raw lmdb, one transaction per message."""
    system = RawLmdb(batch=1)
    system.open(folder)
    dicts = [as_dict(message) for message in messages]
    try:
        return measure(lambda index: system.append("seq-0", dicts[index]), len(dicts))
    finally:
        system.close()


def _opened_log(folder: Path) -> LmdbEventLog:
    log = LmdbEventLog.open(folder, durability="sync")
    log.append("seq-0", [SessionOpened(session_id="seq-0", config=Config())], expected_seq=0)
    return log


def run_log_append(folder: Path, messages: list[Message]) -> Figures:
    """``LmdbEventLog.append``, blocking until durable."""
    log = _opened_log(folder)
    events = [MessageAppended(message=m.with_seq(i + 1)) for i, m in enumerate(messages)]
    try:
        return measure(
            lambda index: log.append("seq-0", [events[index]], expected_seq=index + 1),
            len(events),
        )
    finally:
        log.close()


def run_log_submit(folder: Path, messages: list[Message]) -> Figures:
    """``LmdbEventLog.submit``; the callback (on the journal thread) wakes the caller."""
    log = _opened_log(folder)
    events = [MessageAppended(message=m.with_seq(i + 1)) for i, m in enumerate(messages)]

    def append(index: int) -> None:
        done = threading.Event()
        failed: list[BaseException] = []

        def answered(records: list[RecordedEvent] | None, error: BaseException | None) -> None:
            if error is not None:
                failed.append(error)
            done.set()

        log.submit("seq-0", [events[index]], expected_seq=index + 1, callback=answered)
        done.wait()
        if failed:
            raise failed[0]

    try:
        return measure(append, len(events))
    finally:
        log.close()


def run_session(folder: Path, messages: list[Message]) -> Figures:
    """``Session.append`` on a host."""
    host = Host.open(folder, options=HostOptions(durability="sync"))
    session = host.session("seq-0")
    try:
        return measure(lambda index: session.append(messages[index]), len(messages))
    finally:
        host.close()


PATHS: dict[str, Callable[[Path, list[Message]], Figures]] = {
    "raw": run_raw,
    "log.append": run_log_append,
    "log.submit": run_log_submit,
    "Session.append": run_session,
}


def run_rounds(base: Path, messages: list[Message], rounds: int) -> dict[str, list[Figures]]:
    """Each path once per round, in turn, each in a fresh folder under ``base``."""
    results: dict[str, list[Figures]] = {name: [] for name in PATHS}
    for _ in range(rounds):
        for name, run in PATHS.items():
            folder = Path(tempfile.mkdtemp(prefix="split-", dir=base))
            try:
                results[name].append(run(folder / "log", messages))
            finally:
                shutil.rmtree(folder, ignore_errors=True)
    return results


def report(title: str, results: dict[str, list[Figures]]) -> str:
    """A markdown table of medians over the rounds, with ratios to raw lmdb's p50."""
    medians = {
        name: tuple(statistics.median(run[i] for run in runs) for i in range(5))
        for name, runs in results.items()
    }
    raw_p50 = medians["raw"][0]
    lines = [
        f"\n{title}\n",
        "| path | p50 µs | vs raw | p99 µs | p99 / p50 | CPU µs | switches | KB written |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, (p50, p99, cpu, switches, kb) in medians.items():
        lines.append(
            f"| {name} | {p50:,.0f} | {p50 / raw_p50:.2f} | {p99:,.0f} | {p99 / p50:.1f} | "
            f"{cpu:,.0f} | {switches:.1f} | {kb:.1f} |"
        )
    storage = medians["log.submit"][0] - medians["raw"][0]
    runtime = medians["Session.append"][0] - medians["log.submit"][0]
    lines.append(
        f"\np50: storage adds {storage:,.0f} µs over raw lmdb (log.submit - raw), the runtime "
        f"{runtime:,.0f} µs over the storage (Session.append - log.submit); CPU per append: "
        f"storage {medians['log.submit'][2] - medians['raw'][2]:,.0f} µs, runtime "
        f"{medians['Session.append'][2] - medians['log.submit'][2]:,.0f} µs."
    )
    return "\n".join(lines)


def main() -> None:
    """Run the rounds (on disk, and on tmpfs if asked) and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--tmpfs", action="store_true", help="also run on /dev/shm (no fsync)")
    args = parser.parse_args()
    messages = [from_dict(as_dict(m)) for m in take_messages(0, args.messages)]
    print(
        f"load average {os.getloadavg()[0]:.1f} (1 min) on {os.cpu_count()} CPUs; "
        f"{args.messages:,} messages, {args.rounds} rounds, medians"
    )
    print(report(f"On disk ({args.dir})", run_rounds(args.dir, messages, args.rounds)))
    if args.tmpfs and Path("/dev/shm").is_dir():
        shm = run_rounds(Path("/dev/shm"), messages, args.rounds)
        print(report("On tmpfs (/dev/shm: fsync costs nothing)", shm))


if __name__ == "__main__":
    main()
