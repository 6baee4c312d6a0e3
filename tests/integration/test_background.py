"""Background compaction (DESIGN §2) through a real LMDB host: a summary prepared ahead of need.

* A summariser held by the test: the crossing of ``prepare_threshold`` starts it while the agent
  keeps being served unchanged views; once it is released, reaching the threshold activates the
  prepared summary with no further summariser call.
* SIGKILL of a real process between ``SummaryPrepared`` and the threshold: after recovery the
  prepared summary is still activated without a summariser call, and the log verifies.
* ``prepare_threshold=0`` serves byte-identical views to the code before background compaction
  on the real traces (reference digests from c4f78f5 in tests/data/background_reference.json).
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import pykka
import pytest
from cli_helpers import run

from ctxledger import Config, Host, Message, Session, replay
from ctxledger.actors.messages import Measure, Measured
from ctxledger.errors import StorageError
from ctxledger.events import (
    CheckpointCreated,
    CompactionStarted,
    Event,
    MessageAppended,
    SummaryPrepared,
)
from ctxledger.storage import EventLog, LmdbEventLog
from ctxledger.summarizers import SummaryRequest
from ctxledger.testing import digest_summarizer
from ctxledger.testing.processes import child_process, kill
from guards import call_in_thread

DATA = Path(__file__).resolve().parents[1] / "data"
CHILD = Path(__file__).with_name("background_crash_child.py")

#: Threshold 1,000 tokens (3,000 chars); a summary starts in the background at 850.
CONFIG = Config(
    context_window=2000,
    compression_threshold=0.5,
    min_retain_rounds=1,
    micro_batch=2,
    prepare_threshold=0.85,
)
_WAIT = 60.0  # generous: only a hang reaches it (no timing is asserted)


class HeldSummarizer:
    """Counts its calls; the first one blocks until the test sets :attr:`release`."""

    def __init__(self) -> None:
        self.calls = 0
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, request: SummaryRequest, /) -> str:
        self.calls += 1
        self.started.set()
        if not self.release.wait(_WAIT):
            raise RuntimeError("the test never released the summariser")
        return digest_summarizer(request)


def turn(n: int, chars: int) -> list[Message]:
    """A user turn and the assistant's answer, about ``2 * chars`` characters."""
    return [
        Message.user(f"question {n}: " + "q" * chars),
        Message.assistant(f"answer {n}: " + "a" * chars),
    ]


def _ids() -> Any:
    counter = itertools.count(1)
    return lambda: f"id{next(counter)}"


def events_of(log: EventLog, session_id: str, kind: type) -> list[Any]:
    return [r.event for r in log.read(session_id) if isinstance(r.event, kind)]


def test_a_held_background_summary_is_activated_without_another_call(tmp_path: Path) -> None:
    """Start at the crossing, unchanged views while it runs, activation with zero calls."""
    held = HeldSummarizer()
    with Host.open(tmp_path / "db", config=CONFIG, summarizer=held, id_factory=_ids()) as host:
        session = host.session("a")
        threshold = session.compact_if_needed().threshold
        prepare_at = threshold * CONFIG.prepare_threshold
        view = session.prepare_step()
        n = 0
        while view.estimated_tokens < prepare_at:
            n += 1
            session.append_many(turn(n, 90))  # ~60 tokens a turn
            view = session.prepare_step()
            assert n < 100
        assert view.estimated_tokens < threshold, "one turn must not jump over the threshold"
        # The crossing started the summariser in the background: the agent was not held.
        assert held.started.wait(_WAIT), "no background summary started at the crossing"
        (started,) = events_of(host.log, "a", CompactionStarted)
        assert started.background and started.reason == "threshold_exceeded"
        assert view.checkpoint_id is None
        # While it runs, steps serve the same view, byte for byte, and record no checkpoint.
        for _ in range(3):
            again = session.prepare_step()
            assert again.view_hash == view.view_hash and again.checkpoint_id is None
        assert events_of(host.log, "a", SummaryPrepared) == []
        assert events_of(host.log, "a", CheckpointCreated) == []
        assert held.calls == 1
        held.release.set()
        session.wait_background()
        (prepared,) = events_of(host.log, "a", SummaryPrepared)
        assert prepared.compaction_id == started.compaction_id
        assert prepared.retain_from_seq == started.retain_from_seq
        # A prepared summary changes no view.
        assert session.prepare_step().view_hash == view.view_hash
        calls = held.calls
        result = session.compact_if_needed()
        while not result.compacted:
            n += 1
            session.append_many(turn(n, 20))  # small: the prepared cut absorbs the growth
            result = session.compact_if_needed()
            assert n < 100
        assert result.prepared and result.reason == "compacted", result
        assert result.waited_seconds == 0.0
        assert held.calls == calls, "activating a prepared summary called the summariser"
        (created,) = events_of(host.log, "a", CheckpointCreated)
        assert created.prepared and created.compaction_id == prepared.compaction_id
        assert created.checkpoint.retain_from_seq == prepared.retain_from_seq
        assert result.checkpoint_id == created.checkpoint.id
        after = session.prepare_step()
        assert after.checkpoint_id == created.checkpoint.id
        assert after.estimated_tokens < threshold
    assert replay.verify(tmp_path / "db").ok


