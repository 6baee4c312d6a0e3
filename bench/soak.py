"""Soak: SIGKILL a host at random moments, many times; after each kill nothing acknowledged is lost.

A child process runs a host with 8 sessions (a small window; background compaction on for six
of them, off for two; a summariser that sleeps a random 0-300 ms), one agent thread per
session: a user turn now and then, an assistant tool call, its result (a separate append, so a
kill can leave the call open), a served view, a usage report. After each acknowledged append and
each served view the child writes a line to a side file of its own and fsyncs it. The parent
SIGKILLs the child -- at a random moment, or while a summary it chose is running (one of a
session with background compaction off: a foreground summary; one started while no agent call
of its session was running: a background summary) -- and then checks, before and after opening
a host on the log again:

* every acknowledged append is in the log, at its seq, with its content (a digest);
* every acknowledged view is in the log; event seqs and message seqs are dense;
* recovery answers every tool call the kill left open (and records an interrupted background
  summary as failed);
* the recovered view equals the last view served (or, killed mid-step, the last served view
  rebuilds from the log);
* ``verify`` passes on the whole log.

Kills during a summary are counted from the log itself: a ``CompactionStarted`` (recorded
durably before the summariser is called) with no outcome, foreground or background by its flag.
With ``--postgres`` the log is a PostgreSQL database of a throwaway cluster, and the server
itself is also killed (``pg_ctl -m immediate stop``, then started again) while the child runs.

    .venv/bin/python bench/soak.py --kills 100
    .venv/bin/python bench/soak.py --postgres --kills 100 --server-kills 10

``tests/integration/test_soak.py`` imports :func:`run_soak` and runs 20 kills in ``make test``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import queue
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ctxledger import Config, Host, HostOptions, Message, ToolCall
from ctxledger.errors import CtxLedgerError
from ctxledger.events import (
    CheckpointCreated,
    CheckpointReverted,
    CompactionFailed,
    CompactionStarted,
    ConfigChanged,
    HistoryCleared,
    MessagePinned,
    MessageRetracted,
    SummaryPrepared,
    ToolResultSynthesized,
    ViewServed,
    carried_message,
)
from ctxledger.replay import verify
from ctxledger.replay.loading import fold_session
from ctxledger.storage import RecordedEvent, open_log
from ctxledger.summarizers import SummaryRequest
from ctxledger.testing import digest_summarizer
from ctxledger.testing.processes import child_process, complete_lines, kill

SESSIONS = [f"agent-{n}" for n in range(8)]
FOREGROUND_ONLY = SESSIONS[:2]  # background compaction off: every summary is a foreground one
CONFIG = Config(context_window=3000, compression_threshold=0.6, min_retain_rounds=1)
CONFIG_FOREGROUND = CONFIG.replace(prepare_threshold=0.0)
HOST_ID = "soak-host"  # every child is the same host: it takes its sessions' leases back at once
READY_TIMEOUT = 120.0  # hang guards only: nothing below depends on how fast the child runs
HOLD_TIMEOUT = 180.0
_SAY = threading.Lock()


def say(*words: str) -> None:
    """Print one protocol line of the child, whole: ``print`` writes its words, separators and
    newline one by one, so two threads printing at once (the main thread's ``ready``, a held
    summary's ``held agent-0``) could interleave into ``heldready`` and ``agent-0`` and the
    parent never see a line starting with ``ready`` (it waited 120 s for one, once, beside two
    CPU hogs)."""
    line = " ".join(words) + "\n"
    with _SAY:
        sys.stdout.write(line)
        sys.stdout.flush()
_CHANGES_VIEW = (
    CheckpointCreated,
    CheckpointReverted,
    ConfigChanged,
    HistoryCleared,
    MessagePinned,
    MessageRetracted,
)


def digest(message: Message) -> str:
    """What an acknowledged append is checked by: role, content and tool-call ids."""
    calls = [call.id for call in message.tool_calls]
    text = json.dumps([message.role, message.content, message.tool_call_id, calls])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


# --- the child ------------------------------------------------------------------------------------


class SideFile:
    """The child's record of what it acknowledged: one JSON line each, fsynced before going on."""

    def __init__(self, path: Path) -> None:
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115  (held for the child's life)
        self._lock = threading.Lock()

    def write(self, **entry: Any) -> None:
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()
            os.fsync(self._file.fileno())


class SleepySummarizer:
    """Summarises after a random 0-300 ms; may hold (forever) the first summary of a kind.

    The summary's session is read from its messages (every message names it). A summary of a
    session with background compaction off is a foreground one; one of another session is a
    background one when the log says so (:meth:`_background`).
    """

    def __init__(self, seed: int, hold: str) -> None:
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._hold = hold
        self.log: Any = None  # the host's log, set once it is open

    def _background(self, session: str) -> bool:
        """Whether the compaction this summary serves is a background one: the session's newest
        ``CompactionStarted`` (committed before its summariser is called) says so, whatever the
        session's agent is doing meanwhile (a fact of the log, not of timing)."""
        if self.log is None or not session:
            return False
        high = self.log.last_seq(session)
        for record in reversed(self.log.read(session, max(1, high - 63), high)):
            if isinstance(record.event, CompactionStarted):
                return bool(record.event.background)
        return False

    def __call__(self, request: SummaryRequest) -> str | None:
        session = next(
            (s for m in request.messages for s in SESSIONS if m.content.startswith(f"[{s}]")), ""
        )
        with self._lock:
            delay = self._rng.uniform(0.0, 0.3)
            if self._hold == "bg":
                # Until the background summary to hold comes, summaries take no time: the host
                # prepares one only if it can be ready before the threshold, judged by how long
                # the last summary took against the session's pace (ready_in_time), and a slow
                # one under load could make it never start.
                delay = 0.0
            held = (self._hold == "fg" and session in FOREGROUND_ONLY) or (
                self._hold == "bg" and session not in FOREGROUND_ONLY and self._background(session)
            )
            if held:
                self._hold = ""  # only the first one
        if held:
            say("held", session)
            while True:
                time.sleep(3600)
        time.sleep(delay)
        return digest_summarizer(request)


def agent(
    host: Host,
    session_id: str,
    run: int,
    seed: int,
    side: SideFile,
    pace: tuple[float, float] | None,
) -> None:
    """One session's agent: steps until the process is killed, taking ``pace`` seconds
    (uniform) per model call (``None``: none, flat out)."""
    rng = random.Random(seed)
    config = CONFIG_FOREGROUND if session_id in FOREGROUND_ONLY else CONFIG
    session = host.session(session_id, config=config)
    tag = f"[{session_id}]"
    step = 0
    while True:
        step += 1
        try:
            if step % 4 == 1:
                ask = Message.user(
                    f"{tag} run {run} task {step}: fix tests/test_{step}.py "
                    + "u" * rng.randint(10, 200)
                )
                side.write(k="a", s=session_id, q=session.append(ask), h=digest(ask))
            call = ToolCall(
                f"{session_id}-r{run}-c{step}", "bash", f'{{"cmd": "pytest -x {step}"}}'
            )
            asked = Message.assistant(f"{tag} running step {step}", [call])
            side.write(k="a", s=session_id, q=session.append(asked), h=digest(asked))
            result = Message.tool(
                f"{tag} FAILED test_{step}\n" + "log " * rng.randint(5, 250), call.id, "bash"
            )
            side.write(k="a", s=session_id, q=session.append(result), h=digest(result))
            view = session.prepare_step()
            side.write(k="v", s=session_id, q=view.through_seq, h=view.view_hash)
            if pace is not None:
                # The model call. An agent that steps flat out grows faster than a summary can
                # follow, and the host then prepares none in the background (ready_in_time).
                time.sleep(rng.uniform(*pace))
            if step % 3 == 0:
                session.record_usage(
                    {"prompt_tokens": view.estimated_tokens + 40, "completion_tokens": 12}
                )
        except CtxLedgerError as exc:  # the server is down (PostgreSQL): nothing acknowledged
            say("error", type(exc).__name__)
            time.sleep(0.05)


def child_main(target: str, side_path: str, run: int, seed: int, hold: str) -> None:
    """The host under test; prints ``ready`` once every agent runs."""
    import structlog

    structlog.configure(  # stdout carries the protocol; the library logs go to stderr
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR),
    )
    side = SideFile(Path(side_path))
    summarizer = SleepySummarizer(seed, hold)
    host = Host.open(
        target,
        config=CONFIG,
        summarizer=summarizer,
        options=HostOptions(host_id=HOST_ID),
    )
    summarizer.log = host.log
    # To hold a background summary, its agents go slowly enough that a summary is sure to be
    # ready in time (the host prepares none otherwise, and under load that is a matter of
    # timing): the first one starts one step past the prepare point, whatever the machine does.
    # The foreground agents then pace too: flat out, their summaries keep the summariser pool
    # busy, and under load the background ones wait behind them.
    background_pace = (0.5, 1.0) if hold == "bg" else (0.05, 0.2)
    foreground_pace = (0.05, 0.2) if hold == "bg" else None
    threads = [
        threading.Thread(
            target=agent,
            args=(
                host,
                sid,
                run,
                seed * 100 + n,
                side,
                foreground_pace if sid in FOREGROUND_ONLY else background_pace,
            ),
            daemon=True,
        )
        for n, sid in enumerate(SESSIONS)
    ]
    for thread in threads:
        thread.start()
    say("ready")
    for thread in threads:
        thread.join()


# --- the parent -----------------------------------------------------------------------------------


@dataclass
class SoakReport:
    """The figures of a soak run."""

    backend: str
    kills: int = 0
    random_kills: int = 0
    held_kills: int = 0
    server_kills: int = 0
    foreground_summary_kills: int = 0
    background_summary_kills: int = 0
    mid_step_recoveries: int = 0  # a session with an append after its last served view
    acknowledged_appends: int = 0  # distinct appends the children acknowledged
    appends_checked: int = 0  # each acknowledged append is checked again after every later kill
    views_checked: int = 0
    lost: int = 0
    interrupted_answered: int = 0
    events: int = 0
    verify_passed: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)


