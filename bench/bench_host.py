"""Host benchmark (issues 4 and 13): steps per second, latency under load, threads, re-open, CPU.

A *step* is what an agent does before each model call: append the messages of one agent step
(:func:`ctxledger.tooling.workload.iter_agent_steps`) and serve the next view (compacting when
due, with the offline extractive summariser): ``Session.step(messages)``, one group commit when
no compaction is due (``--api pair``: ``append_many`` then ``prepare_step``, two commits, as
before issue 28). Durability "sync" unless told otherwise.

1. Closed loop: 1, 16, 128 and 1,024 sessions stepping back to back. Reports steps/s, the p50 and
   p99 of a step, the compactions started (how often the policy makes a step compact or prepare
   a summary), and the threads of the host (threads the driver starts are not counted). Each
   size runs with two drivers: ``threads`` (one thread per session, sync calls) and ``asyncio``
   (one event loop, the native async twins ``astep`` or ``aappend_many`` / ``aprepare_step``).
   Beside each p99, the p99 of what the summaries forced on each step (:func:`forced_waits`):
   the part of it no work of the host could have saved at the summariser's speed.
2. Open loop, the way agents behave (they wait for the LLM between steps): 1,024 sessions each
   stepping once a second at a random offset (~1,000 steps/s offered), driven from one event
   loop with the async twins. Reports the p50 and p99 of a step measured from the moment it was
   due (so a driver or host that falls behind shows up as latency), the achieved rate, threads;
   the service time (from the step's start); and, measured before the run in the same process,
   how late an idle event loop wakes a task at a due time: the driver's own share of the p50.
   The driver's loop waits with ``select`` (``--open-timer select``, the default): asyncio's
   default selector on Linux (``epoll``, ``--open-timer epoll``) rounds its timeout up to whole
   milliseconds, so the driver woke each step ~0.65 ms late at the median on an idle loop (~0.1
   ms with ``select``), a delay of the harness that no agent has (it steps when its model answers,
   on I/O, not on a timer). With ``--open-floor``, the
   same driver then stores each step's messages with a raw LMDB writer thread and nothing else
   (:class:`FloorWriter`): the least any single-writer durable log costs it on this machine.
3. Re-open 1,000 sessions of 200 messages (window 128,000: every view fits uncompacted) and
   serve the first view of each: ms per session, one after the other, and all at once from one
   event loop (the time of all / 1,000).
4. CPU per step: ``time.process_time`` (every thread of the process) per step, no compaction:
   the first 20 steps of 100 sessions (durability "none" and "sync"; window 32,000 with the
   prepare point of the one-mark policy, so that none starts a summary), then one session as its
   view grows (a step hashes its whole view, so its cost still grows with the view).

Targets of issue 13: 128 sessions >= 2,800 steps/s; open loop p50 <= 2 ms, p99 <= 20 ms;
threads <= 32; re-open <= 2 ms/session; CPU per step <= 0.3 ms.

Usage::

    .venv/bin/python bench/bench_host.py                 # full run (a few minutes)
    .venv/bin/python bench/bench_host.py --quick         # a small smoke run
    .venv/bin/python bench/bench_host.py --json out.json # also write the figures as JSON
    # one session's p99 on seven fresh hosts (a short open loop, no re-open, no CPU part):
    .venv/bin/python bench/bench_host.py --sizes 1 --drivers threads --repeat 7 \
        --skip reopen,cpu --open-sessions 8 --open-seconds 1
    # the same without the fact block (what the block's pipeline costs the loops):
    .venv/bin/python bench/bench_host.py --sizes 1 --drivers threads --repeat 7 \
        --skip reopen,cpu --open-sessions 8 --open-seconds 1 --fact-index-chars 0
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import random
import selectors
import statistics
import tempfile
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ctxledger import Config, Host, HostOptions, Message
from ctxledger.events import (
    CheckpointCreated,
    CompactionFailed,
    CompactionStarted,
    SummaryPrepared,
)
from ctxledger.storage import RecordedEvent
from ctxledger.tooling.workload import iter_agent_steps, take_messages

CONFIG = Config(context_window=32_000)
#: The Config of the closed and open loops: :data:`CONFIG`, with ``--fact-index-chars N`` its
#: fact block's room set to ``N`` (0: no block; what the block costs a loop, side by side).
LOOP_CONFIG = [CONFIG]

#: How a step reaches the host: ``step`` (``Session.step(messages)``: the appends and the next
#: view in one group commit when no compaction is due) or ``pair`` (``append_many`` then
#: ``prepare_step``: two commits). ``--api`` sets it.
API = ["step"]


def do_step(session: Any, messages: Sequence[Message]) -> Any:
    """One agent step through the API of the run; returns the view served."""
    if API[0] == "step":
        return session.step(messages)
    session.append_many(messages)
    return session.prepare_step()


async def ado_step(session: Any, messages: Sequence[Message]) -> Any:
    """:func:`do_step` with the native async twins."""
    if API[0] == "step":
        return await session.astep(messages)
    await session.aappend_many(messages)
    return await session.aprepare_step()


#: ``HostOptions(max_active_sessions=...)`` of the runs; 0: the default (1,024, or the run's
#: sessions if more). ``--max-active`` sets it: the host splits it evenly over its history
#: actors while ids hash unevenly, so at exactly 1,024 sessions one actor evicts and
#: re-activates sessions.
MAX_ACTIVE = [0]
#: ``HostOptions(summary_processes=...)`` of the runs (None: the default); ``--summary-processes``.
SUMMARY_PROCESSES: list[int | None] = [None]
#: For the CPU figure: a window no step of the run fills, so that no compaction happens.
NO_COMPACTION = Config(context_window=10_000_000)
#: For the CPU figure over the first steps: the runs' window and threshold with the prepare
#: point where the one-mark policy had it (0.85 of the threshold, 21,760 tokens). The two
#: marks' derived point, a quarter of the way from the target (16,000) to the threshold
#: (25,600), is 18,400 tokens, which seed 4's 19th step passes (19,111 tokens): it started a
#: background summary, and a step that starts a compaction is not what the figure is about.
#: The first 20 steps of seeds 0-99 peak at 19,111 tokens; the run checks none compacts.
CPU_CONFIG = Config(context_window=32_000, prepare_threshold=0.85)
#: For the re-open part: the library's default window, which every session's 200 messages fit
#: (their masked views are 14,800-37,500 tokens, median 19,900). Each first view is served
#: without compacting (``build_model_view``), the whole history as before the two marks; at
#: 32,000 tokens 4 of the 1,000 views do not fit, and a view over the window is now refused
#: (``ContextOverflowError``), no longer served.
REOPEN_CONFIG = Config(context_window=128_000)


def percentile(ordered: list[float], share: float) -> float:
    """The ``share`` quantile of an ascending list (nearest rank)."""
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


#: Each session's steps, each a tuple of messages.
Work = tuple[tuple[tuple[Message, ...], ...], ...]


def workloads(sessions: int, steps: int, warmup: int) -> Work:
    """The steps of each session's seeded conversation (generated before anything is timed).

    Tuples, not lists: messages are not tracked by CPython's garbage collector, so the first
    collection stops tracking these tuples too. As lists they were ~40 % of the references a
    full collection walked in the open loop of 1,024 sessions (every pause stalls every thread)
    and doubled the p99 the bench reported: the bench measured its own heap.
    """
    return tuple(
        tuple(tuple(step) for step in iter_agent_steps(seed=n, steps=warmup + steps))
        for n in range(sessions)
    )


class ThreadSampler:
    """Samples the threads that are not the driver's while a run goes on; keeps the maximum."""

    def __init__(self, exclude: set[threading.Thread]) -> None:
        self.exclude = exclude
        self.peak = 0
        self.names: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)
        self.exclude.add(self._thread)

    def sample(self) -> None:
        """Count the host's threads now."""
        mine = [t for t in threading.enumerate() if t not in self.exclude]
        if len(mine) > self.peak:
            self.peak, self.names = len(mine), sorted(t.name for t in mine)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.sample()

    def __enter__(self) -> ThreadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sample()
        self._stop.set()
        self._thread.join()