class Flush(msgspec.Struct, frozen=True):
    """To :class:`Reorder`: deliver what it holds, then stand aside."""


class Reorder(pykka.ThreadingActor):
    """Stands for the budget actor in front of the real one: holds the first ``Measured`` and
    every message after it until :class:`Flush`, then delivers them in order. A batch the
    history actor publishes before budget's ``Release`` reaches it is then folded by budget
    after the credit was reckoned: the interleaving a busy machine gives now and then."""

    def __init__(self, budget: pykka.ActorRef[Any], measured: threading.Event) -> None:
        super().__init__()
        self._budget = budget
        self._measured = measured
        self._held: list[object] = []
        self._holding = True

    def on_receive(self, message: object) -> None:
        if isinstance(message, Flush):
            held, self._held, self._holding = self._held, [], False
        elif self._holding and (self._held or _reckoned(message)):
            self._held.append(message)
            self._measured.set()
            return
        else:
            held = [message]
        with contextlib.suppress(pykka.ActorDeadError):  # the test stopped it at the end
            for one in held:
                self._budget.tell(one)


def _append_to_the_prepare_point(session: Session, n: int) -> None:
    """Append turns after turn ``n`` until the view served reaches the prepare point (850)."""
    prepare_at = 1000 * CONFIG.prepare_threshold
    while session.prepare_step().estimated_tokens < prepare_at:
        n += 1
        session.append_many(turn(n, 90))
        assert n < 100


def _reckoned(message: object) -> bool:
    """A measure budget reckons a credit on (the session is neither off nor blocked)."""
    if not isinstance(message, Measured):
        return False
    return not message.measurement.off and not message.measurement.blocked_until


def test_a_batch_that_crosses_the_release_is_not_granted_twice(tmp_path: Path) -> None:
    """Budget reckons its credit on the batches it folded; one published meanwhile reaches it
    after. The history actor takes that batch off the credit, so the batches it keeps back
    never carry the session past its prepare point unseen: the summary starts at the crossing
    (before the fix, the credit was granted on that batch too: the crossing went unseen)."""
    held = HeldSummarizer()
    measured = threading.Event()
    with Host.open(tmp_path / "db", config=CONFIG, summarizer=held, id_factory=_ids()) as host:
        budget = host._actors.budget
        real = budget.ref
        budget.ref = reorder = Reorder.start(real, measured)
        try:
            session = host.session("a")
            session.append_many(turn(1, 90))  # measured: too short for a summary yet
            call_in_thread(session.wait_background)  # (a stand-in that failed: no hang)
            session.append_many(turn(2, 90))  # measured again: the credit is reckoned on it
            assert measured.wait(_WAIT), "budget never measured the session"
            session.append_many(turn(3, 90))  # published (no credit yet), held behind it
            reorder.ask(Flush())
            call_in_thread(session.wait_background)  # the Release is in: the credit is granted
            _append_to_the_prepare_point(session, 3)
            assert held.started.wait(_WAIT), "no background summary started at the crossing"
            held.release.set()
            call_in_thread(session.wait_background)  # (a stand-in that failed: no hang)
            (started,) = events_of(host.log, "a", CompactionStarted)
            assert started.background and started.reason == "threshold_exceeded"
            assert len(events_of(host.log, "a", SummaryPrepared)) == 1
        finally:
            held.release.set()
            real.stop()
    assert replay.verify(tmp_path / "db").ok


