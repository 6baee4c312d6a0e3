"""Event-log benchmark (issue 2): durable appends/s through LmdbEventLog against raw LMDB.

All runs use ``sync=True`` (an append is on disk when it returns) and the same realistic message
mix (``ctxledger.tooling.workload``: sizes from ~200 B to 40 KB), in one process, one after
the other:

1. raw ``lmdb``, one transaction per event (the ceiling without group commit);
2. raw ``lmdb``, 64 events per transaction (the ceiling of batching), writing records encoded
   before the clock starts; and once more encoding each record inside the timed loop (the same
   work as the log minus its threads: context, not a target);
3. ``LmdbEventLog`` with 1, 8 and 64 writer threads, each appending one event at a time to its
   own session (group commit turns concurrent appends into shared transactions), and 64 writers
   appending 4 events per call (about one agent step: assistant message, tool result, usage,
   served view);
4. ``LmdbEventLog.aappend`` from 64 asyncio tasks on one event loop, one event at a time, each
   to its own session;
5. the thread hand-off alone (context): 64 threads that each block until one server thread
   releases them, with no encoding, LMDB or fsync at all. On a 2-CPU VM this ceiling is
   ~45,000/s, because each blocked-and-woken thread costs two context switches (~20 us of
   kernel time): it is why 64 *threads* cannot reach the target while 64 tasks on one event
   loop, answered with one wake-up per group, can.

The raw runs do the same puts as the 64 writers: the same encoded records (framed, compressed
above the threshold) under the same keys (64 sessions, interleaved as the writers' appends
arrive), into the ``events`` and ``global`` sub-databases. Keys spread over 64 sessions dirty one
B-tree leaf per session in every transaction, so they cost raw LMDB about a third of its
throughput against keys of one session; that single-session run is printed too, for context.
The log pays for encoding inside its measured time. Each figure is the median of ``--repeat`` runs,
each in a fresh directory; the configurations take turns within each repeat, so that drift in
the machine's load hits all of them alike.

Targets: with 64 writers, at least 50 % of raw 64-per-transaction throughput, and at least 10x
raw one-transaction-per-event.

PostgreSQL (issue 15), in the same run, on a throwaway cluster this script starts the way the
tests do (``bench/pg_support.py``: initdb under /tmp, a private unix socket, ``fsync`` on):

6. ``PostgresEventLog`` with 1, 8 and 64 writer threads (a fresh database per run), and 64
   writers with a tailing reader (``ctxledger.storage.tail``) that times how long after an
   append was acknowledged it sees the event (tail-reader lag);
7. the same server's ceiling with one commit per event: the same records inserted one row and
   one commit each, from 1 and from 64 connections, and ``pgbench -N`` with 1 and 64 clients;
   and the ``eventsourcing`` library's PostgreSQL recorder with 64 writer threads (one aggregate
   per writer, one event per message; it needs the ``bench`` extra);
8. after each 64-writer run (LMDB and PostgreSQL): recovery (reopen, then decode every session
   through ``iter_bodies``) and bytes on disk per event (LMDB's data file; PostgreSQL's tables,
   indexes and TOAST, no WAL).

Targets (issue 15): with 64 writers, at least 10x the server's one-commit-per-event rate and at
least 3x the eventsourcing PostgreSQL recorder.

Usage::

    .venv/bin/python bench/bench_log.py                # full run
    .venv/bin/python bench/bench_log.py --quick        # a small smoke run
    .venv/bin/python bench/bench_log.py --no-postgres  # LMDB only
"""

from __future__ import annotations

import argparse
import asyncio
import os
import queue
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
from pg_support import PgDatabases, available, pgbench_tps, single_row_commits

from ctxledger.events.codec import Codec, encode_payload
from ctxledger.events.types import Event, MessageAppended
from ctxledger.storage import LmdbEventLog, PostgresEventLog, tail
from ctxledger.storage._layout import pack_pair, pack_stamp, pack_u64
from ctxledger.tooling.workload import take_messages