@contextmanager
def new_host(durability: str, sessions: int, config: Config | None = None) -> Iterator[Host]:
    """A host on a fresh LMDB folder that keeps every session of the run in memory (Config: the
    run's, :data:`LOOP_CONFIG`, unless given)."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        Host.open(
            Path(tmp) / "db",
            config=config or LOOP_CONFIG[0],
            options=HostOptions(
                durability=durability,  # type: ignore[arg-type]
                max_active_sessions=MAX_ACTIVE[0] or max(1024, sessions),
                summary_processes=SUMMARY_PROCESSES[0],
            ),
        ) as host,
    ):
        yield host


def summaries(records: Sequence[RecordedEvent]) -> tuple[int, list[tuple[float, float]]]:
    """The compactions a session started (``CompactionStarted``, foreground and background, in
    its ``records``), and when each summary of it was being made: from the commit of its
    ``CompactionStarted`` to that of the event that ended it (``SummaryPrepared``,
    ``CheckpointCreated`` or ``CompactionFailed`` with its ``compaction_id``), Unix time."""
    started: dict[str, float] = {}
    count = 0
    windows: list[tuple[float, float]] = []
    for record in records:
        event = record.event
        if type(event) is CompactionStarted:
            started[event.compaction_id] = record.timestamp
            count += 1
        elif type(event) in (SummaryPrepared, CheckpointCreated, CompactionFailed):
            begun = started.pop(event.compaction_id, None)  # type: ignore[attr-defined]
            if begun is not None:
                windows.append((begun, record.timestamp))
    return count, windows


def forced_waits(
    records: Sequence[RecordedEvent], steps: Sequence[tuple[float, float]]
) -> list[float]:
    """For each step (its start and end, Unix time), the least time its summaries kept it, in
    seconds: what no scheduling of the host could have saved it, given the summariser's speed.

    A step whose batch activates a background summary recorded in that same batch (the
    ``SummaryPrepared`` and the ``CheckpointCreated`` that activates it committed together,
    during the step: the step awaited the summary, or it was ready and held for the session's
    next batch) waited at least until that summary could have been ready: the commit of its
    ``CompactionStarted`` plus the summariser's own time (``summary_seconds``), less the step's
    start (0 when that is before the step began). A step that summarised in the foreground
    (``CheckpointCreated`` not prepared, committed during it) waited at least the summariser's
    own time. Any other step: 0. What a step took beyond this is the host's (the answer's
    hand-off, the activation, the commit).
    """
    started: dict[str, float] = {}
    ready: dict[float, float] = {}  # commit time of a SummaryPrepared -> ready at the soonest
    foreground: list[tuple[float, float]] = []  # (commit time, the summariser's own time)
    awaited: list[tuple[float, float]] = []  # (commit time, ready at the soonest)
    for record in records:
        event = record.event
        kind = type(event)
        if kind is CompactionStarted:
            started[event.compaction_id] = record.timestamp
        elif kind is SummaryPrepared:
            begun = started.get(event.compaction_id)
            if begun is not None:
                ready[record.timestamp] = begun + event.summary_seconds
        elif kind is CheckpointCreated:
            if not event.prepared:
                foreground.append((record.timestamp, event.checkpoint.summary_seconds))
            elif record.timestamp in ready:  # in one batch with its SummaryPrepared: awaited
                awaited.append((record.timestamp, ready[record.timestamp]))
    forced = []
    for start, end in steps:
        wait = 0.0
        for committed, seconds in foreground:
            if start <= committed <= end:
                wait = max(wait, seconds)
        for committed, ready_at in awaited:
            if start <= committed <= end:
                wait = max(wait, ready_at - start)
        forced.append(wait)
    return forced


def steps_during_summaries(
    host: Host, spans: list[list[tuple[float, float]]]
) -> tuple[int, list[list[bool]], list[list[float]]]:
    """For the sessions ``agent-0`` … of a closed loop: the compactions they started, for each
    of their steps (``spans[n]``: start and end, Unix time) whether a summary of its session was
    being made meanwhile (see :func:`during_summaries`), and the least its summaries kept it
    (:func:`forced_waits`)."""
    count = 0
    during: list[list[bool]] = []
    forced: list[list[float]] = []
    for index, steps in enumerate(spans):
        records = list(host.log.read(f"agent-{index}"))
        started, windows = summaries(records)
        count += started
        during.append(during_summaries(steps, windows))
        forced.append(forced_waits(records, steps))
    return count, during, forced


def during_summaries(
    steps: Sequence[tuple[float, float]], windows: Sequence[tuple[float, float]]
) -> list[bool]:
    """For each step (its start and end, Unix time), whether a summary of its session was
    being made meanwhile (on a compaction thread of the host, in its worker process, or
    awaited by the step itself)."""
    return [any(begun < end and start < ended for begun, ended in windows) for start, end in steps]


# --- 1. closed loop ----------------------------------------------------------------------------


def closed_threads(sessions: int, steps: int, durability: str) -> dict[str, Any]:
    """One thread per session, sync calls, back to back."""
    work = workloads(sessions, steps, warmup=2)
    before = set(threading.enumerate())
    with new_host(durability, sessions) as host:
        latencies: list[list[float]] = [[] for _ in range(sessions)]
        spans: list[list[tuple[float, float]]] = [[] for _ in range(sessions)]
        barrier = threading.Barrier(sessions + 1)

        def drive(index: int) -> None:
            session = host.session(f"agent-{index}")
            for step in work[index][:2]:  # activation and the first steps are not timed
                do_step(session, step)
            barrier.wait()
            own, when = latencies[index], spans[index]
            for step in work[index][2:]:
                wall = time.time()
                started = time.perf_counter()
                do_step(session, step)
                took = time.perf_counter() - started
                own.append(took)
                when.append((wall, wall + took))

        workers = [threading.Thread(target=drive, args=(n,)) for n in range(sessions)]
        with ThreadSampler(before | set(workers)) as sampler:
            for worker in workers:
                worker.start()
            barrier.wait()
            began = time.perf_counter()
            for worker in workers:
                worker.join()
            elapsed = time.perf_counter() - began
        started, during, forced = steps_during_summaries(host, spans)
    return _closed_row("threads", sessions, latencies, elapsed, sampler, started, during, forced)


def closed_asyncio(sessions: int, steps: int, durability: str) -> dict[str, Any]:
    """One event loop, the native async twins, every session back to back."""
    work = workloads(sessions, steps, warmup=2)
    before = set(threading.enumerate())
    with new_host(durability, sessions) as host:
        latencies: list[list[float]] = [[] for _ in range(sessions)]
        spans: list[list[tuple[float, float]]] = [[] for _ in range(sessions)]

        async def main() -> float:
            handles = [await host.asession(f"agent-{n}") for n in range(sessions)]

            async def warm(index: int) -> None:
                for step in work[index][:2]:
                    await ado_step(handles[index], step)

            await asyncio.gather(*(warm(n) for n in range(sessions)))

            async def drive(index: int) -> None:
                session, own, when = handles[index], latencies[index], spans[index]
                for step in work[index][2:]:
                    wall = time.time()
                    started = time.perf_counter()
                    await ado_step(session, step)
                    took = time.perf_counter() - started
                    own.append(took)
                    when.append((wall, wall + took))

            began = time.perf_counter()
            await asyncio.gather(*(drive(n) for n in range(sessions)))
            return time.perf_counter() - began

        with ThreadSampler(before) as sampler:
            elapsed = asyncio.run(main())
        started, during, forced = steps_during_summaries(host, spans)
    return _closed_row("asyncio", sessions, latencies, elapsed, sampler, started, during, forced)


def _closed_row(
    driver: str,
    sessions: int,
    latencies: list[list[float]],
    elapsed: float,
    sampler: ThreadSampler,
    compactions: int,
    during: list[list[bool]],
    forced: list[list[float]],
) -> dict[str, Any]:
    """The row of a closed loop; ``during`` says of each step whether a summary of its session
    was being made meanwhile (:func:`during_summaries`): a summary is Python on the CPU (in the
    worker process, or on a compaction thread of the host, taking the GIL from the steps, while
    the worker starts) or awaited by a step. The p99 of the other steps is reported beside, and
    the p99 of what the summaries forced on each step (:func:`forced_waits`): the part of the
    p99 the host's own work could not have saved at the summariser's speed."""
    flat = sorted(lat for per in latencies for lat in per)
    least = sorted(wait for per in forced for wait in per)
    quiet = sorted(lat for per, flags in zip(latencies, during, strict=True)
                   for lat, busy in zip(per, flags, strict=True) if not busy)  # fmt: skip
    return {
        "during_summaries": sum(sum(flags) for flags in during),
        "p99_quiet_ms": percentile(quiet, 0.99) * 1000 if quiet else float("nan"),
        "forced_p99_ms": percentile(least, 0.99) * 1000 if least else float("nan"),
        "driver": driver,
        "sessions": sessions,
        "steps": len(flat),
        "compactions": compactions,
        "steps_per_s": len(flat) / elapsed,
        "p50_ms": statistics.median(flat) * 1000,
        "p99_ms": percentile(flat, 0.99) * 1000,
        "max_ms": flat[-1] * 1000 if flat else float("nan"),
        "host_threads": sampler.peak,
        "thread_names": sampler.names,
    }


# --- 2. open loop ------------------------------------------------------------------------------


def open_loop(
    sessions: int, seconds: float, durability: str, period: float = 1.0
) -> dict[str, Any]:
    """``sessions`` sessions each stepping once per ``period`` at a random offset."""
    before = set(threading.enumerate())
    with new_host(durability, sessions) as host:
        handles: list[Any] = []
        checkpoints: dict[int, str | None] = {}

        async def setup() -> None:
            handles.extend([await host.asession(f"agent-{n}") for n in range(sessions)])

        async def step(index: int, messages: Sequence[Message]) -> bool:
            view = await ado_step(handles[index], messages)
            new = index in checkpoints and view.checkpoint_id != checkpoints[index]
            checkpoints[index] = view.checkpoint_id
            return new

        with ThreadSampler(before) as sampler:
            row = _drive_open(sessions, seconds, period, setup, step)
    return {
        "durability": durability,
        **row,
        "host_threads": sampler.peak,
        "thread_names": sampler.names,
    }


def open_floor(sessions: int, seconds: float, period: float = 1.0) -> dict[str, Any]:
    """The open loop's floor: the same driver, steps and due times, each step's messages stored
    by :class:`FloorWriter` (raw LMDB, one writer thread, durable group commits) and nothing
    else: no events, checks, views or actors. What any single-writer durable log driven from
    one event loop costs at least on this machine."""
    with tempfile.TemporaryDirectory() as tmp:
        writer = FloorWriter(Path(tmp) / "floor")
        try:

            async def setup() -> None:
                return None

            async def step(index: int, messages: Sequence[Message]) -> bool:
                await writer.store(f"agent-{index}".encode(), messages)
                return False

            row = _drive_open(sessions, seconds, period, setup, step)
        finally:
            writer.close()
    return {
        "durability": "sync (raw LMDB floor)",
        **row,
        "host_threads": 1,
        "thread_names": ["floor-writer"],
    }


#: The open loop driver's selector (``--open-timer``): "select" or "epoll" (asyncio's default).
OPEN_TIMER = ["select"]


def open_loop_runner() -> asyncio.Runner:
    """A runner for the open loop's driver and its timer probe, on ``--open-timer``'s selector."""
    kind = selectors.SelectSelector if OPEN_TIMER[0] == "select" else selectors.EpollSelector
    return asyncio.Runner(loop_factory=lambda: asyncio.SelectorEventLoop(kind()))


def _drive_open(
    sessions: int,
    seconds: float,
    period: float,
    setup: Callable[[], Any],
    step: Callable[[int, Sequence[Message]], Any],
) -> dict[str, Any]:
    """Drive ``step(index, messages)`` (a coroutine: True when the step made a new checkpoint)
    for ``sessions`` agents from one event loop, each once per ``period`` at a random offset,
    after two unmeasured steps each; latency from each step's due time, service from its start."""
    rounds = max(1, round(seconds / period))
    work = workloads(sessions, rounds, warmup=2)
    rng = random.Random(13)
    offsets = [rng.random() * period for _ in range(sessions)]
    # Arrays: a list of 30,000 floats is one more thing each full collection walks.
    due_latency = array("d")
    service = array("d")
    compacted = 0

    async def main() -> tuple[float, float]:
        await setup()

        async def warm(index: int) -> None:
            for messages in work[index][:2]:
                await step(index, messages)

        await asyncio.gather(*(warm(n) for n in range(sessions)))
        loop = asyncio.get_running_loop()
        start = loop.time() + 0.2
        start_wall = time.perf_counter() + 0.2

        async def agent(index: int) -> None:
            nonlocal compacted
            for k, messages in enumerate(work[index][2:]):
                due = start + offsets[index] + k * period
                await asyncio.sleep(max(0.0, due - loop.time()))
                began = loop.time()
                compacted += await step(index, messages)
                ended = loop.time()
                due_latency.append(ended - due)
                service.append(ended - began)

        await asyncio.gather(*(agent(n) for n in range(sessions)))
        return start_wall, time.perf_counter()

    with open_loop_runner() as runner:
        start_wall, end_wall = runner.run(main())
    due_sorted, service_sorted = sorted(due_latency), sorted(service)
    elapsed = end_wall - start_wall
    return {
        "sessions": sessions,
        "offered_per_s": sessions / period,
        "new_checkpoints": compacted,
        "steps": len(due_sorted),
        "seconds": elapsed,
        "achieved_per_s": len(due_sorted) / elapsed,
        "p50_ms": statistics.median(due_sorted) * 1000,
        "p99_ms": percentile(due_sorted, 0.99) * 1000,
        "max_ms": due_sorted[-1] * 1000,
        "service_p50_ms": statistics.median(service_sorted) * 1000,
        "service_p99_ms": percentile(service_sorted, 0.99) * 1000,
    }