class Recorder(pykka.ThreadingActor):
    """Stands for the budget actor: keeps every ``Measured`` it is told."""

    def __init__(self) -> None:
        super().__init__()
        self.measured: list[Measured] = []

    def on_receive(self, message: object) -> object:
        if isinstance(message, Measured):
            self.measured.append(message)
        return list(self.measured) if message == "measured" else None


def test_the_extension_is_measured_only_from_the_view_asked(tmp_path: Path) -> None:
    """Budget asks whether a prepared summary's extension is due from the view a step above its
    last look: a measure of a smaller view does not draft the view the summary gives (it
    answers no extension); one at or above it answers whether it is due."""
    with Host.open(tmp_path / "db", config=CONFIG, id_factory=_ids()) as host:
        session = host.session("a")
        session.append_many(turn(1, 90))
        _append_to_the_prepare_point(session, 1)
        session.wait_background()
        assert events_of(host.log, "a", SummaryPrepared), "no summary prepared"
        estimate = session.prepare_step().estimated_tokens
        budget = host._actors.budget
        real = budget.ref
        budget.ref = recorder = Recorder.start()
        try:
            owner = host._actors.router.owner("a")
            owner.tell(Measure("a", extension=True, extension_from=estimate + 1))
            owner.tell(Measure("a", extension=True, extension_from=estimate))
            owner.tell(Measure("a"))
            for _ in range(600):  # no timing asserted: until the three answers are in
                answers = recorder.ask("measured")
                if len(answers) == 3:
                    break
                threading.Event().wait(0.1)
        finally:
            budget.ref = real
            recorder.stop()
    above, at, plain = (answer.measurement for answer in answers)
    assert above.prepared is not None and above.estimate == at.estimate == estimate
    assert above.extension is None
    assert isinstance(at.extension, bool)
    assert plain.extension is None


class FailOnce(LmdbEventLog):
    """A real LMDB log that fails the next batch of appends once :attr:`armed` (a full disk)."""

    armed = False

    def submit(self, session_id: str, events: Sequence[Event], **keywords: Any) -> None:
        if self.armed and any(isinstance(event, MessageAppended) for event in events):
            self.armed = False
            keywords["callback"](None, StorageError("injected: no space left on device"))
            return
        super().submit(session_id, events, **keywords)


def test_appends_kept_back_still_count_after_the_batch_telling_of_them_failed(
    tmp_path: Path,
) -> None:
    """Batches of appends kept back under budget's credit are told by the next batch published.
    If that batch fails, budget never hears of it: the kept-back appends (in the log) ride on
    the next batch instead, and the summary still starts at the crossing."""
    held = HeldSummarizer()
    log = FailOnce.open(tmp_path / "db", durability="none")
    with Host(log, config=CONFIG, summarizer=held, id_factory=_ids()) as host:
        session = host.session("a")
        session.append_many(turn(1, 90))
        session.wait_background()
        session.append_many(turn(2, 90))  # measured: the credit is granted
        session.wait_background()
        router = host._actors.router
        live = router._instances[router.number("a")]._lives["a"]  # idle: nothing changes it
        assert live.credit > 0
        n = 2
        while live.unpublished + 2 * 34 < live.credit:  # kept back (a turn: ~34 tokens each)
            n += 1
            session.append_many(turn(n, 90))
        assert live.unpublished > 0
        log.armed = True  # the turn that tells budget of the kept-back ones fails
        with pytest.raises(StorageError):
            session.append_many(turn(n + 1, 90))
        _append_to_the_prepare_point(session, n + 1)
        assert held.started.wait(_WAIT), "no background summary started at the crossing"
        held.release.set()
        session.wait_background()
    assert replay.verify(tmp_path / "db").ok


