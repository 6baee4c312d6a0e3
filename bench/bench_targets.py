"""Issue 28's persistence targets, measured paired: each system beside its yardstick, in turns.

``peers.py`` runs one system after the other: the sequential phase of ``lmdb-txn1`` starts
minutes after ctxledger's, and the disk's fsync latency drifts in between (``lmdb-txn1``'s p50
was 232, 259 and 270 µs in three runs of one afternoon), which moves the ratios as much as any
change to the code. Here the systems take turns, so each ratio compares like with like:

1. sequential: ctxledger, ``lmdb-txn1`` (the yardstick: raw LMDB, one durable transaction per
   message) and ``lmdb-layout`` (a floor: ctxledger's two puts a message, nothing else) each
   append the same ``--messages`` messages to a conversation of their own, ``--block`` messages
   at a time, in turns (the order rotates each block); every append is timed. Targets:
   ctxledger's p50 at most 1.3x ``lmdb-txn1``'s, its p99 at most 3x its own p50.
2. concurrent: ``--conversations`` conversations of ``--per-conversation`` messages, one thread
   each, all at once (``peers.run_concurrent``), on JSONL+fsync and on ctxledger, the order
   alternating by round. Target: ctxledger's appends/s at least 1.0x JSONL+fsync's. Each runs on
   a fresh folder (ctxledger: a fresh host). Not on the host of the sequential phase, as
   ``peers.py`` does: that host is still summarising its long conversation in the background
   when the phase starts, which cost ctxledger ~10-20 % in the rounds where it went first.

Each round uses fresh folders; the table gives every round, the medians of the ratios and how
many rounds met each target. Durable settings everywhere (ctxledger: durability "sync").
Usage::

    .venv/bin/python bench/bench_targets.py              # 5 rounds (~3 minutes)
    .venv/bin/python bench/bench_targets.py --rounds 3 --skip concurrent
    .venv/bin/python bench/bench_targets.py --quick      # a smoke run (seconds)
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from peers import Result, _Limits, _percentile, as_dict, make_ctxledger_system, run_concurrent
from peers_systems import JsonlFsync, LmdbLayout, Message, PersistenceSystem, RawLmdb

from ctxledger.tooling.workload import take_messages

#: The sequential phase's systems: ctxledger, its yardstick and the floor of its layout.
SEQUENTIAL: dict[str, Callable[[], PersistenceSystem]] = {
    "ctxledger": make_ctxledger_system,
    "lmdb-txn1": lambda: RawLmdb(batch=1),
    "lmdb-layout": LmdbLayout,
}
#: The concurrent phase's systems: ctxledger and its yardstick.
CONCURRENT: dict[str, Callable[[], PersistenceSystem]] = {
    "jsonl-fsync": JsonlFsync,
    "ctxledger": make_ctxledger_system,
}
#: Seconds a phase may take on one system before it stops (the figures say so).
BUDGET = 600.0
#: Bytes a system may write in one phase.
DISK_BUDGET = 8 << 30


def sequential_round(messages: list[Message], block: int, work: Path) -> dict[str, Any]:
    """One round of the sequential phase: every system of :data:`SEQUENTIAL` in turns of
    ``block`` messages, each in a folder of its own under ``work``; µs per append."""
    systems: dict[str, PersistenceSystem] = {}
    latencies: dict[str, list[float]] = {name: [] for name in SEQUENTIAL}
    try:
        for name, make in SEQUENTIAL.items():
            system = make()
            system.open(work / name)
            systems[name] = system
        names = list(SEQUENTIAL)
        clock = time.perf_counter_ns
        for turn, start in enumerate(range(0, len(messages), block)):
            chunk = messages[start : start + block]
            shift = turn % len(names)
            for name in names[shift:] + names[:shift]:
                system, own = systems[name], latencies[name]
                for message in chunk:
                    before = clock()
                    system.append("seq-0", message)
                    own.append((clock() - before) / 1000)
    finally:
        for system in systems.values():
            system.close()
    row: dict[str, Any] = {}
    for name, own in latencies.items():
        row[name] = {"p50_us": _percentile(own, 0.5), "p99_us": _percentile(own, 0.99)}
    ours, yardstick = row["ctxledger"], row["lmdb-txn1"]
    row["p50_ratio"] = ours["p50_us"] / yardstick["p50_us"]
    row["p99_over_p50"] = ours["p99_us"] / ours["p50_us"]
    row["layout_ratio"] = row["lmdb-layout"]["p50_us"] / yardstick["p50_us"]
    return row


def concurrent_round(conversations: list[list[Message]], first: str, work: Path) -> dict[str, Any]:
    """One round of the concurrent phase, ``first`` of :data:`CONCURRENT` first; appends/s."""
    order = [first] + [name for name in CONCURRENT if name != first]
    row: dict[str, Any] = {}
    for name in order:
        system = CONCURRENT[name]()
        system.open(work / name)
        result = Result(system=name)
        try:
            run_concurrent(system, conversations, _Limits(system, BUDGET, DISK_BUDGET), result)
        finally:
            system.close()
        row[name] = {
            "appends_per_s": result.concurrent_rate,
            "p50_us": result.concurrent_p50_us,
            "p99_us": result.concurrent_p99_us,
            "stopped": result.concurrent_stopped,
        }
    row["ratio"] = row["ctxledger"]["appends_per_s"] / row["jsonl-fsync"]["appends_per_s"]
    return row


def report(sequential: list[dict[str, Any]], concurrent: list[dict[str, Any]]) -> str:
    """The markdown tables of the rounds, their medians and the targets met."""
    lines: list[str] = []
    if sequential:
        lines += [
            "sequential, in turns (µs per append)",
            "| round | ctxledger p50 / p99 | lmdb-txn1 p50 | lmdb-layout p50 | ctxledger p50 "
            "/ lmdb-txn1 (≤ 1.3) | lmdb-layout / lmdb-txn1 | ctxledger p99 / p50 (≤ 3) |",
            "|---|---|---|---|---|---|---|",
        ]
        for index, row in enumerate(sequential, 1):
            ours = row["ctxledger"]
            lines.append(
                f"| {index} | {ours['p50_us']:,.0f} / {ours['p99_us']:,.0f} "
                f"| {row['lmdb-txn1']['p50_us']:,.0f} | {row['lmdb-layout']['p50_us']:,.0f} "
                f"| {row['p50_ratio']:.2f} | {row['layout_ratio']:.2f} "
                f"| {row['p99_over_p50']:.2f} |"
            )
        ratios = [row["p50_ratio"] for row in sequential]
        tails = [row["p99_over_p50"] for row in sequential]
        lines.append(
            f"median p50 ratio {statistics.median(ratios):.2f} (met in "
            f"{sum(r <= 1.3 for r in ratios)} of {len(ratios)} rounds); median p99 / p50 "
            f"{statistics.median(tails):.2f} (met in {sum(t <= 3 for t in tails)} of "
            f"{len(tails)})"
        )
    if concurrent:
        lines += [
            "",
            "concurrent (appends/s)",
            "| round | first | ctxledger | JSONL+fsync | ctxledger / JSONL+fsync (≥ 1.0) |",
            "|---|---|---|---|---|",
        ]
        for index, row in enumerate(concurrent, 1):
            lines.append(
                f"| {index} | {row['first']} | {row['ctxledger']['appends_per_s']:,.0f} "
                f"| {row['jsonl-fsync']['appends_per_s']:,.0f} | {row['ratio']:.2f} |"
            )
        ratios = [row["ratio"] for row in concurrent]
        lines.append(
            f"median ratio {statistics.median(ratios):.2f} (met in "
            f"{sum(r >= 1.0 for r in ratios)} of {len(ratios)} rounds)"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=6000, help="sequential, per system")
    parser.add_argument("--block", type=int, default=100, help="sequential messages a turn")
    parser.add_argument("--conversations", type=int, default=64)
    parser.add_argument("--per-conversation", type=int, default=312)
    parser.add_argument("--skip", default="", help="sequential and/or concurrent")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 small rounds")
    parser.add_argument("--json", type=Path, help="also write the rounds as JSON here")
    options = parser.parse_args(argv)
    if options.quick:
        options.rounds, options.messages, options.block = 2, 200, 50
        options.conversations, options.per_conversation = 8, 20
    for name in ("rounds", "messages", "block", "conversations", "per_conversation"):
        if getattr(options, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    skip = {part.strip() for part in options.skip.split(",") if part.strip()}
    if skip - {"sequential", "concurrent"}:
        parser.error(f"--skip takes sequential and/or concurrent, not {sorted(skip)}")
    messages = [as_dict(m) for m in take_messages(0, options.messages)]
    conversations = [
        [as_dict(m) for m in take_messages(1 + i, options.per_conversation)]
        for i in range(options.conversations)
    ]
    sequential: list[dict[str, Any]] = []
    concurrent: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ctxledger-targets-") as tmp:
        for index in range(options.rounds):
            if "sequential" not in skip:
                work = Path(tmp) / f"sequential-{index}"
                print(f"round {index + 1}: sequential ...", file=sys.stderr, flush=True)
                sequential.append(sequential_round(messages, options.block, work))
                shutil.rmtree(work, ignore_errors=True)
            if "concurrent" not in skip:
                work = Path(tmp) / f"concurrent-{index}"
                first = list(CONCURRENT)[index % len(CONCURRENT)]
                print(f"round {index + 1}: concurrent ...", file=sys.stderr, flush=True)
                row = concurrent_round(conversations, first, work)
                row["first"] = first
                concurrent.append(row)
                shutil.rmtree(work, ignore_errors=True)
    print(report(sequential, concurrent))
    if options.json:
        options.json.write_text(
            json.dumps({"options": vars(options) | {"json": str(options.json)},
                        "sequential": sequential, "concurrent": concurrent}, indent=2)
        )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
