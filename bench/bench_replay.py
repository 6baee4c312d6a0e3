"""Replay benchmark (issue 5): full replay, ``view_at`` with and without snapshots, ``verify``.

The logs are written the way a host writes them, without the actors: a
:class:`~ctxledger.testing.DomainSession` runs the host's step (append the step's messages from
``ctxledger.tooling.workload``, compact if needed with the offline digest summariser, serve the
view, report the provider's usage: the view's characters / 3 plus 1,500 tokens of tool schemas)
and its events go to an :class:`~ctxledger.storage.LmdbEventLog` (durability ``"none"``) in
batches of a few thousand. Per agent step that is ~2.25 messages, a served view, a usage report
with its calibration step (``TokenizerCalibrated``, since issue 17) and, at one step in 6.5, a
compaction (two events): ~5.6 events. Every view fits the 16,000-token window (the two-mark
policy refuses one that does not). Tool-call ids are renumbered so that every call in the
session is unique.

The logs are written by a child process and replayed in a fresh one, as after a restart
(``--same-process`` replays in the writing process instead, as session 1 did: its heap, having
just built a million events, makes the same replay ~10 % slower). Measured (each figure the
median of ``--repeat`` runs):

1. Full replay of the big session (default 1,000,000 events): ``fold_session(...,
   use_snapshots=False)``, i.e. LMDB reads, CRC check, zstd where compressed, msgpack decode and
   the fold. Also the first of those runs alone (cold: it pays the first-touch page faults of
   the history the fold keeps), decode alone (``iter_events``) and the fold alone (over
   decoded events).
2. ``view_at`` at random seqs, with snapshots and without (folding from the first event), in a
   small (10,000-event) and the big session; the ratio big/small with snapshots is the figure
   the issue asks for (1.0 would mean independent of the session's length).
3. ``verify`` of the big session: events per second (it rebuilds every served view).

Snapshots. A snapshot is the folded state (``SessionState.to_snapshot``, version 3) without its
full history chunks, earlier checkpoints and index entries before the active checkpoint (all
read back from the log when touched): the last partial chunk of at most 255 messages, the active
checkpoint, the indices after it, and a 4-byte hash per older tool-call id. The small session
gets one every ``snapshot_interval`` (1000) events, as a host writes them. Writing one every 1000
events into a 1M-event session would need about ``1000 x (mean snapshot size)`` of disk (printed
as "projected"), so the big session instead gets one every ``--coarse`` events plus, for each
sampled ``view_at`` seq, the snapshot a host with interval 1000 would have written just before it
(so its ``view_at`` reads what it would read under the default interval).

Usage::

    .venv/bin/python bench/bench_replay.py               # 1M events (setup ~1-2 min)
    .venv/bin/python bench/bench_replay.py --quick       # 100k events, 1 repeat
    .venv/bin/python bench/bench_replay.py --retention   # issue 13: snapshot retention at 1M

``--retention`` (issue 13) writes one session with a snapshot every ``snapshot_interval`` events
pruned as a host prunes them (dense within ten intervals of the newest, then one per doubling of
age) and reports the snapshot bytes kept against the event bytes, the recovery time, and
``view_at`` at seqs within the newest 10,000 events and older.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import msgspec

from ctxledger import Config, Host, HostOptions, replay
from ctxledger.domain import CharTokenizer, ModelView, SessionState, build_view
from ctxledger.events import CheckpointCreated
from ctxledger.events.codec import Codec
from ctxledger.messages import Message, ToolCall
from ctxledger.replay.loading import fold_session, snapshots_to_drop, view_span_end
from ctxledger.storage import LmdbEventLog
from ctxledger.testing import DomainSession, digest_summarizer
from ctxledger.tooling.workload import iter_agent_steps

CONFIG = Config(context_window=16_000, min_retain_rounds=2, snapshot_interval=1000)
BATCH = 4096  # events per log append while building
POOL_SEEDS = 4  # conversations in the pool of steps the session cycles through
POOL_STEPS = 5000  # steps per pooled conversation


#: What the provider counts besides the view's messages (tool schemas, framing), in tokens.
PROMPT_OVERHEAD = 1500


def provider_prompt_tokens(view: ModelView) -> int:
    """The prompt tokens a provider reports for ``view``: its messages at three characters a
    token (the default estimate's ratio) plus :data:`PROMPT_OVERHEAD`.

    Counted from the messages, not from ``view.estimated_tokens``: that estimate already
    includes the last report, so reporting it plus the overhead would add the overhead again at
    every step, and the calibration fitted to those reports learns one character a token, which
    triples every estimate until the newest step alone no longer fits the window
    (``ContextOverflowError``).
    """
    return CharTokenizer().count_messages(view.messages) + PROMPT_OVERHEAD


def quiet_logs() -> None:
    """The application decides about logging: keep the benchmark's output clean."""


def step_pool() -> list[list[Message]]:
    """Realistic agent steps (``ctxledger.tooling.workload``) from a few seeded conversations."""
    return [step for seed in range(POOL_SEEDS) for step in iter_agent_steps(seed, steps=POOL_STEPS)]


def renumbered(pool: list[list[Message]]) -> Iterator[list[Message]]:
    """Cycle through ``pool`` forever, giving every tool call a session-unique id."""
    counter = 0
    while True:
        for step in pool:
            ids: dict[str, str] = {}
            out = []
            for message in step:
                if message.tool_calls:
                    calls = []
                    for call in message.tool_calls:
                        counter += 1
                        ids[call.id] = f"call_{counter}"
                        calls.append(ToolCall(ids[call.id], call.name, call.arguments))
                    message = msgspec.structs.replace(message, tool_calls=tuple(calls))
                elif message.role == "tool":
                    answered = ids[message.tool_call_id or ""]
                    message = msgspec.structs.replace(message, tool_call_id=answered)
                out.append(message)
            yield out


@dataclass
class Built:
    """What building a session produced."""

    events: int
    messages: int
    seconds: float
    snapshots: dict[int, int] = field(default_factory=dict)  # event seq -> stored bytes
    targets: list[int] = field(default_factory=list)  # message seqs to time view_at at
    snapshot_seconds: float = 0.0
    stored: dict[int, int] = field(default_factory=dict)  # kept snapshot -> framed bytes
    stored_ever: int = 0  # framed bytes of every snapshot written, kept or not
    marks: list[tuple[int, int]] = field(default_factory=list)  # (event seq, message seq)
    steps: int = 0  # agent steps written
    checkpoints: int = 0  # compactions (CheckpointCreated events) written


def build_session(
    log: LmdbEventLog,
    session_id: str,
    events: int,
    pool: list[list[Message]],
    *,
    snapshot_due: Callable[[int, int], bool],
    targets: list[tuple[int, int]] | None = None,
    rng: random.Random,
    samples: int,
    prune: bool = False,
) -> Built:
    """Write a session of about ``events`` events; snapshots where ``snapshot_due(prev, now)``.

    Args:
        targets: ``(snapshot point, offset)`` pairs: a snapshot is forced at the first step that
            crosses the point, and the message seq newest ``offset`` events later becomes a
            ``view_at`` target. Without them, ``samples`` targets are drawn uniformly.
        prune: Keep a bounded set of snapshots the way a host does
            (:func:`~ctxledger.replay.loading.snapshots_to_drop` after each save), and record
            the framed size of each and, per step, the event seq and message seq reached.
    """
    started = time.perf_counter()
    ticks = iter(range(1, 1 << 62))
    session = DomainSession(
        CONFIG,
        summarizer=digest_summarizer,
        session_id=session_id,
        clock=lambda: float(next(ticks)),
    )
    built = Built(events=0, messages=0, seconds=0.0)
    written = 0
    forced = sorted(point for point, _ in targets or [])
    offsets = dict(targets or [])
    waiting: list[int] = []  # event seqs at which to record a target

    def flush() -> None:
        nonlocal written
        if session.events:
            built.checkpoints += sum(type(e) is CheckpointCreated for e in session.events)
            log.append(session_id, session.events, expected_seq=written)
            written += len(session.events)
            session.events.clear()

    steps = renumbered(pool)
    while written + len(session.events) < events:
        before = written + len(session.events)
        session.append_many(next(steps))
        view = session.step()
        built.steps += 1
        session.record_usage(provider_prompt_tokens(view), 400)
        session.views.clear()
        session.results.clear()
        now = written + len(session.events)
        crossed = forced and before < forced[0] <= now
        if crossed or snapshot_due(before, now):
            flush()
            began = time.perf_counter()
            data = session.state.to_snapshot()
            log.save_snapshot(session_id, written, data)
            built.snapshot_seconds += time.perf_counter() - began
            built.snapshots[written] = len(data)
            if prune:
                framed = len(Codec().frame(data))  # as the log frames it: zstd level 1, CRC
                built.stored[written] = framed
                built.stored_ever += framed
                drop = snapshots_to_drop(list(built.stored), CONFIG.snapshot_interval)
                log.delete_snapshots(session_id, drop)
                for seq in drop:
                    del built.stored[seq], built.snapshots[seq]
            if crossed:
                waiting.append(written + offsets[forced.pop(0)])
        if prune:
            built.marks.append((now, session.state.last_seq))
        while waiting and now >= waiting[0]:
            built.targets.append(session.state.last_seq)
            waiting.pop(0)
        if len(session.events) >= BATCH:
            flush()
    flush()
    built.events = written
    built.messages = session.state.last_seq
    if targets is None:
        built.targets = sorted(rng.randint(1, built.messages) for _ in range(samples))
    built.seconds = time.perf_counter() - started
    return built


def timed(action: Callable[[], object], repeat: int) -> float:
    """Median wall time of ``repeat`` runs of ``action``."""
    return statistics.median(times_of(action, repeat))


def times_of(action: Callable[[], object], repeat: int) -> list[float]:
    """Wall time of each of ``repeat`` runs of ``action``, in order."""
    times = []
    for _ in range(repeat):
        gc.collect()
        began = time.perf_counter()
        action()
        times.append(time.perf_counter() - began)
    return times


def view_at_without_snapshots(log: LmdbEventLog, session_id: str, seq: int) -> str:
    """``replay.view_at``, but folding from the first event."""
    owner, end = view_span_end(log, session_id, seq)
    state, _ = fold_session(log, owner, through_event_seq=end, use_snapshots=False)
    return build_view(state, tokenizer=CharTokenizer()).view_hash


def view_at_times(
    log: LmdbEventLog, session_id: str, seqs: list[int], repeat: int
) -> tuple[float, float]:
    """Median ``view_at`` time over ``seqs`` with snapshots and without; checks they agree."""
    with_snapshots, without = [], []
    for seq in seqs:
        fast = replay.view_at(log, session_id, seq).view_hash
        slow = view_at_without_snapshots(log, session_id, seq)
        assert fast == slow, f"view_at({seq}) differs with and without snapshots"
        with_snapshots.append(timed(partial(replay.view_at, log, session_id, seq), repeat))
        without.append(timed(partial(view_at_without_snapshots, log, session_id, seq), repeat))
    return statistics.median(with_snapshots), statistics.median(without)


def folder_bytes(path: Path) -> int:
    """Bytes of the files in ``path``."""
    return sum(entry.stat().st_size for entry in path.iterdir() if entry.is_file())


Rows = list[tuple[str, str]]


def measure_full_replay(log: LmdbEventLog, events: int, repeat: int) -> Rows:
    """Full replay (decode + fold) of the big session, and its parts."""
    # The first run in this fresh process is cold: it also pays the first-touch page faults of
    # the ~1 GB of history the fold keeps, which later runs partly reuse.
    runs = times_of(lambda: fold_session(log, "big", use_snapshots=False), repeat)
    full, cold = statistics.median(runs), runs[0]
    gc.collect()
    gc.disable()  # the fold keeps every message alive: cyclic GC rescans a growing heap
    try:
        no_gc = timed(lambda: fold_session(log, "big", use_snapshots=False), repeat)
    finally:
        gc.enable()
    decode = timed(lambda: sum(1 for _ in log.iter_events("big")), repeat)
    decoded = [record.event for record in log.iter_events("big")]

    def fold_only() -> None:
        state = SessionState.new("big", CONFIG)
        for event in decoded:
            state.apply(event)

    fold = timed(fold_only, repeat)

    def rate(seconds: float) -> str:
        return f"{events / seconds:,.0f}  ({seconds:.2f} s)"

    return [
        ("full replay (decode + fold), events/s", rate(full)),
        ("  its first run in the process (cold), events/s", rate(cold)),
        ("  the same with gc disabled, events/s", rate(no_gc)),
        ("  decode only (iter_events), events/s", rate(decode)),
        ("  fold only (decoded events), events/s", rate(fold)),
    ]


def measure_snapshot(log: LmdbEventLog, built: Built, total: int, repeat: int) -> Rows:
    """The newest snapshot of the big session: size, load, decode, recovery; projected disk."""
    interval = CONFIG.snapshot_interval
    last_seq, encoded = max(built.snapshots.items())
    newest = log.load_snapshot("big")
    assert newest is not None
    data = newest[1]
    stored = len(Codec().frame(data))  # as the log frames it: zstd level 1, CRC
    load = timed(lambda: log.load_snapshot("big"), repeat)
    decode = timed(lambda: SessionState.from_snapshot(data), repeat)
    recover = timed(lambda: fold_session(log, "big"), repeat)
    # A snapshot's size is about a + b * seq (the tail and active checkpoint, plus 4 bytes per
    # older tool-call id): fit it to the snapshots written, then sum one every `interval` events.
    sizes = [(seq, size * stored / encoded) for seq, size in built.snapshots.items()]
    mean_seq = statistics.fmean(seq for seq, _ in sizes)
    mean_size = statistics.fmean(size for _, size in sizes)
    spread = sum((seq - mean_seq) ** 2 for seq, _ in sizes)
    moment = sum((seq - mean_seq) * (size - mean_size) for seq, size in sizes)
    slope = moment / spread if spread else 0.0
    count = total // interval
    projected = sum(
        max(0.0, mean_size + slope * (k * interval - mean_seq)) for k in range(1, count + 1)
    )
    return [
        (
            f"newest snapshot (event {last_seq:,}): encoded / stored",
            f"{encoded / 1e6:,.2f} MB / {stored / 1e6:,.2f} MB",
        ),
        ("  read + checksum + unzstd it", f"{load * 1000:.1f} ms"),
        ("  decode it (from_snapshot)", f"{decode * 1000:.1f} ms"),
        ("  recovery = snapshot + tail", f"{recover * 1000:.1f} ms"),
        (
            f"projected disk, snapshot_interval={interval}, {total:,} events",
            f"{projected / 1e9:,.2f} GB",
        ),
    ]


def measure_view_at(logs: dict[str, LmdbEventLog], built: dict[str, Built], repeat: int) -> Rows:
    """``view_at`` with and without snapshots in both sessions, and the big/small ratio."""
    rows: Rows = []
    times = {}
    for name in ("small", "big"):
        with_snapshots, without = view_at_times(logs[name], name, built[name].targets, repeat)
        times[name] = with_snapshots
        label = f"view_at, {built[name].events:,}-event session"
        rows += [
            (f"{label}, with snapshots", f"{with_snapshots * 1000:.1f} ms"),
            (f"{label}, without", f"{without * 1000:.1f} ms"),
        ]
    rows.append(("view_at with snapshots, big / small", f"{times['big'] / times['small']:.1f}x"))
    return rows


def measure_verify(log: LmdbEventLog, repeat: int) -> Rows:
    """``verify`` of the big session (it must find nothing)."""
    report = replay.verify(log, "big")
    assert report.ok, report.mismatches[:3]
    check = timed(lambda: replay.verify(log, "big"), repeat)
    views, checkpoints = report.views_checked, report.checkpoints_checked
    return [
        (f"verify, events/s ({views:,} views, {checkpoints:,} checkpoints)",
         f"{report.events / check:,.0f}  ({check:.2f} s)"),
    ]  # fmt: skip


def build_all(args: argparse.Namespace, folder: Path) -> dict[str, Built]:
    """Write the small and the big session into ``folder``; return what was built."""
    rng = random.Random(args.seed)
    interval = CONFIG.snapshot_interval
    print(f"building the step pool ({POOL_SEEDS} x {POOL_STEPS} workload steps) ...", flush=True)
    pool = step_pool()
    paths = {name: folder / name for name in ("small", "big")}
    logs = {name: LmdbEventLog.open(path, durability="none") for name, path in paths.items()}
    small = build_session(
        logs["small"], "small", args.small, pool,
        snapshot_due=lambda a, b: b // interval > a // interval, rng=rng, samples=args.samples,
    )  # fmt: skip
    points = rng.sample(range(interval, args.events - interval, interval), args.samples)
    wanted = [(point, rng.randint(20, interval - 50)) for point in sorted(points)]
    print(f"building the big session ({args.events:,} events) ...", flush=True)
    big = build_session(
        logs["big"], "big", args.events, pool,
        snapshot_due=lambda a, b: b // args.coarse > a // args.coarse,
        targets=wanted, rng=rng, samples=args.samples,
    )  # fmt: skip
    for log in logs.values():
        log.close()
    encoded = sum(big.snapshots.values())
    print(
        f"built: small {small.events:,} events / {small.messages:,} messages in "
        f"{small.seconds:.1f} s; big {big.events:,} events / {big.messages:,} messages / "
        f"{big.steps:,} steps / {big.checkpoints:,} compactions in {big.seconds:.1f} s "
        f"(snapshots {big.snapshot_seconds:.1f} s of it); big log on disk "
        f"{folder_bytes(paths['big']) / 1e9:.2f} GB, with {len(big.snapshots)} snapshots "
        f"({encoded / 1e9:.2f} GB before zstd)",
        flush=True,
    )
    return {"small": small, "big": big}


#: Ages (events before the newest) at which ``view_at`` is timed in the retention run.
RECENT_AGES = (0, 1_000, 2_500, 5_000, 7_500, 9_900)
OLDER_AGES = (20_000, 50_000, 100_000, 200_000, 500_000, 900_000)


def retention_run(args: argparse.Namespace, folder: Path) -> Rows:
    """Issue 13: one session of ``--events`` events written with a snapshot every
    ``snapshot_interval`` events pruned as a host prunes them; snapshot disk against event
    disk, recovery, and ``view_at`` in the newest 10,000 events against older seqs."""
    interval = CONFIG.snapshot_interval
    print(f"building the step pool ({POOL_SEEDS} x {POOL_STEPS} workload steps) ...", flush=True)
    pool = step_pool()
    path = folder / "retained"
    log = LmdbEventLog.open(path, durability="none")
    print(f"building a {args.events:,}-event session, snapshots pruned ...", flush=True)
    built = build_session(
        log, "big", args.events, pool,
        snapshot_due=lambda a, b: b // interval > a // interval,
        rng=random.Random(args.seed), samples=0, prune=True,
    )  # fmt: skip
    log.sync()
    stats = log.stats()
    kept = log.snapshot_seqs("big")
    assert kept == sorted(built.stored), (kept, sorted(built.stored))
    snapshot_bytes, event_bytes = sum(built.stored.values()), stats["stored_bytes"]
    print(
        f"built {built.events:,} events / {built.messages:,} messages in {built.seconds:.1f} s",
        flush=True,
    )
    recovery = timed(lambda: fold_session(log, "big"), args.repeat)
    log.close()

    def first_view() -> None:
        with Host.open(path, options=HostOptions(durability="none")) as host:
            host.session("big").build_model_view()

    host_recovery = timed(first_view, args.repeat)
    log = LmdbEventLog.open(path, durability="none")
    events_at = [event for event, _ in built.marks]
    rows: Rows = [
        ("events / messages", f"{built.events:,} / {built.messages:,}"),
        ("event bytes (framed records)", f"{event_bytes / 1e6:,.1f} MB"),
        (
            f"snapshots kept (interval {interval})",
            f"{len(kept)}: {', '.join(f'{seq:,}' for seq in kept)}",
        ),
        (
            "snapshot bytes kept (framed)",
            f"{snapshot_bytes / 1e6:,.2f} MB = {100 * snapshot_bytes / event_bytes:.2f} % of the "
            "event bytes (target <= 20 %)",
        ),
        (
            "snapshot bytes if all were kept (as before)",
            f"{built.stored_ever / 1e6:,.1f} MB = {100 * built.stored_ever / event_bytes:.1f} %",
        ),
        ("newest snapshot (framed)", f"{built.stored[kept[-1]] / 1e6:,.2f} MB"),
        ("LMDB data file", f"{stats['file_bytes'] / 1e6:,.1f} MB"),
        ("recovery = newest snapshot + tail (fold_session)", f"{recovery * 1000:.1f} ms"),
        ("Host.open + first view of the session", f"{host_recovery * 1000:.1f} ms"),
    ]
    for label, ages in (("newest 10,000", RECENT_AGES), ("older", OLDER_AGES)):
        for age in ages:
            if age >= built.events:
                continue
            index = max(0, bisect.bisect_right(events_at, built.events - age) - 1)
            seq = built.marks[index][1]
            _, end = view_span_end(log, "big", seq)
            found = log.load_snapshot("big", end)
            folded = end - (found[0] if found is not None else 0)
            took = timed(partial(replay.view_at, log, "big", seq), args.repeat)
            rows.append(
                (
                    f"view_at, {label}: {age:,} events back (message {seq:,})",
                    f"{took * 1000:7.1f} ms  (folds {folded:,} events after its snapshot)",
                )
            )
    log.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=1_000_000, help="events, big session")
    parser.add_argument("--small", type=int, default=10_000, help="events, small session")
    parser.add_argument("--coarse", type=int, default=100_000, help="big session's snapshots")
    parser.add_argument("--samples", type=int, default=5, help="view_at seqs per session")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where to put the temporary logs")
    parser.add_argument("--quick", action="store_true", help="100k events, 1 repeat")
    parser.add_argument(
        "--same-process",
        action="store_true",
        help="replay in the process that wrote the logs (session 1's method), not a fresh one",
    )
    parser.add_argument(
        "--retention",
        action="store_true",
        help="issue 13 instead: snapshot disk with pruning, recovery, view_at by age",
    )
    parser.add_argument("--build-into", type=Path, help=argparse.SUPPRESS)  # the child's job
    args = parser.parse_args()
    if args.quick:
        args.events, args.coarse, args.repeat, args.samples = 100_000, 25_000, 1, 3
    quiet_logs()
    if args.retention:
        with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-replay-") as tmp:
            rows = retention_run(args, Path(tmp))
        width = max(len(name) for name, _ in rows)
        print(f"\nsnapshot retention: medians of {args.repeat} run(s), {os.cpu_count()} CPUs")
        for name, value in rows:
            print(f"{name:<{width}}  {value}")
        return
    if args.build_into is not None:
        built = build_all(args, args.build_into)
        (args.build_into / "built.msgpack").write_bytes(msgspec.msgpack.encode(built))
        return
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-replay-") as tmp:
        folder = Path(tmp)
        if args.same_process:
            built = build_all(args, folder)
        else:
            # A replay happens after a restart: write the logs in a child process, so that the
            # replays below run in a fresh one (not in a heap that has just built 1M events).
            child = [sys.executable, __file__, "--build-into", str(folder)]
            child += [f"--{name}={getattr(args, name)}" for name in ("events", "small", "coarse")]
            child += [f"--samples={args.samples}", f"--seed={args.seed}"]
            subprocess.run(child, check=True)
            raw = (folder / "built.msgpack").read_bytes()
            built = msgspec.msgpack.decode(raw, type=dict[str, Built])
        logs = {name: LmdbEventLog.open(folder / name, durability="none") for name in built}
        small, big = built["small"], built["big"]
        rows = measure_full_replay(logs["big"], big.events, args.repeat)
        rows += measure_snapshot(logs["big"], big, args.events, args.repeat)
        rows += measure_view_at(logs, {"small": small, "big": big}, args.repeat)
        rows += measure_verify(logs["big"], args.repeat)
        for log in logs.values():
            log.close()
    width = max(len(name) for name, _ in rows)
    where = "the writing process" if args.same_process else "a fresh process"
    print(
        f"\nreplay in {where}: medians of {args.repeat} run(s), {os.cpu_count()} CPUs, warm page "
        "cache; target: full replay >= 200,000 events/s"
    )
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