def _load_reference_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "make_background_reference", DATA / "make_background_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _count_calls(inner: Any) -> Any:
    def summarize(request: SummaryRequest) -> str | None:
        summarize.calls += 1  # type: ignore[attr-defined]
        return inner(request)  # type: ignore[no-any-return]

    summarize.calls = 0  # type: ignore[attr-defined]
    return summarize


@pytest.mark.slow
def test_a_summary_prepared_before_sigkill_is_activated_after_recovery(tmp_path: Path) -> None:
    """SIGKILL between SummaryPrepared and the threshold: no new summariser call, verify ok."""
    db = tmp_path / "db"
    with child_process([sys.executable, CHILD, db]) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()  # printed once SummaryPrepared is durable
        if not line.startswith("prepared ") or not line.endswith("\n"):
            kill(proc)
            raise AssertionError(f"child: {line!r} {proc.stderr.read()}")
        compaction_id = line.split()[1]
        kill(proc)
    assert proc.returncode == -signal.SIGKILL
    counting = _count_calls(digest_summarizer)
    with Host.open(db, summarizer=counting) as host:
        session = host.session("agent")  # recovery runs on activation
        history = session.history()
        (prepared,) = events_of(host.log, "agent", SummaryPrepared)
        assert prepared.compaction_id == compaction_id
        assert events_of(host.log, "agent", CheckpointCreated) == []
        n = len(history)
        result = session.compact_if_needed()
        while not result.compacted:
            n += 1
            session.append_many(turn(n, 20))
            result = session.compact_if_needed()
            assert n < 400
        assert result.prepared, result
        assert counting.calls == 0, "the prepared summary was summarised again after the crash"
        (created,) = events_of(host.log, "agent", CheckpointCreated)
        assert created.prepared and created.compaction_id == compaction_id
        session.prepare_step()
    assert replay.verify(db).ok
    result = run("verify", "--db", db)
    assert result.exit_code == 0 and "verify ok" in result.stdout, result.output


@pytest.mark.traces
def test_prepare_threshold_zero_serves_the_views_of_the_code_before_it(
    traces: dict[str, Any],
) -> None:
    """Every served view hash on the real traces equals c4f78f5's (before background
    compaction), under each Config of the trace tests with ``prepare_threshold=0``."""
    reference = json.loads((DATA / "background_reference.json").read_text())
    script = _load_reference_script()
    config = script.config({"context_window": 1000})
    assert config.prepare_threshold == 0.0
    current = script.trace_hashes(traces)
    assert set(current) == set(reference) - {"commit"}
    for name, per_trace in current.items():
        missing = sorted(set(reference[name]) - set(per_trace))
        assert not missing, f"{name}: traces missing from ../shared/traces: {missing}"
        differ = [
            trace for trace in sorted(per_trace) if per_trace[trace] != reference[name][trace]
        ]
        assert not differ, f"{name}: served views differ from c4f78f5 on {differ}"
    if set(traces) != set(reference["host-8k"]):
        pytest.skip("only part of the reference traces are present; those compared are equal")


def background_cell(table: str, row: str) -> str:
    """The PREPARED/ACTIVATED cell of ``row`` in the ``sessions`` table (a fixed-width column
    as wide as its title)."""
    title = "PREPARED/ACTIVATED"
    start = table.splitlines()[0].index(title)
    return row[start : start + len(title)].strip()