class FloorWriter:
    """Raw LMDB owned by one writer thread; tasks on event loops hand it a step's messages and
    await their group's durable commit (``sync`` and ``metasync``, as ctxledger's ``sync``).

    Per step: one hand-off to the writer, one durable commit shared by whatever was queued
    meanwhile, one ``call_soon_threadsafe`` back per group; per step a put keyed by
    (conversation, seq) and one in a global position index, as ctxledger's layout (the
    floor of ``bench/peers.py``'s ``lmdb-writer``, for the open loop)."""

    def __init__(self, directory: Path) -> None:
        import lmdb
        import msgspec

        directory.mkdir(parents=True)
        self._env = lmdb.open(str(directory), map_size=4 << 30, sync=True, metasync=True)
        self._encode = msgspec.json.encode
        self._seqs: dict[bytes, int] = {}
        self._position = 0
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="floor-writer", daemon=True)
        self._thread.start()

    async def store(self, conv: bytes, messages: Sequence[Message]) -> None:
        future = asyncio.get_running_loop().create_future()
        self._queue.put((conv, self._encode(list(messages)), future))
        await future

    def _run(self) -> None:
        while True:
            group = [self._queue.get()]
            while True:
                try:
                    group.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            items = [item for item in group if item is not None]
            if items:
                self._commit(items)
            if None in group:
                return

    def _commit(self, items: list[tuple[bytes, bytes, Any]]) -> None:
        with self._env.begin(write=True) as txn:
            for conv, value, _ in items:
                seq = self._seqs[conv] = self._seqs.get(conv, 0) + 1
                self._position += 1
                key = conv + b"\x00" + seq.to_bytes(8, "big")
                txn.put(key, value)
                txn.put(b"\x01" + self._position.to_bytes(8, "big"), key, append=True)
        by_loop: dict[Any, list[Any]] = {}
        for _, _, future in items:
            by_loop.setdefault(future.get_loop(), []).append(future)
        for loop, futures in by_loop.items():
            loop.call_soon_threadsafe(_resolve_all, futures)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        self._env.close()