MAP_SIZE = 1 << 30
WRITERS = 64


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
    path: Path,
    records: list[bytes],
    per_txn: int,
    encode: Callable[[int], bytes] | None = None,
    *,
    sessions: int = WRITERS,
) -> float:
    """Write ``records`` with raw lmdb, ``per_txn`` per transaction; return events/s.

    Record ``i`` goes to session ``i % sessions + 1`` as its seq ``i // sessions + 1``: the keys
    of :func:`through_log` with ``sessions`` writers. With ``encode``, each record is produced
    by ``encode(index)`` inside the timed loop instead.
    """
    env = lmdb.open(str(path), map_size=MAP_SIZE, max_dbs=8, sync=True, metasync=True)
    events, positions = env.open_db(b"events"), env.open_db(b"global")
    start = time.perf_counter()
    for first in range(0, len(records), per_txn):
        with env.begin(write=True) as txn:
            for position in range(first + 1, min(first + per_txn, len(records)) + 1):
                index = position - 1
                record = records[index] if encode is None else encode(index)
                key = pack_pair(index % sessions + 1, index // sessions + 1)
                txn.put(key, pack_stamp(position, 0.0) + record, db=events)
                txn.put(pack_u64(position), key, db=positions)
    elapsed = time.perf_counter() - start
    env.close()
    return len(records) / elapsed


#: What one configuration measured: events/s, median append latency (ms), and extras.
Measured = tuple[float, float, dict[str, float]]


def through_log(
    open_log: Callable[[], Any],
    events: list[Event],
    writers: int,
    batch: int = 1,
    *,
    recover: bool = False,
    lag: bool = False,
) -> Measured:
    """Append ``events`` from ``writers`` threads, ``batch`` per append, to a fresh log.

    With ``recover``, the log is then closed, reopened, and every session decoded through
    ``iter_bodies`` (extras ``recover_s`` and ``bytes_per_event``). With ``lag``, a tailing
    reader follows the log meanwhile (extras ``lag_p50_ms`` and ``lag_p99_ms``: from an append's
    acknowledgement to the reader seeing its first event; negative when the reader saw it first).

    Returns:
        Events per second, the median latency of one append in milliseconds, and the extras.
    """
    log = open_log()
    shares = [events[index::writers] for index in range(writers)]
    latencies: list[list[float]] = [[] for _ in range(writers)]
    acked: dict[tuple[str, int], float] = {}
    barrier = threading.Barrier(writers + 1)

    def writer(index: int) -> None:
        session_id, mine, spent = f"writer-{index}", shares[index], latencies[index]
        barrier.wait()
        for seq in range(0, len(mine), batch):
            began = time.perf_counter()
            log.append(session_id, mine[seq : seq + batch], expected_seq=seq)
            done = time.perf_counter()
            spent.append(done - began)
            acked[(session_id, seq + 1)] = done

    seen: dict[tuple[str, int], float] = {}
    stop = threading.Event()

    def follow() -> None:
        for recorded in tail(log, stop=stop, batch=1024, poll=0.05):
            seen[(recorded.session_id, recorded.seq)] = time.perf_counter()
            if len(seen) == len(events):
                stop.set()

    reader = threading.Thread(target=follow) if lag else None
    if reader is not None:
        reader.start()
    threads = [threading.Thread(target=writer, args=(index,)) for index in range(writers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    extras: dict[str, float] = {}
    if reader is not None:
        reader.join()
        lags = sorted((seen[key] - when) * 1000 for key, when in acked.items())
        extras["lag_p50_ms"] = lags[len(lags) // 2]
        extras["lag_p99_ms"] = lags[min(len(lags) - 1, len(lags) * 99 // 100)]
    if recover:
        extras.update(recovery(log, open_log, writers, len(events)))
    log.close()
    all_latencies = [value for values in latencies for value in values]
    return len(events) / elapsed, statistics.median(all_latencies) * 1000, extras


def through_eventsourcing(dsn: str, events: list[Event], writers: int) -> Measured:
    """The ``eventsourcing`` library's PostgreSQL recorder: ``writers`` threads, each saving one
    aggregate (a conversation) one event per message (``peers_systems.EventsourcingPostgres``).
    """
    from peers import as_dict
    from peers_systems import EventsourcingPostgres

    system = EventsourcingPostgres(lambda _: dsn)
    system.open(Path(tempfile.gettempdir()))
    shares = [
        [as_dict(event.message) for event in events[index::writers]]  # type: ignore[union-attr]
        for index in range(writers)
    ]
    barrier = threading.Barrier(writers + 1)
    failures: list[BaseException] = []

    def writer(index: int) -> None:
        barrier.wait()
        try:
            for message in shares[index]:
                system.append(f"writer-{index}", message)
        except Exception as exc:  # reported by the main thread
            failures.append(exc)

    threads = [threading.Thread(target=writer, args=(index,)) for index in range(writers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    system.close()
    if failures:
        raise RuntimeError(f"{len(failures)} eventsourcing writers failed") from failures[0]
    return len(events) / elapsed, 0.0, {}


def written_bytes() -> int | None:
    """Bytes this process has caused to be written to storage so far (Linux), or None."""
    try:
        with open("/proc/self/io") as stats:
            fields = dict(line.split(": ") for line in stats.read().splitlines())
    except OSError:
        return None
    return int(fields["write_bytes"])


def with_io(run: Callable[[], Measured], events: int) -> Measured:
    """``run()``, with the KB it wrote per event as the extra ``kb_per_event``.

    Unlike a latency, this does not depend on the machine's load: it counts the pages a commit
    writes (LMDB copies every page it changes, from each B-tree's root to its leaf).
    """
    before = written_bytes()
    rate, ms, extras = run()
    after = written_bytes()
    if before is not None and after is not None:
        extras = {**extras, "kb_per_event": (after - before) / events / 1024}
    return rate, ms, extras


def recovery(log: Any, open_log: Callable[[], Any], sessions: int, count: int) -> dict[str, float]:
    """Close ``log``, reopen it, decode every session; the time and the bytes per event."""
    log.close()
    start = time.perf_counter()
    reopened = open_log()
    decoded = sum(1 for index in range(sessions) for _ in reopened.iter_bodies(f"writer-{index}"))
    elapsed = time.perf_counter() - start
    assert decoded == count, f"recovered {decoded} of {count} events"
    stats = reopened.stats()
    reopened.close()
    return {"recover_s": elapsed, "bytes_per_event": stats["file_bytes"] / count}


def through_tasks(open_log: Callable[[], Any], events: list[Event], tasks: int) -> Measured:
    """Append ``events`` with ``aappend`` from ``tasks`` tasks on one event loop.

    Returns:
        Events per second, the median latency of one append in milliseconds, no extras.
    """
    log = open_log()
    latencies: list[float] = []

    async def writer(index: int) -> None:
        session_id = f"writer-{index}"
        for seq, event in enumerate(events[index::tasks]):
            began = time.perf_counter()
            await log.aappend(session_id, [event], expected_seq=seq)
            latencies.append(time.perf_counter() - began)

    async def run_all() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(writer(index) for index in range(tasks)))
        return time.perf_counter() - start

    elapsed = asyncio.run(run_all())
    log.close()
    return len(events) / elapsed, statistics.median(latencies) * 1000, {}


def handoff_ceiling(events: list[Event], writers: int) -> Measured:
    """The thread hand-off alone: ``writers`` threads submit to one thread that wakes them.

    No encoding, no LMDB, no fsync: each "append" is a queue put and a wait on a lock that a
    server thread releases after draining the queue, as the journal does. This is the ceiling
    of any design in which OS threads block until another thread answers them.
    """
    requests: queue.SimpleQueue[threading.Lock | None] = queue.SimpleQueue()

    def server() -> None:
        while True:
            group = [requests.get()]
            while True:
                try:
                    group.append(requests.get_nowait())
                except queue.Empty:
                    break
            for lock in group:
                if lock is None:
                    return
                lock.release()

    def writer(count: int) -> None:
        for _ in range(count):
            done = threading.Lock()
            done.acquire()
            requests.put(done)
            done.acquire()

    serving = threading.Thread(target=server)
    serving.start()
    threads = [
        threading.Thread(target=writer, args=(len(events) // writers,)) for _ in range(writers)
    ]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    requests.put(None)
    serving.join()
    return len(events) // writers * writers / elapsed, 0.0, {}


def main() -> None:
    """Run every configuration and print the table and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=12_000, help="events per batched run")
    parser.add_argument("--single", type=int, default=1_500, help="events per one-by-one run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small counts, one repeat")
    parser.add_argument(
        "--postgres",
        action=argparse.BooleanOptionalAction,
        default=available(),
        help="also measure PostgreSQL (default: when its server binaries are installed)",
    )
    args = parser.parse_args()
    if args.quick:
        args.events, args.single, args.repeat = 2_000, 300, 1
    # The application decides about logging: keep the benchmark's output clean.

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

    def lmdb_at(path: Path) -> Callable[[], LmdbEventLog]:
        return lambda: LmdbEventLog.open(path, durability="sync", map_size=MAP_SIZE)

    # Configurations take turns within each repeat, so that a change in the machine's load
    # (fsync latency above all) hits all of them alike; each run gets a fresh directory.
    runs: dict[str, Callable[[Path], Measured]] = {
        "raw lmdb, 1 event per txn": lambda p: with_io(
            lambda: (raw_lmdb(p, records[: args.single], 1), 0.0, {}), args.single
        ),
        "raw lmdb, 64 events per txn": lambda p: (raw_lmdb(p, records, 64), 0.0, {}),
        "raw lmdb, 64/txn, encoding": lambda p: (raw_lmdb(p, records, 64, encode), 0.0, {}),
        "raw lmdb, 64/txn, 1 session": lambda p: (
            raw_lmdb(p, records, 64, sessions=1),
            0.0,
            {},
        ),
        "LmdbEventLog, 1 writer": lambda p: with_io(
            lambda: through_log(lmdb_at(p), events[: args.single], 1), args.single
        ),
        "LmdbEventLog, 8 writers": lambda p: through_log(lmdb_at(p), events[: args.events // 3], 8),
        "LmdbEventLog, 64 writers": lambda p: through_log(
            lmdb_at(p), events, WRITERS, recover=True
        ),
        "LmdbEventLog, 64 writers x4": lambda p: through_log(lmdb_at(p), events, WRITERS, batch=4),
        "aappend, 64 asyncio tasks": lambda p: through_tasks(lmdb_at(p), events, WRITERS),
        "thread hand-off only, 64": lambda p: handoff_ceiling(events, WRITERS),
    }
    pg = PgDatabases() if args.postgres else None
    if pg is not None:
        runs.update(postgres_runs(pg, events, records, args.single, args.events))
    results: dict[str, list[Measured]] = {name: [] for name in runs}
    try:
        for _ in range(args.repeat):
            for name, run in runs.items():
                with tempfile.TemporaryDirectory(prefix="bench_log_") as tmp:
                    results[name].append(run(Path(tmp) / "log"))
    finally:
        if pg is not None:
            pg.close()
    rates = {name: statistics.median(r for r, _, _ in values) for name, values in results.items()}
    print(f"\n{'configuration':<40}{'events/s':>12}  notes")
    for name, values in results.items():
        notes = []
        if not name.startswith(("raw", "thread", "pg ", "pgbench", "eventsourcing")):
            notes.append(f"p50 append {statistics.median(ms for _, ms, _ in values):.2f} ms")
        for key, unit in (
            ("recover_s", "s recovery"),
            ("bytes_per_event", " B/event on disk"),
            ("lag_p50_ms", " ms tail lag p50"),
            ("lag_p99_ms", " ms p99"),
            ("kb_per_event", " KB written/event"),
        ):
            found = [extras[key] for _, _, extras in values if key in extras]
            if found:
                notes.append(f"{statistics.median(found):,.2f}{unit}")
        print(f"{name:<40}{rates[name]:>12,.0f}  {', '.join(notes)}")
    raw1, raw64 = rates["raw lmdb, 1 event per txn"], rates["raw lmdb, 64 events per txn"]
    for name in ("LmdbEventLog, 64 writers", "aappend, 64 asyncio tasks"):
        log64 = rates[name]
        paired = [
            log[0] / raw[0]
            for log, raw in zip(results[name], results["raw lmdb, 64 events per txn"], strict=True)
        ]
        print(
            f"\n{name}:\n  vs raw 64/txn: {log64 / raw64:.0%} (target >= 50%; per repeat: "
            + ", ".join(f"{ratio:.0%}" for ratio in paired)
            + f")\n  vs raw 1/txn:  {log64 / raw1:.1f}x (target >= 10x)"
            + "\n  context: vs raw 64/txn that also encodes "
            + f"{log64 / rates['raw lmdb, 64/txn, encoding']:.0%}, vs raw 64/txn of one session "
            + f"{log64 / rates['raw lmdb, 64/txn, 1 session']:.0%}"
        )
    if pg is not None:
        pg64, lmdb64 = rates["PostgresEventLog, 64 writers"], "LmdbEventLog, 64 writers"
        one, many = rates["pg one commit per event, 1 client"], rates[_PG_CEILING_64]
        print(
            f"\nPostgresEventLog, 64 writers: {pg64:,.0f} events/s\n"
            f"  vs one commit per event, 1 client:   {pg64 / one:.1f}x (target >= 10x)\n"
            f"  vs one commit per event, 64 clients: {pg64 / many:.1f}x\n"
            f"  vs LmdbEventLog, 64 writers:         {pg64 / rates[lmdb64]:.2f}x\n"
            f"  vs eventsourcing-postgres, 64 writers: "
            f"{pg64 / rates['eventsourcing-postgres, 64 writers']:.1f}x (target >= 3x)"
        )


_PG_CEILING_64 = "pg one commit per event, 64 clients"


def postgres_runs(
    pg: PgDatabases, events: list[Event], records: list[bytes], single: int, count: int
) -> dict[str, Callable[[Path], Measured]]:
    """The PostgreSQL configurations, each on a fresh database of ``pg``'s cluster."""

    def log_in(dsn: str) -> Callable[[], PostgresEventLog]:
        return lambda: PostgresEventLog.open(dsn, durability="sync", pool_size=4)

    def fresh() -> Callable[[], PostgresEventLog]:
        return log_in(pg.fresh())

    def pgbench(clients: int) -> Measured:
        tps = pgbench_tps(pg.cluster, pg.fresh(), clients, seconds=5)
        return (tps or 0.0), 0.0, {}

    return {
        "PostgresEventLog, 1 writer": lambda p: through_log(fresh(), events[:single], 1),
        "PostgresEventLog, 8 writers": lambda p: through_log(fresh(), events[: count // 3], 8),
        "PostgresEventLog, 64 writers": lambda p: through_log(
            fresh(), events, WRITERS, recover=True
        ),
        "PostgresEventLog, 64 writers + tail": lambda p: through_log(
            fresh(), events, WRITERS, lag=True
        ),
        "PostgresEventLog.aappend, 64 tasks": lambda p: through_tasks(fresh(), events, WRITERS),
        "pg one commit per event, 1 client": lambda p: (
            single_row_commits(pg.fresh(), records[:single], 1),
            0.0,
            {},
        ),
        _PG_CEILING_64: lambda p: (single_row_commits(pg.fresh(), records, WRITERS), 0.0, {}),
        "eventsourcing-postgres, 64 writers": lambda p: through_eventsourcing(
            pg.fresh(), events, WRITERS
        ),
        "pgbench -N, 1 client (tps)": lambda p: pgbench(1),
        "pgbench -N, 64 clients (tps)": lambda p: pgbench(WRITERS),
    }


if __name__ == "__main__":
    main()
