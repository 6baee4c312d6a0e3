"""Persistence benchmark: ctxledger against what its users would use instead (issue 7).

Every system gets the same workload, the realistic mix of :mod:`ctxledger.tooling.workload`:

1. sequential: one conversation of ``--messages`` (20,000) appended one by one; the latency of
   each append is recorded and reported near 100, 1,000, 5,000 and 20,000 messages, to show
   how the per-step cost grows with history;
2. concurrent: ``--conversations`` (64) conversations of ``messages / conversations`` messages
   each, appended at the same time from one thread per conversation;
3. recover: close, re-open, and read back every conversation (checked against what was
   appended).

A system that exceeds ``--budget`` seconds in a phase, or ``--disk-budget-gb`` on disk, stops
there and reports how far it got (LangGraph rewrites the whole state on every append, so it
does not reach 20,000). Figures are reported absolutely and as ratios to ``ctxledger``.
Beside it, ``ctxledger-log`` appends the same records through the storage alone (no runtime),
``domain-layout`` is the floor of ctxledger's append semantics (the domain's decision, codec and
fold around ``lmdb-layout``'s transaction, with no runtime and no log API), ``domain-log`` the
same decision and fold around ctxledger's own log (``LmdbEventLog.submit``, as the history actor
uses it; the floor of the 64-conversation phase, where ``domain-layout`` commits one transaction
an append),
``ctxledger-thread-summaries`` is the same host with ``summary_processes=0`` (the offline
summariser's background summaries on the host's threads, as before stop 39), and
``ctxledger-no-background`` the same host with ``Config(prepare_threshold=0)`` (no summary
prepared ahead: what the background summaries add to the latency tail).
Reads in the recover phase hit a warm page cache. Where PostgreSQL's server binaries are
installed, ``ctxledger-postgres`` (the same ``Host`` on a PostgreSQL database) and
``eventsourcing-postgres`` run too, each on a fresh database of a throwaway cluster this script
starts (``pg_support.py``, as the tests do). Usage::

    pip install -e '.[bench]'            # langgraph, its SQLite checkpointer, eventsourcing
    python bench/peers.py                # the full run (tens of minutes)
    python bench/peers.py --quick        # 500 messages, 8 conversations: a smoke test
    python bench/peers.py --systems jsonl-fsync,lmdb-txn64 --out results.json
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from peers_systems import (
    PEER_SYSTEMS,
    EventsourcingPostgres,
    LmdbLayout,
    Message,
    PersistenceSystem,
    directory_bytes,
)
from pg_support import PgDatabases, available, table_bytes

from ctxledger import Config, ContextOverflowError, Host, HostOptions, Session, ToolCall
from ctxledger.actors.waiters import Waiter
from ctxledger.domain import SessionState
from ctxledger.domain.commands import AppendMessages, execute
from ctxledger.events import MessageAppended, SessionOpened
from ctxledger.events.codec import Codec, decode_payload, encode_payload
from ctxledger.messages import Message as LedgerMessage
from ctxledger.storage import LmdbEventLog
from ctxledger.tooling.workload import take_messages

BASELINE = "ctxledger"
MARKS = (100, 1000, 5000, 20_000)


def marks_for(messages: int) -> list[int]:
    """The latency marks a run of ``messages`` reaches, plus its own length."""
    return sorted({mark for mark in MARKS if mark <= messages} | {messages})


class CtxLedgerSystem:
    """ctxledger behind the :class:`PersistenceSystem` interface: a ``Host`` on LMDB, "sync"."""

    name = BASELINE
    #: ``HostOptions.summary_processes`` (None: the default, a worker process on 2+ CPUs).
    summary_processes: int | None = None
    #: The host's default ``Config`` (None: ctxledger's own default).
    config: Config | None = None

    def open(self, directory: Path) -> None:
        self.directory = directory
        self.host = Host.open(
            self._target(directory),
            config=self.config,
            options=HostOptions(
                durability="sync",
                max_active_sessions=256,
                summary_processes=self.summary_processes,
            ),
        )
        self.sessions: dict[str, Session] = {}
        self.lock = threading.Lock()

    def _target(self, directory: Path) -> str | Path:
        return directory

    def _session(self, conv_id: str) -> Session:
        # An agent keeps its session; as the peers' files and aggregates, only the first use
        # of a conversation takes the lock (it took it on every append: 64 threads queued on
        # one lock around a dict lookup, a cost of the harness, not of the system).
        session = self.sessions.get(conv_id)
        if session is None:
            with self.lock:
                session = self.sessions.get(conv_id)
                if session is None:
                    session = self.sessions[conv_id] = self.host.session(conv_id)
        return session

    def append(self, conv_id: str, message: Message) -> None:
        self._session(conv_id).append(from_dict(message))

    def recover(self, conv_id: str) -> list[Message]:
        session = self._session(conv_id)
        # Recovery means: the session is folded and its current view built. The sequential
        # conversation (20,000 messages, never compacted: appends alone) gives a view far over
        # the window, which build_model_view refuses once it has built it (it does not compact).
        with contextlib.suppress(ContextOverflowError):
            session.build_model_view()
        # A workload cut mid-step leaves calls open; recovery answers them with synthetic
        # "interrupted" results, which are not part of what was appended.
        return [as_dict(m) for m in session.history() if not m.metadata.get("synthetic")]

    def close(self) -> None:
        self.host.close()

    def bytes_on_disk(self) -> int:
        return directory_bytes(self.directory)


def make_ctxledger_system() -> PersistenceSystem:
    """ctxledger as measured by this benchmark (durability "sync", group commit)."""
    return CtxLedgerSystem()


class CtxLedgerThreadSummaries(CtxLedgerSystem):
    """The same ``Host`` with its background summaries made on its threads
    (``summary_processes=0``, the only way before stop 39): what the worker process saves."""

    name = "ctxledger-thread-summaries"
    summary_processes = 0


class CtxLedgerNoBackground(CtxLedgerSystem):
    """The same ``Host`` with no summary prepared in the background
    (``Config(prepare_threshold=0)``): the disk's and the runtime's own latency tail, the
    floor against which the background summaries' share of ``ctxledger``'s p99 is read."""

    name = "ctxledger-no-background"
    config = Config(prepare_threshold=0)


class CtxLedgerLogSystem:
    """ctxledger's storage alone: the events ``Session.append`` records, through ``LmdbEventLog``.

    Each conversation's ``SessionOpened`` and then one ``MessageAppended`` per message, appended
    by the calling thread with ``LmdbEventLog.append`` (durability "sync"): the same records and
    commits as the ``ctxledger`` system without the runtime (no history actor, no fold, no view
    state). The difference between the two is the runtime's share of an append.
    """

    name = "ctxledger-log"

    def open(self, directory: Path) -> None:
        self.directory = directory
        self.log = LmdbEventLog.open(directory, durability="sync")
        self.seqs: dict[str, int] = {}
        self.lock = threading.Lock()

    def append(self, conv_id: str, message: Message) -> None:
        with self.lock:  # one writer thread per conversation: only the first append races
            seq = self.seqs.get(conv_id)
            if seq is None:
                opened = SessionOpened(session_id=conv_id, config=Config(), created_at=time.time())
                self.log.append(conv_id, [opened], expected_seq=0)
                seq = self.seqs[conv_id] = 0
        event = MessageAppended(message=from_dict(message).with_seq(seq + 1))
        self.log.append(conv_id, [event], expected_seq=seq + 1)
        self.seqs[conv_id] = seq + 1

    def recover(self, conv_id: str) -> list[Message]:
        return [
            as_dict(event.message)
            for _, event in self.log.iter_bodies(conv_id)
            if isinstance(event, MessageAppended)
        ]

    def close(self) -> None:
        self.log.close()

    def bytes_on_disk(self) -> int:
        return directory_bytes(self.directory)


class DomainLayout(LmdbLayout):
    """A floor, not a peer: what any implementation of ctxledger's append does at least.

    Per message, on the caller's thread: the domain's decision
    (:func:`ctxledger.domain.commands.execute` of an ``AppendMessages``: the tool-call
    bookkeeping, the seq), the event encoded and framed by ctxledger's codec, ``lmdb-layout``'s
    transaction (two puts, ``sync=True``), then the event folded into the session's state. No
    runtime (actors, journal, callbacks) and no log API (its checks, caches and counters):
    ``ctxledger`` against this is what its runtime and its log add to a lone writer's append.
    """

    name = "domain-layout"

    def open(self, directory: Path) -> None:
        super().open(directory)
        self._codec = Codec()
        self._states: dict[str, SessionState] = {}

    def append(self, conv_id: str, message: Message) -> None:
        appended = from_dict(message)
        with self._lock:
            state = self._states.get(conv_id)
            if state is None:
                state = self._states[conv_id] = SessionState.new(conv_id, Config())
                state.apply(SessionOpened(session_id=conv_id, config=Config(), created_at=0.0))
            events = execute(state, AppendMessages(messages=(appended,))).events
            frame, key = self._codec.frame, conv_id.encode()
            self._commit([(key, frame(encode_payload(event)), None) for event in events])
            for event in events:
                state.apply(event)

    def _decode(self, value: bytes) -> Message | None:
        event = decode_payload(self._codec.unframe(value))
        return as_dict(event.message) if isinstance(event, MessageAppended) else None


class DomainLog(CtxLedgerLogSystem):
    """A floor, not a peer: ctxledger's append without its runtime.

    Per message, on the caller's thread: the domain's decision
    (:func:`ctxledger.domain.commands.execute` of an ``AppendMessages``), the batch handed to
    ``LmdbEventLog.submit`` as the history actor hands it (committed on this thread when the
    journal is idle, else in the journal's next group commit), then, once it is durable, its
    events folded into the session's state. No actors, no mailbox, no ``Session``: one thread
    per conversation is the single writer of its state. ``ctxledger`` against this is what its
    runtime adds; this against ``ctxledger-log``, what the domain's decision and fold add.
    """

    name = "domain-log"

    def open(self, directory: Path) -> None:
        super().open(directory)
        self.states: dict[str, SessionState] = {}

    def append(self, conv_id: str, message: Message) -> None:
        appended = from_dict(message)
        state = self.states.get(conv_id)
        if state is None:
            with self.lock:  # one writer thread per conversation: only the first append races
                opened = SessionOpened(session_id=conv_id, config=Config(), created_at=time.time())
                self.log.append(conv_id, [opened], expected_seq=0)
                state = SessionState.new(conv_id, Config())
                state.apply(opened)
                self.seqs[conv_id] = 1
                self.states[conv_id] = state
        events = execute(state, AppendMessages(messages=(appended,))).events
        durable = Waiter()  # the runtime's reply slot, alone: its resolve is the log's callback
        self.log.submit(conv_id, events, expected_seq=self.seqs[conv_id], callback=durable.resolve)
        for record in durable.wait():
            state.apply(record.event)
        self.seqs[conv_id] += len(events)


class CtxLedgerPostgres(CtxLedgerSystem):
    """The same ``Host``, on a PostgreSQL database of the benchmark's throwaway cluster."""

    name = "ctxledger-postgres"

    def __init__(self, databases: PgDatabases) -> None:
        self.databases = databases

    def _target(self, directory: Path) -> str | Path:
        return self.databases.dsn_for(directory)

    def bytes_on_disk(self) -> int:
        return table_bytes(self.databases.dsn_for(self.directory))


#: Systems that need the benchmark's PostgreSQL cluster, by name.
POSTGRES_SYSTEMS: dict[str, Callable[[PgDatabases], PersistenceSystem]] = {
    "ctxledger-postgres": CtxLedgerPostgres,
    "eventsourcing-postgres": lambda databases: EventsourcingPostgres(databases.dsn_for),
}


def from_dict(raw: Message) -> LedgerMessage:
    """A trace-format dict as a ctxledger message."""
    return LedgerMessage(
        role=raw["role"],
        content=raw.get("content", ""),
        tool_calls=tuple(
            ToolCall(c["id"], c["name"], c["arguments"]) for c in raw.get("tool_calls", ())
        ),
        tool_call_id=raw.get("tool_call_id"),
        name=raw.get("name"),
    )


def as_dict(message: LedgerMessage) -> Message:
    """A message as one line of the ../shared/traces format (what every system stores)."""
    out: Message = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        out["name"] = message.name
    return out


@dataclass
class Result:
    """What one system did; latencies in microseconds."""

    system: str
    error: str | None = None
    sequential_appended: int = 0
    sequential_seconds: float = 0.0
    sequential_p50_us: float = 0.0
    sequential_p99_us: float = 0.0
    sequential_stopped: str | None = None
    latency_at_us: dict[int, float] = field(default_factory=dict)
    concurrent_appended: int = 0
    concurrent_seconds: float = 0.0
    concurrent_p50_us: float = 0.0
    concurrent_p99_us: float = 0.0
    concurrent_stopped: str | None = None
    bytes_on_disk: int = 0
    json_bytes: int = 0
    recover_seconds: float = 0.0
    recovered: int = 0
    verified: bool = False

    @property
    def sequential_rate(self) -> float:
        return self.sequential_appended / self.sequential_seconds if self.sequential_seconds else 0

    @property
    def concurrent_rate(self) -> float:
        return self.concurrent_appended / self.concurrent_seconds if self.concurrent_seconds else 0

    @property
    def bytes_per_message(self) -> float:
        appended = self.sequential_appended + self.concurrent_appended
        return self.bytes_on_disk / appended if appended else 0

    @property
    def growth(self) -> float | None:
        """Latency near the last mark reached over latency near the first."""
        reached = [self.latency_at_us[m] for m in sorted(self.latency_at_us)]
        return reached[-1] / reached[0] if len(reached) > 1 and reached[0] else None


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


class _Limits:
    """Time and disk budgets of one phase."""

    def __init__(self, system: PersistenceSystem, seconds: float, disk_bytes: int) -> None:
        self.system, self.disk_bytes = system, disk_bytes
        self.deadline = time.perf_counter() + seconds

    def exceeded(self, check_disk: bool) -> str | None:
        if time.perf_counter() > self.deadline:
            return "time budget"
        if check_disk and self.system.bytes_on_disk() > self.disk_bytes:
            return "disk budget"
        return None


def run_sequential(
    system: PersistenceSystem, messages: list[Message], limits: _Limits, result: Result
) -> None:
    """Append ``messages`` to one conversation, timing each append, until done or a budget."""
    latencies: list[float] = []
    clock = time.perf_counter_ns
    started = time.perf_counter()
    for index, message in enumerate(messages):
        before = clock()
        system.append("seq-0", message)
        latencies.append((clock() - before) / 1000)
        if (stopped := limits.exceeded(check_disk=index % 256 == 255)) is not None:
            result.sequential_stopped = stopped
            break
    result.sequential_seconds = time.perf_counter() - started
    result.sequential_appended = len(latencies)
    result.sequential_p50_us = _percentile(latencies, 0.5)
    result.sequential_p99_us = _percentile(latencies, 0.99)
    for mark in marks_for(len(messages)):
        if mark <= len(latencies):
            window = latencies[mark - min(50, mark // 2) : mark]
            result.latency_at_us[mark] = statistics.median(window)


def run_concurrent(
    system: PersistenceSystem, conversations: list[list[Message]], limits: _Limits,
    result: Result,
) -> list[int]:
    """Append each conversation from its own thread, all at once; return how many each got.

    Raises:
        RuntimeError: An append failed in some thread (the first failure is chained).
    """
    appended = [0] * len(conversations)
    latencies: list[list[float]] = [[] for _ in conversations]
    failures: list[BaseException] = []
    stop = threading.Event()
    start = threading.Barrier(len(conversations) + 1)

    def worker(index: int) -> None:
        clock, own = time.perf_counter_ns, latencies[index]
        start.wait()
        try:
            for message in conversations[index]:
                if stop.is_set():
                    return
                before = clock()
                system.append(f"conv-{index}", message)
                own.append((clock() - before) / 1000)
                appended[index] += 1
        except Exception as exc:  # reported by the main thread, which owns the result
            failures.append(exc)
            stop.set()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(conversations))]
    for thread in threads:
        thread.start()
    start.wait()
    started = time.perf_counter()
    for thread in threads:
        while thread.is_alive():
            thread.join(timeout=0.25)
            if not stop.is_set() and (stopped := limits.exceeded(check_disk=True)) is not None:
                result.concurrent_stopped = stopped
                stop.set()
    result.concurrent_seconds = time.perf_counter() - started
    result.concurrent_appended = sum(appended)
    every = [latency for own in latencies for latency in own]
    result.concurrent_p50_us = _percentile(every, 0.5)
    result.concurrent_p99_us = _percentile(every, 0.99)
    if failures:
        failed = f"{len(failures)} of {len(conversations)} threads failed"
        raise RuntimeError(failed) from failures[0]
    return appended


def run_system(
    name: str, make: Callable[[], PersistenceSystem], folder: Path, sequential: list[Message],
    conversations: list[list[Message]], budget: float, disk_bytes: int,
) -> Result:
    """Run the three phases on one system in ``folder``; failures are reported, not raised."""
    result = Result(system=name)
    try:
        system = make()
        system.open(folder)
        run_sequential(system, sequential, _Limits(system, budget, disk_bytes), result)
        counts = run_concurrent(system, conversations, _Limits(system, budget, disk_bytes), result)
        system.close()
        result.bytes_on_disk = system.bytes_on_disk()
        expected = {"seq-0": sequential[: result.sequential_appended]}
        pairs = enumerate(zip(conversations, counts, strict=True))
        expected |= {f"conv-{i}": conversation[:n] for i, (conversation, n) in pairs}
        result.json_bytes = sum(
            len(json.dumps(m, ensure_ascii=False).encode()) + 1
            for ms in expected.values() for m in ms
        )
        gc.collect()
        reopened = make()
        started = time.perf_counter()
        reopened.open(folder)
        recovered = {conv_id: reopened.recover(conv_id) for conv_id in expected}
        result.recover_seconds = time.perf_counter() - started
        reopened.close()
        result.recovered = sum(map(len, recovered.values()))
        result.verified = recovered == expected
    except Exception as exc:  # a peer that breaks must not hide the others' figures
        cause = f" ({type(exc.__cause__).__name__}: {exc.__cause__})" if exc.__cause__ else ""
        result.error = f"{type(exc).__name__}: {exc}{cause}"
    return result


def _figure(value: float | None, unit: str = "") -> str:
    if value is None:
        return "—"
    if value >= 100:
        return f"{value:,.0f}{unit}"
    return f"{value:.2f}{unit}" if value < 10 else f"{value:.1f}{unit}"


def report(results: list[Result], messages: int, conversations: int) -> str:
    """Markdown tables: absolute figures, then ratios to ctxledger when it ran."""
    marks = marks_for(messages)
    head = (["system", "seq appends/s", "p50 µs", "p99 µs", *(f"µs @{m:,}" for m in marks),
             "growth", f"{conversations}-conv appends/s", "p50 µs", "p99 µs", "bytes/msg",
             "json bytes/msg", "recover s", "ok"])
    rows = []
    for r in results:
        if r.error:
            rows.append([r.system, f"failed: {r.error}"] + [""] * (len(head) - 2))
            continue
        stopped = r.sequential_stopped
        rows.append([
            r.system + (f" (stopped at {r.sequential_appended:,}: {stopped})" if stopped else ""),
            _figure(r.sequential_rate), _figure(r.sequential_p50_us), _figure(r.sequential_p99_us),
            *(_figure(r.latency_at_us.get(m)) for m in marks), _figure(r.growth, "x"),
            _figure(r.concurrent_rate) + (" (stopped)" if r.concurrent_stopped else ""),
            _figure(r.concurrent_p50_us), _figure(r.concurrent_p99_us),
            _figure(r.bytes_per_message), _figure(r.json_bytes / max(1, r.recovered)),
            _figure(r.recover_seconds), "yes" if r.verified else "NO",
        ])
    lines = [_table(head, rows)]
    baseline = next((r for r in results if r.system == BASELINE and not r.error), None)
    if baseline is None:
        lines.append("\nNo ratios: the ctxledger baseline did not run (make_ctxledger_system).")
    else:
        ratio_head = ["system", "seq appends/s", "seq p99", f"{conversations}-conv appends/s",
                      "bytes/msg", "recover time"]
        ratio_rows = [[r.system, *(_figure(_ratio(a, b), "x") for a, b in (
            (r.sequential_rate, baseline.sequential_rate),
            (r.sequential_p99_us, baseline.sequential_p99_us),
            (r.concurrent_rate, baseline.concurrent_rate),
            (r.bytes_per_message, baseline.bytes_per_message),
            (r.recover_seconds, baseline.recover_seconds)))]
            for r in results if not r.error and r is not baseline]
        lines += ["\nEach figure divided by ctxledger's (throughput: below 1x is slower than "
                  "ctxledger; latency, bytes and time: above 1x is worse).\n",
                  _table(ratio_head, ratio_rows)]
    return "\n".join(lines)


def _ratio(value: float, base: float) -> float | None:
    return value / base if base else None


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in (
        "ctxledger", "langgraph", "langgraph-checkpoint-sqlite", "eventsourcing", "lmdb",
        "psycopg", "psycopg-pool",
    ):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="500 messages, 8 conversations")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--conversations", type=int, default=64)
    parser.add_argument("--budget", type=float, default=300, help="seconds per phase per system")
    parser.add_argument("--disk-budget-gb", type=float, default=8)
    every = [BASELINE, "ctxledger-thread-summaries", "ctxledger-no-background", "ctxledger-log",
             "domain-log", "domain-layout", *PEER_SYSTEMS,
             *(POSTGRES_SYSTEMS if available() else ())]  # fmt: skip
    parser.add_argument("--systems", default=",".join(every))
    parser.add_argument("--dir", type=Path, help="work folder (default: a temporary one, removed)")
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    options = parser.parse_args(argv)
    if options.quick:
        options.messages, options.conversations, options.budget = 500, 8, 30
    makers = {
        BASELINE: make_ctxledger_system,
        "ctxledger-thread-summaries": CtxLedgerThreadSummaries,
        "ctxledger-no-background": CtxLedgerNoBackground,
        "ctxledger-log": CtxLedgerLogSystem,
        "domain-log": DomainLog,
        "domain-layout": DomainLayout,
        **PEER_SYSTEMS,
    }
    chosen = [name.strip() for name in options.systems.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(makers) - set(POSTGRES_SYSTEMS))
    if unknown:
        parser.error(f"unknown systems {unknown}; choose from {sorted(makers)}")
    databases = PgDatabases() if set(chosen) & set(POSTGRES_SYSTEMS) else None
    if databases is not None:
        for name, make in POSTGRES_SYSTEMS.items():
            makers[name] = lambda make=make: make(databases)  # type: ignore[misc]

    per_conversation = max(1, options.messages // options.conversations)
    print(f"workload: {options.messages:,} messages, then {options.conversations} x "
          f"{per_conversation:,} concurrently", file=sys.stderr)
    sequential = [as_dict(m) for m in take_messages(0, options.messages)]
    conversations = [[as_dict(m) for m in take_messages(1 + i, per_conversation)]
                     for i in range(options.conversations)]
    work = options.dir or Path(tempfile.mkdtemp(prefix="ctxledger-peers-"))
    results = []
    try:
        for name in chosen:
            print(f"running {name} ...", file=sys.stderr, flush=True)
            result = run_system(name, makers[name], work / name, sequential, conversations,
                                options.budget, int(options.disk_budget_gb * 2**30))
            results.append(result)
            print(f"  {result.error or 'done'}", file=sys.stderr, flush=True)
            if options.dir is None:
                shutil.rmtree(work / name, ignore_errors=True)
    finally:
        if options.dir is None:
            shutil.rmtree(work, ignore_errors=True)
        if databases is not None:
            databases.close()
    print(report(results, options.messages, options.conversations))
    if options.out:
        machine = {"platform": platform.platform(), "python": platform.python_version(),
                   "cpus": os.cpu_count(), "versions": _versions()}
        payload: dict[str, Any] = {"machine": machine, "options": {
            k: str(v) for k, v in vars(options).items()}, "results": [asdict(r) for r in results]}
        options.out.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