def _resolve_all(futures: list[Any]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)


# --- 3. re-open --------------------------------------------------------------------------------


async def _serve_all(host: Host, sessions: int, per_session: list[float]) -> None:
    async def serve(index: int) -> None:
        started = time.perf_counter()
        session = await host.asession(f"s{index}")
        await session.abuild_model_view()
        per_session.append(time.perf_counter() - started)

    await asyncio.gather(*(serve(n) for n in range(sessions)))


def reopen(sessions: int, messages: int) -> list[dict[str, Any]]:
    """Fill a host with ``sessions`` x ``messages``, then re-open it and serve a view of each:
    one session after the other from one thread, then (re-opened again) all at once from one
    event loop with ``asession`` / ``abuild_model_view``. The sessions use
    :data:`REOPEN_CONFIG`, so each view is the whole (masked) history, never compacted."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "db"
        with Host.open(
            path,
            config=REOPEN_CONFIG,
            options=HostOptions(durability="none", max_active_sessions=16),
        ) as host:
            for index in range(sessions):
                session = host.session(f"s{index}")
                session.append_many(take_messages(seed=index, count=messages))
                session.build_model_view()
        for driver in ("sequential", "asyncio"):
            before = set(threading.enumerate())
            began = time.perf_counter()
            with Host.open(path, config=REOPEN_CONFIG) as host:
                opened = time.perf_counter()
                per_session: list[float] = []
                if driver == "sequential":
                    for index in range(sessions):
                        started = time.perf_counter()
                        host.session(f"s{index}").build_model_view()
                        per_session.append(time.perf_counter() - started)
                else:
                    asyncio.run(_serve_all(host, sessions, per_session))
                recovered = time.perf_counter()
                threads = len([t for t in threading.enumerate() if t not in before])
            ordered = sorted(per_session)
            rows.append(
                {
                    "driver": driver,
                    "sessions": sessions,
                    "messages_each": messages,
                    "open_ms": (opened - began) * 1000,
                    "open_and_serve_all_s": recovered - began,
                    "per_session_ms": (recovered - opened) / sessions * 1000,
                    "p50_ms": statistics.median(ordered) * 1000,
                    "p99_ms": percentile(ordered, 0.99) * 1000,
                    "host_threads": threads,
                }
            )
    return rows


# --- 4. CPU per step ---------------------------------------------------------------------------


def cpu_per_step(durability: str, sessions: int, steps: int) -> dict[str, Any]:
    """Process CPU time per step (append of one agent step + prepare_step), no compaction.

    ``sessions`` sessions (the runs' window, 32,000 tokens, with the prepare point of
    :data:`CPU_CONFIG`) each take their first ``steps`` steps one after the other, from one
    thread: short enough that none compacts or starts a background summary.
    """
    work = workloads(sessions, steps, warmup=0)
    with new_host(durability, sessions, CPU_CONFIG) as host:
        handles = [host.session(f"cpu-{n}") for n in range(sessions)]
        do_step(handles[0], work[0][0])  # the journal and its first transaction
        cpu, wall = time.process_time(), time.perf_counter()
        for n, session in enumerate(handles):
            for step in work[n][1 if n == 0 else 0 :]:
                do_step(session, step)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        compactions = sum(
            type(record.event) is CompactionStarted
            for n in range(sessions)
            for record in host.log.read(f"cpu-{n}")
        )
        done = sessions * steps - 1
    if compactions:
        raise RuntimeError(f"the CPU run compacted {compactions} times; take fewer steps")
    return {
        "durability": durability,
        "view": f"first {steps} steps",
        "steps": done,
        "cpu_us_per_step": cpu / done * 1e6,
        "wall_us_per_step": wall / done * 1e6,
    }


def cpu_by_view_size(durability: str, marks: tuple[int, ...], span: int) -> list[dict[str, Any]]:
    """CPU per step of one session as its view grows (a window it never fills: no compaction).

    A step serves (and hashes) the whole view, so its cost grows with the view's size: each row
    is the mean over ``span`` steps starting at the given step.
    """
    work = list(iter_agent_steps(seed=7, steps=max(marks) + span))
    rows = []
    with new_host(durability, 1, NO_COMPACTION) as host:
        session = host.session("cpu")
        done = 0
        for mark in marks:
            for step in work[done:mark]:
                do_step(session, step)
            cpu, wall = time.process_time(), time.perf_counter()
            for step in work[mark : mark + span]:
                view = do_step(session, step)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            done = mark + span
            rows.append(
                {
                    "durability": durability,
                    "view": f"steps {mark}-{done}, ~{view.estimated_tokens:,} tokens",
                    "steps": span,
                    "cpu_us_per_step": cpu / span * 1e6,
                    "wall_us_per_step": wall / span * 1e6,
                }
            )
    return rows


def fsync_probe(count: int = 300) -> dict[str, Any]:
    """The disk's floor: p50 / p99 of appending 200 bytes to a file and fsync-ing it."""
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        fd = os.open(Path(tmp) / "probe", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for _ in range(count):
                started = time.perf_counter()
                os.write(fd, b"x" * 200)
                os.fsync(fd)
                times.append(time.perf_counter() - started)
        finally:
            os.close(fd)
    times.sort()
    return {"p50_ms": statistics.median(times) * 1000, "p99_ms": percentile(times, 0.99) * 1000}


def timer_probe(count: int = 1000) -> dict[str, Any]:
    """The open loop's own floor: how late an idle asyncio loop wakes a task from
    ``asyncio.sleep`` to a due time (p50 / p99 ms), with due times spread as the open loop's.

    The open loop's latency is measured from each step's due time, so it includes the driver's
    wake-up (on ``--open-timer``'s selector: ``epoll`` rounds its timeout up to whole
    milliseconds, so even an idle loop wakes ~0.5 ms late at the median). Taken before the run,
    in the same process.
    """

    async def sample() -> list[float]:
        loop = asyncio.get_running_loop()
        rng = random.Random(5)
        late = []
        for _ in range(count):
            due = loop.time() + rng.random() * 0.003
            await asyncio.sleep(max(0.0, due - loop.time()))
            late.append(loop.time() - due)
        return late

    with open_loop_runner() as runner:
        late = sorted(runner.run(sample()))
    return {"p50_ms": statistics.median(late) * 1000, "p99_ms": percentile(late, 0.99) * 1000}


# --- report ------------------------------------------------------------------------------------


def _print_rows(title: str, rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> None:
    print(f"\n{title}")
    print("| " + " | ".join(label for label, _ in columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        cells = []
        for _, key in columns:
            value = row[key]
            if isinstance(value, float):
                cells.append(f"{value:,.2f}")
            elif isinstance(value, int):
                cells.append(f"{value:,}")
            else:
                cells.append(str(value))
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--durability", default="sync", choices=["sync", "group", "none"])
    parser.add_argument("--drivers", default="threads,asyncio", help="closed-loop drivers")
    parser.add_argument("--open-seconds", type=float, default=None, help="open-loop duration")
    parser.add_argument(
        "--open-sessions", default=None, help="open-loop sizes, comma-separated (1024)"
    )
    parser.add_argument(
        "--open-durability", default=None, help="open-loop durabilities (--durability)"
    )
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    parser.add_argument("--sizes", default=None, help="closed-loop sizes (1,16,128,1024)")
    parser.add_argument(
        "--max-active", type=int, default=0, help="HostOptions(max_active_sessions=...) of the runs"
    )
    parser.add_argument("--skip", default="", help="parts to skip, comma-separated: reopen,cpu")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="closed loops run this many times each, on fresh hosts (the medians are printed)",
    )
    parser.add_argument(
        "--open-floor",
        action="store_true",
        help="also run the open loop's driver against a raw LMDB writer (its floor)",
    )
    parser.add_argument(
        "--summary-processes",
        type=int,
        default=None,
        help="HostOptions(summary_processes=...) of the runs (default: the host's default)",
    )
    parser.add_argument(
        "--open-timer",
        default="select",
        choices=["select", "epoll"],
        help="the open loop driver's selector (epoll: asyncio's default, ms timeouts)",
    )
    parser.add_argument(
        "--fact-index-chars",
        type=int,
        default=None,
        help="the loops' Config with this fact_index_chars (0: no fact block; default: Config's)",
    )
    parser.add_argument(
        "--api",
        default="step",
        choices=["step", "pair"],
        help="a step as Session.step(messages) (one commit) or append_many + prepare_step",
    )
    args = parser.parse_args()
    API[0] = args.api
    if args.fact_index_chars is not None:
        LOOP_CONFIG[0] = CONFIG.replace(fact_index_chars=args.fact_index_chars)
    OPEN_TIMER[0] = args.open_timer
    durability = args.durability
    args.open_sessions = args.open_sessions or ("128" if args.quick else "1024")
    args.open_durability = args.open_durability or durability
    MAX_ACTIVE[0] = args.max_active
    SUMMARY_PROCESSES[0] = args.summary_processes
    sizes = (1, 16, 128) if args.quick else (1, 16, 128, 1024)
    if args.sizes:
        sizes = tuple(int(n) for n in args.sizes.split(","))
    # Steps per session: enough for a few seconds per size, fewer per session as sizes grow.
    per_session = {1: 300, 16: 60, 128: 20, 1024: 4}
    if args.quick:
        per_session = {1: 40, 16: 10, 128: 4}
    results: dict[str, Any] = {
        "durability": durability,
        "fact_index_chars": LOOP_CONFIG[0].fact_index_chars,
        "api": args.api,
        "open_timer": args.open_timer,
        "closed": [],
        "open": None,
    }
    runners: dict[str, Callable[[int, int, str], dict[str, Any]]] = {
        "threads": closed_threads,
        "asyncio": closed_asyncio,
    }
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    for sessions in sizes:
        for driver in args.drivers.split(","):
            rows = []
            for _ in range(args.repeat):
                row = runners[driver](sessions, per_session.get(sessions, 4), durability)
                rows.append(row)
                results["closed"].append(row)
                print(
                    f"closed {driver:>7} {sessions:>5} sessions: {row['steps_per_s']:,.0f} "
                    f"steps/s p50 {row['p50_ms']:.2f} ms p99 {row['p99_ms']:.2f} ms "
                    f"(summaries forced {row['forced_p99_ms']:.2f}) threads {row['host_threads']}",
                    flush=True,
                )
            if len(rows) > 1:
                # One run's p99 is its fourth slowest step of 300 (one session): the medians of
                # several runs say more than any one of them.
                print(
                    f"closed {driver:>7} {sessions:>5} sessions, median of {len(rows)} runs: "
                    f"{statistics.median(r['steps_per_s'] for r in rows):,.0f} steps/s, p99 "
                    f"{statistics.median(r['p99_ms'] for r in rows):.2f} ms (runs: "
                    + ", ".join(f"{r['p99_ms']:.2f}" for r in rows)
                    + "), of it forced by the summaries "
                    + f"{statistics.median(r['forced_p99_ms'] for r in rows):.2f} ms (runs: "
                    + ", ".join(f"{r['forced_p99_ms']:.2f}" for r in rows)
                    + ")",
                    flush=True,
                )
    seconds = args.open_seconds or (5.0 if args.quick else 30.0)
    results["open"] = []
    for sessions in [int(n) for n in args.open_sessions.split(",")]:
        for mode in args.open_durability.split(","):
            before = fsync_probe()
            lateness = timer_probe()
            row = open_loop(sessions, seconds, mode)
            after = fsync_probe()
            row["fsync_p50_ms"] = statistics.median([before["p50_ms"], after["p50_ms"]])
            row["fsync_p99_ms"] = max(before["p99_ms"], after["p99_ms"])
            row["fsync"] = f"{row['fsync_p50_ms']:.2f} / {row['fsync_p99_ms']:.2f}"
            row["timer_p50_ms"], row["timer_p99_ms"] = lateness["p50_ms"], lateness["p99_ms"]
            row["timer"] = f"{lateness['p50_ms']:.2f} / {lateness['p99_ms']:.2f}"
            results["open"].append(row)
            print(
                f"open loop {sessions} sessions, {mode}: achieved {row['achieved_per_s']:,.0f}/s "
                f"of {row['offered_per_s']:,.0f}/s, p50 {row['p50_ms']:.2f} ms p99 "
                f"{row['p99_ms']:.2f} ms threads {row['host_threads']}",
                flush=True,
            )
        if args.open_floor:
            lateness = timer_probe()
            row = open_floor(sessions, seconds)
            row["fsync"] = "—"
            row["timer"] = f"{lateness['p50_ms']:.2f} / {lateness['p99_ms']:.2f}"
            results["open"].append(row)
            print(
                f"open loop {sessions} sessions, raw LMDB floor: p50 {row['p50_ms']:.2f} ms "
                f"p99 {row['p99_ms']:.2f} ms (service p50 {row['service_p50_ms']:.2f} ms)",
                flush=True,
            )
    count, size = (100, 50) if args.quick else (1000, 200)
    results["reopen"] = [] if "reopen" in args.skip else reopen(count, size)
    for row in results["reopen"]:
        print(f"re-open, {row['driver']}: {row['per_session_ms']:.2f} ms/session", flush=True)
    cpu_sessions = 20 if args.quick else 100
    marks = (0, 100) if args.quick else (0, 200, 400, 800)
    results["cpu"] = []
    if "cpu" not in args.skip:
        results["cpu"] = [cpu_per_step(mode, cpu_sessions, 20) for mode in ("none", "sync")]
        results["cpu"] += cpu_by_view_size("none", marks, 50)

    _print_rows(
        f"closed loop (durability {durability})",
        results["closed"],
        [
            ("driver", "driver"),
            ("sessions", "sessions"),
            ("steps", "steps"),
            ("compactions started (warm-up included)", "compactions"),
            ("steps/s", "steps_per_s"),
            ("p50 ms", "p50_ms"),
            ("p99 ms", "p99_ms"),
            ("max ms", "max_ms"),
            ("steps while a summary of their session was made", "during_summaries"),
            ("p99 ms of the other steps", "p99_quiet_ms"),
            ("p99 ms of what summaries forced", "forced_p99_ms"),
            ("host threads", "host_threads"),
        ],
    )
    _print_rows(
        "open loop, one step per session per second at random offsets (asyncio driver)",
        results["open"],
        [
            ("durability", "durability"),
            ("sessions", "sessions"),
            ("offered/s", "offered_per_s"),
            ("achieved/s", "achieved_per_s"),
            ("p50 ms", "p50_ms"),
            ("p99 ms", "p99_ms"),
            ("max ms", "max_ms"),
            ("new checkpoints", "new_checkpoints"),
            ("service p50 ms", "service_p50_ms"),
            ("service p99 ms", "service_p99_ms"),
            ("fsync p50 / p99 ms (disk, around the run)", "fsync"),
            ("idle loop's timer lateness p50 / p99 ms", "timer"),
            ("host threads", "host_threads"),
        ],
    )
    _print_rows(
        "re-open, then the first view of every session (durability sync)",
        results["reopen"],
        [
            ("driver", "driver"),
            ("sessions", "sessions"),
            ("messages each", "messages_each"),
            ("Host.open ms", "open_ms"),
            ("ms/session (total / sessions)", "per_session_ms"),
            ("p50 ms", "p50_ms"),
            ("p99 ms", "p99_ms"),
            ("host threads", "host_threads"),
        ],
    )
    _print_rows(
        f"CPU per step (one agent step, --api {args.api}, no compaction; process_time)",
        results["cpu"],
        [
            ("durability", "durability"),
            ("steps measured", "view"),
            ("steps", "steps"),
            ("CPU µs/step", "cpu_us_per_step"),
            ("wall µs/step", "wall_us_per_step"),
        ],
    )
    rows = results["closed"] + results["open"]
    largest = max(rows, key=lambda row: row["host_threads"])
    print(f"\nhost threads, largest seen: {largest['host_threads']} ({largest['thread_names']})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