class _Lines:
    """The child's stdout, read by a thread into a queue (the child never blocks on it).

    Lines come in the order the child's threads print them: an agent's summary can be held, and
    ``held`` printed, before the main thread prints ``ready``. A line that one wait passes over
    is kept for the next one.
    """

    def __init__(self, stream: Any) -> None:
        self.queue: queue.Queue[str | None] = queue.Queue()
        self.passed: list[str] = []  # lines read while waiting for another prefix
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            if line.endswith("\n"):  # a line torn by SIGKILL says nothing
                self.queue.put(line.strip())
        self.queue.put(None)

    def wait_for(self, prefix: str, timeout: float) -> str:
        for index, line in enumerate(self.passed):
            if line.startswith(prefix):
                del self.passed[index]
                return line
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {prefix!r} line from the child in {timeout} s") from None
            if line is None:
                raise AssertionError(f"the child ended before {prefix!r}")
            if line.startswith(prefix):
                return line
            self.passed.append(line)


def run_soak(
    target: str | Path,
    workdir: Path,
    *,
    kills: int,
    seed: int = 1,
    held_every: int = 5,
    restart_server: Callable[[], None] | None = None,
    stop_server: Callable[[], None] | None = None,
    server_kills: int = 0,
    progress: Callable[[str], None] | None = None,
) -> SoakReport:
    """Kill a child host ``kills`` times on the log at ``target``, checking after each kill.

    Args:
        target: An LMDB folder or a PostgreSQL URI (the log; created by the first child).
        workdir: Where the side files and the children's stderr go.
        kills: Child SIGKILLs.
        seed: Seeds every random choice (where and when to kill, the agents' texts).
        held_every: Every this many kills, two are of a summary held by the child: one in the
            foreground, one in the background (0: only random moments).
        restart_server: Starts the PostgreSQL server again (with ``stop_server``).
        stop_server: Kills the PostgreSQL server (immediate shutdown) while the child runs.
        server_kills: How many of the kills also kill the server, spread evenly.
        progress: Called with a line after each kill.
    """
    rng = random.Random(seed)
    report = SoakReport(backend="postgresql" if str(target).startswith("postgres") else "lmdb")
    started = time.monotonic()
    server_at = (
        {round(k * kills / server_kills) for k in range(server_kills)} if server_kills else set()
    )
    for number in range(kills):
        hold = ""
        if held_every and number % held_every == 1:
            hold = "fg"
        elif held_every and number % held_every == 3:
            hold = "bg"
        side = workdir / f"side-{number:04d}.jsonl"
        with open(workdir / f"child-{number:04d}.err", "w", encoding="utf-8") as errors:
            argv = [
                sys.executable,
                __file__,
                "--child",
                str(target),
                str(side),
                str(number),
                str(seed * 10_000 + number),
                hold,
            ]
            with child_process(argv, stderr=errors) as child:
                lines = _Lines(child.stdout)
                lines.wait_for("ready", READY_TIMEOUT)
                if hold:
                    lines.wait_for("held", HOLD_TIMEOUT)
                    report.held_kills += 1
                else:
                    time.sleep(rng.uniform(0.05, 1.2))  # a random moment
                    report.random_kills += 1
                if number in server_at and stop_server is not None and restart_server is not None:
                    stop_server()  # the database crashes under the running host
                    report.server_kills += 1
                    time.sleep(rng.uniform(0.05, 0.5))
                    restart_server()
                    time.sleep(rng.uniform(0.05, 0.5))  # the host goes on, or keeps failing
                kill(child)
                lines.thread.join(timeout=30)
        report.kills += 1
        _check(target, workdir, report)
        if progress is not None:
            progress(
                f"kill {report.kills}/{kills}: {report.appends_checked:,} appends checked, "
                f"lost {report.lost}, fg/bg summary kills {report.foreground_summary_kills}/"
                f"{report.background_summary_kills}, {time.monotonic() - started:.0f} s"
            )
    report.seconds = time.monotonic() - started
    return report