def test_cli_shows_prepared_and_activated_summaries(tmp_path: Path) -> None:
    """``show --events`` marks background events and SummaryPrepared; ``sessions`` counts
    prepared/activated summaries per session."""
    db = tmp_path / "db"
    with Host.open(db, config=CONFIG, summarizer=digest_summarizer) as host:
        used, unused = host.session("used"), host.session("unused")
        for n in range(1, 40):
            used.append_many(turn(n, 90))
            used.wait_background()
            used.prepare_step()
        for n in range(1, 40):
            unused.append_many(turn(n, 90))
            unused.wait_background()
            if events_of(host.log, "unused", SummaryPrepared):
                break
        activated = [e for e in events_of(host.log, "used", CheckpointCreated) if e.prepared]
        prepared = events_of(host.log, "used", SummaryPrepared)
        assert activated and prepared
        assert events_of(host.log, "unused", CheckpointCreated) == []
    listed = run("sessions", "--db", db)
    assert listed.exit_code == 0, listed.output
    rows = {
        line.split()[0]: background_cell(listed.stdout, line)
        for line in listed.stdout.splitlines()[2:]
    }
    assert rows["used"] == f"{len(prepared)}/{len(activated)}"
    assert rows["unused"] == "1/0"
    shown = run("show", "used", "--events", "--db", db, "--no-pager")
    assert shown.exit_code == 0, shown.output
    events = shown.stdout.splitlines()
    started = [line for line in events if "compaction_started" in line]
    assert any("[background]" in line for line in started)
    ready = [line for line in events if "summary_prepared" in line]
    assert len(ready) == len(prepared)
    assert all(f"prepared {e.compaction_id[:12]}" in "\n".join(ready) for e in prepared)
    made = [line for line in events if "checkpoint_created" in line]
    marked = [line for line in made if "activated prepared" in line]
    assert len(marked) == len(activated)
    assert f"activated prepared {activated[0].compaction_id[:12]}" in marked[0]


def test_cli_marks_a_failed_background_summary(tmp_path: Path) -> None:
    """A background summary that fails is listed as a background CompactionFailed."""
    db = tmp_path / "db"

    def failing(request: SummaryRequest) -> str | None:
        return None

    with Host.open(db, config=CONFIG, summarizer=failing) as host:
        session = host.session("a")
        for n in range(1, 40):
            session.append_many(turn(n, 60))
            session.wait_background()
            if any(
                r.event.__struct_config__.tag == "compaction_failed" for r in host.log.read("a")
            ):
                break
    shown = run("show", "a", "--events", "--db", db, "--no-pager")
    failed = [line for line in shown.stdout.splitlines() if "compaction_failed" in line]
    assert failed and all("[background]" in line for line in failed), shown.stdout
    listed = run("sessions", "--db", db).stdout
    assert background_cell(listed, listed.splitlines()[2]) == "-"


class SteppingClock:
    """The host's clock: ``step`` seconds pass at every reading (no real time involved)."""

    def __init__(self, step: float) -> None:
        self.now = 1_000_000.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def timed_summarizer(clock: SteppingClock, seconds: float = 20.0) -> Callable[..., str]:
    """A summariser whose summary takes ``seconds`` of the host's clock (which times
    summaries: ``summary_seconds > 0``), and no real time."""

    def summarize(request: SummaryRequest, /) -> str:
        clock.now += seconds - clock.step  # the reading that ends the summary adds a step
        return digest_summarizer(request)

    return summarize


@pytest.mark.parametrize(("clock_step", "prepared"), [(1e-7, False), (1_000.0, True)])
def test_a_summary_is_prepared_only_if_it_can_be_ready_before_the_threshold(
    tmp_path: Path, clock_step: float, prepared: bool
) -> None:
    """After a checkpoint, the session's growth per second of the host's clock times the last
    summary's time is compared with the room left below the threshold: a session that grows
    faster than a summary can follow gets none prepared (the threshold compacts, as with
    ``prepare_threshold=0``), a slower one does."""
    clock = SteppingClock(clock_step)
    with Host.open(
        tmp_path / "db",
        config=CONFIG,
        summarizer=timed_summarizer(clock),
        id_factory=_ids(),
        clock=clock,
    ) as host:
        session = host.session("a")
        n = 0
        while not events_of(host.log, "a", CheckpointCreated):
            n += 1
            session.append_many(turn(n, 90))
            session.prepare_step()
            session.wait_background()
            assert n < 200
        (first,) = events_of(host.log, "a", CheckpointCreated)
        assert first.checkpoint.summary_seconds > 0
        before = len(events_of(host.log, "a", CompactionStarted))
        while len(events_of(host.log, "a", CheckpointCreated)) == 1:
            n += 1
            session.append_many(turn(n, 90))
            session.wait_background()  # anything started at the crossing has run
            session.prepare_step()
            assert n < 400
        second = events_of(host.log, "a", CheckpointCreated)[1]
        started = events_of(host.log, "a", CompactionStarted)[before:]
        assert any(s.background for s in started) is prepared
        assert second.prepared is prepared
    assert replay.verify(tmp_path / "db").ok
