"""Event-log benchmark (issue 2): durable appends/s through LmdbEventLog against raw LMDB.

All runs use ``sync=True`` (an append is on disk when it returns) and the same realistic message
mix (``ctxledger.workload``: sizes from ~200 B to 40 KB), in one process, one after the other:

1. raw ``lmdb``, one transaction per event (the ceiling without group commit);
2. raw ``lmdb``, 64 events per transaction (the ceiling of batching), writing records encoded
   before the clock starts; and once more encoding each record inside the timed loop (the same
   work as the log minus its threads: context, not a target);
3. ``LmdbEventLog`` with 1, 8 and 64 writer threads, each appending one event at a time to its
   own session (group commit turns concurrent appends into shared transactions), and 64 writers
   appending 4 events per call (about one agent step: assistant message, tool result, usage,
   served view).

The raw runs write exactly what the log writes: the same encoded records (framed, compressed
above the threshold) under the same keys, into the ``events`` and ``global`` sub-databases. The
log pays for encoding inside its measured time. Each figure is the median of ``--repeat`` runs,
each in a fresh directory; the configurations take turns within each repeat, so that drift in
the machine's load hits all of them alike.

Targets: with 64 writers, at least 50 % of raw 64-per-transaction throughput, and at least 10x
raw one-transaction-per-event.

Usage::

    .venv/bin/python bench/bench_log.py                # full run
    .venv/bin/python bench/bench_log.py --quick        # a small smoke run
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import lmdb
import structlog

from ctxledger.events.codec import Codec, encode_payload
from ctxledger.events.types import Event, MessageAppended
from ctxledger.storage import LmdbEventLog
from ctxledger.storage._layout import pack_pair, pack_stamp, pack_u64
from ctxledger.workload import take_messages

MAP_SIZE = 1 << 30


def workload(count: int) -> list[Event]:
    """``count`` MessageAppended events drawn from several seeded agent conversations."""
    events: list[Event] = []
    seed = 0
    while len(events) < count:
        for seq, message in enumerate(take_messages(seed, 400), start=1):
            events.append(MessageAppended(message=message.with_seq(seq)))
        seed += 1
    return events[:count]


def raw_lmdb(
    path: Path, records: list[bytes], per_txn: int, encode: Callable[[int], bytes] | None = None
) -> float:
    """Write ``records`` with raw lmdb, ``per_txn`` per transaction; return events/s.

    With ``encode``, each record is produced by ``encode(index)`` inside the timed loop instead.
    """
    env = lmdb.open(str(path), map_size=MAP_SIZE, max_dbs=8, sync=True, metasync=True)
    events, positions = env.open_db(b"events"), env.open_db(b"global")
    start = time.perf_counter()
    for first in range(0, len(records), per_txn):
        with env.begin(write=True) as txn:
            for position in range(first + 1, min(first + per_txn, len(records)) + 1):
                record = records[position - 1] if encode is None else encode(position - 1)
                key = pack_pair(1, position)
                txn.put(key, pack_stamp(position, 0.0) + record, db=events)
                txn.put(pack_u64(position), key, db=positions)
    elapsed = time.perf_counter() - start
    env.close()
    return len(records) / elapsed


def through_log(
    path: Path, events: list[Event], writers: int, batch: int = 1
) -> tuple[float, float]:
    """Append ``events`` from ``writers`` threads, ``batch`` per append.

    Returns:
        Events per second, and the median latency of one append in milliseconds.
    """
    log = LmdbEventLog.open(path, durability="sync", map_size=MAP_SIZE)
    shares = [events[index::writers] for index in range(writers)]
    latencies: list[list[float]] = [[] for _ in range(writers)]
    barrier = threading.Barrier(writers + 1)

    def writer(index: int) -> None:
        session_id, mine, spent = f"writer-{index}", shares[index], latencies[index]
        barrier.wait()
        for seq in range(0, len(mine), batch):
            began = time.perf_counter()
            log.append(session_id, mine[seq : seq + batch], expected_seq=seq)
            spent.append(time.perf_counter() - began)

    threads = [threading.Thread(target=writer, args=(index,)) for index in range(writers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    log.close()
    all_latencies = [value for values in latencies for value in values]
    return len(events) / elapsed, statistics.median(all_latencies) * 1000


def main() -> None:
    """Run every configuration and print the table and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=12_000, help="events per batched run")
    parser.add_argument("--single", type=int, default=1_500, help="events per one-by-one run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small counts, one repeat")
    args = parser.parse_args()
    if args.quick:
        args.events, args.single, args.repeat = 2_000, 300, 1
    # The application decides about logging: keep the benchmark's output clean.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

    events = workload(args.events)
    codec = Codec()
    payloads = [encode_payload(event) for event in events]
    records = [codec.frame(payload) for payload in payloads]

    def encode(index: int) -> bytes:
        return codec.frame(encode_payload(events[index]))

    raw_bytes, stored = sum(map(len, payloads)), sum(map(len, records))
    sizes = sorted(map(len, payloads))
    print(f"load average {os.getloadavg()[0]:.1f} (1 min) on {os.cpu_count()} CPUs")
    print(
        f"workload: {len(events):,} messages, payload p50 {sizes[len(sizes) // 2]:,} B, "
        f"p90 {sizes[len(sizes) * 9 // 10]:,} B, max {sizes[-1]:,} B; "
        f"{raw_bytes / 1e6:.1f} MB msgpack -> {stored / 1e6:.1f} MB stored "
        f"(ratio {raw_bytes / stored:.2f})"
    )
    # Configurations take turns within each repeat, so that a change in the machine's load
    # (fsync latency above all) hits all of them alike; each run gets a fresh directory.
    runs: dict[str, Callable[[Path], tuple[float, float]]] = {
        "raw lmdb, 1 event per txn": lambda p: (raw_lmdb(p, records[: args.single], 1), 0.0),
        "raw lmdb, 64 events per txn": lambda p: (raw_lmdb(p, records, 64), 0.0),
        "raw lmdb, 64/txn, encoding": lambda p: (raw_lmdb(p, records, 64, encode), 0.0),
        "LmdbEventLog, 1 writer": lambda p: through_log(p, events[: args.single], 1),
        "LmdbEventLog, 8 writers": lambda p: through_log(p, events[: args.events // 3], 8),
        "LmdbEventLog, 64 writers": lambda p: through_log(p, events, 64),
        "LmdbEventLog, 64 writers x4": lambda p: through_log(p, events, 64, batch=4),
    }
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for _ in range(args.repeat):
        for name, run in runs.items():
            with tempfile.TemporaryDirectory(prefix="bench_log_") as tmp:
                results[name].append(run(Path(tmp) / "log"))
    rates = {name: statistics.median(r for r, _ in values) for name, values in results.items()}
    rows = [
        (
            name,
            rates[name],
            f"p50 append {statistics.median(ms for _, ms in values):.2f} ms"
            if name.startswith("Lmdb")
            else "",
        )
        for name, values in results.items()
    ]
    raw1, raw64 = rates["raw lmdb, 1 event per txn"], rates["raw lmdb, 64 events per txn"]
    log64 = rates["LmdbEventLog, 64 writers"]
    print(f"\n{'configuration':<32}{'events/s':>12}  notes")
    for name, rate, note in rows:
        print(f"{name:<32}{rate:>12,.0f}  {note}")
    paired = [
        log[0] / raw[0]
        for log, raw in zip(
            results["LmdbEventLog, 64 writers"], results["raw lmdb, 64 events per txn"], strict=True
        )
    ]
    print(
        f"\n64 writers vs raw 64/txn: {log64 / raw64:.0%} (target >= 50%; per repeat: "
        + ", ".join(f"{ratio:.0%}" for ratio in paired)
        + f")\n64 writers vs raw 1/txn:  {log64 / raw1:.1f}x (target >= 10x)"
        + "\n64 writers vs raw 64/txn that also encodes: "
        + f"{log64 / rates['raw lmdb, 64/txn, encoding']:.0%} (context)"
    )


if __name__ == "__main__":
    main()