def _check(target: str | Path, workdir: Path, report: SoakReport) -> None:
    """Every check of the module docstring, after one kill."""
    acked = [
        json.loads(line)
        for path in sorted(workdir.glob("side-*.jsonl"))
        for line in complete_lines(path.read_text(encoding="utf-8"))
    ]
    with open_log(target, readonly=True) as log:
        before = {sid: log.read(sid) for sid in log.sessions()}
    _count_interrupted_summaries(before, report)
    for sid, records in before.items():
        _expect(
            [r.seq for r in records] == list(range(1, len(records) + 1)),
            report,
            f"{sid}: event seq gap",
        )
    messages = {
        sid: {m.seq: m for r in records if (m := carried_message(r.event)) is not None}
        for sid, records in before.items()
    }
    served = {
        sid: {r.event.view_hash for r in records if isinstance(r.event, ViewServed)}
        for sid, records in before.items()
    }
    report.acknowledged_appends = sum(1 for entry in acked if entry["k"] == "a")
    for entry in acked:
        sid, seq, expected = entry["s"], entry["q"], entry["h"]
        if entry["k"] == "a":
            report.appends_checked += 1
            found = messages.get(sid, {}).get(seq)
            if found is None or digest(found) != expected:
                report.lost += 1
                report.failures.append(f"{sid}: acknowledged append {seq} is missing or differs")
        else:
            report.views_checked += 1
            _expect(
                expected in served.get(sid, set()),
                report,
                f"{sid}: acknowledged view {expected[:12]} is not in the log",
            )
    for sid, found in messages.items():
        first = min(found, default=1)
        _expect(
            sorted(found) == list(range(first, first + len(found))),
            report,
            f"{sid}: message seq gap",
        )
    open_calls = {sid: _open_calls(records) for sid, records in before.items()}
    with Host.open(target, options=HostOptions(host_id=HOST_ID)) as host:
        for sid, records in before.items():
            session = host.session(sid)
            history = session.history()  # activation recovers the session
            answered = {m.tool_call_id for m in history if m.role == "tool"}
            calls = {c.id for m in history for c in m.tool_calls}
            _expect(
                calls <= answered, report, f"{sid}: a tool call is left unanswered after recovery"
            )
            after = host.log.read(sid, len(records) + 1)
            synthesized = [r for r in after if isinstance(r.event, ToolResultSynthesized)]
            _expect(
                {r.event.message.tool_call_id for r in synthesized} == open_calls[sid],
                report,
                f"{sid}: recovery answered other calls than the open ones",
            )
            report.interrupted_answered += len(synthesized)
            _check_view(host, sid, records, after, report)
    checked = verify(target)
    report.events = checked.events
    if checked.ok:
        report.verify_passed += 1
    else:
        report.failures.append(f"verify: {checked.mismatches[:3]}")


def _check_view(
    host: Host,
    sid: str,
    records: list[RecordedEvent],
    after: list[RecordedEvent],
    report: SoakReport,
) -> None:
    """The recovered view equals the last one served (killed mid-step: it rebuilds)."""
    views = [r for r in records if isinstance(r.event, ViewServed)]
    if not views:
        return
    last = views[-1]
    assert isinstance(last.event, ViewServed)
    later = [r.event for r in [*records, *after] if r.seq > last.seq]
    if any(
        carried_message(event) is not None or isinstance(event, _CHANGES_VIEW) for event in later
    ):
        if any(carried_message(r.event) is not None for r in records if r.seq > last.seq):
            report.mid_step_recoveries += 1
        state, _ = fold_session(host.log, sid, through_event_seq=last.seq)
        from ctxledger.domain import build_view

        rebuilt = build_view(state, tokenizer=host.tokenizer).view_hash
    else:
        rebuilt = host.session(sid).build_model_view().view_hash
    _expect(
        rebuilt == last.event.view_hash,
        report,
        f"{sid}: the recovered view differs from the last served",
    )


def _open_calls(records: list[RecordedEvent]) -> set[str]:
    calls: set[str] = set()
    for record in records:
        message = carried_message(record.event)
        if message is None:
            continue
        calls.update(call.id for call in message.tool_calls)
        if message.role == "tool":
            calls.discard(message.tool_call_id or "")
    return calls


def _count_interrupted_summaries(
    before: dict[str, list[RecordedEvent]], report: SoakReport
) -> None:
    """A CompactionStarted without an outcome: the kill landed during that summary."""
    foreground = background = False
    for records in before.values():
        started: dict[str, bool] = {}
        for record in records:
            event = record.event
            if isinstance(event, CompactionStarted):
                started[event.compaction_id] = event.background
            elif isinstance(event, CheckpointCreated | SummaryPrepared | CompactionFailed):
                started.pop(event.compaction_id, None)
        foreground |= any(not flag for flag in started.values())
        background |= any(started.values())
    report.foreground_summary_kills += foreground
    report.background_summary_kills += background


def _expect(condition: bool, report: SoakReport, failure: str) -> None:
    if not condition:
        report.failures.append(failure)


# --- command line ---------------------------------------------------------------------------------


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        target, side, run, seed = sys.argv[2:6]
        hold = sys.argv[6] if len(sys.argv) > 6 else ""
        child_main(target, side, int(run), int(seed), hold)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--postgres", action="store_true", help="a PostgreSQL log (throwaway cluster)"
    )
    parser.add_argument("--server-kills", type=int, default=10, help="with --postgres")
    parser.add_argument("--out", type=Path, help="write the report as JSON here too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ctxledger-soak-") as folder:
        work = Path(folder)
        if args.postgres:
            from ctxledger.testing.postgres import TemporaryCluster

            with TemporaryCluster() as cluster:
                report = run_soak(
                    cluster.create_database(),
                    work,
                    kills=args.kills,
                    seed=args.seed,
                    stop_server=lambda: cluster.stop("immediate"),
                    restart_server=cluster.start,
                    server_kills=args.server_kills,
                    progress=lambda line: print(line, file=sys.stderr, flush=True),
                )
        else:
            report = run_soak(
                work / "db",
                work,
                kills=args.kills,
                seed=args.seed,
                progress=lambda line: print(line, file=sys.stderr, flush=True),
            )
    print(_table(report))
    if args.out is not None:
        args.out.write_text(json.dumps(asdict(report), indent=1) + "\n", encoding="utf-8")
    if report.failures or report.lost:
        print("\n".join(report.failures[:20]), file=sys.stderr)
        raise SystemExit(1)


def _table(report: SoakReport) -> str:
    rows = [
        ("backend", report.backend),
        (
            "SIGKILLs of the host",
            f"{report.kills} ({report.random_kills} at random moments, "
            f"{report.held_kills} during a held summary)",
        ),
        ("... during a foreground summary", str(report.foreground_summary_kills)),
        ("... during a background summary", str(report.background_summary_kills)),
        (
            "sessions recovered mid-step (append after the last view)",
            str(report.mid_step_recoveries),
        ),
        ("server kills (immediate shutdown)", str(report.server_kills)),
        ("acknowledged appends", f"{report.acknowledged_appends:,}"),
        ("... checked (each after every later kill)", f"{report.appends_checked:,}"),
        ("acknowledged views checked", f"{report.views_checked:,}"),
        ("lost", str(report.lost)),
        ("interrupted tool calls answered", f"{report.interrupted_answered:,}"),
        ("verify passed", f"{report.verify_passed} of {report.kills}"),
        ("events in the log at the end", f"{report.events:,}"),
        ("failures", str(len(report.failures))),
        ("time", f"{report.seconds:.0f} s"),
    ]
    return "\n".join(
        ["| soak | |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)]
    )


if __name__ == "__main__":
    main()
