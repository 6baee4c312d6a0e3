"""The role actors through a real host (issue 28): budget folds the committed batches (or is
credited with them) and asks for a summary exactly at the append that crosses the prepare
point; ``wait_background`` waits for what budget is about to ask for."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pykka
import pytest

from ctxledger import Config, Host, Message, ToolCall
from ctxledger.actors.messages import Committed
from ctxledger.domain import _compaction_plan, _fact_extract
from ctxledger.events import CheckpointCreated, CompactionStarted, SummaryPrepared
from ctxledger.storage import EventLog
from ctxledger.summarizers import SummaryRequest
from ctxledger.testing import digest_summarizer

#: Threshold 1,000 tokens; a summary starts in the background at 850.
CONFIG = Config(
    context_window=2000,
    compression_threshold=0.5,
    min_retain_rounds=1,
    prepare_threshold=0.85,
)


def _background_starts(log: EventLog, session_id: str) -> int:
    return sum(
        1
        for record in log.read(session_id)
        if isinstance(record.event, CompactionStarted) and record.event.background
    )


def test_the_append_that_crosses_the_prepare_point_starts_the_summary(tmp_path: Path) -> None:
    """Small appends one by one (most kept back within budget's credit, never told one by
    one): none starts a background summary while the view is below the prepare point, and the
    first that lifts it there does, by the time ``wait_background`` returns."""
    with Host.open(tmp_path / "db", config=CONFIG, summarizer=digest_summarizer) as host:
        for name in ("a", "b", "c"):
            session = host.session(name)
            prepare_at = session.compact_if_needed().threshold * 0.85
            n = 0
            while True:
                n += 1
                assert n < 300
                role = Message.user if n % 2 else Message.assistant
                session.append(role(f"m{n} " + "x" * (20 + 7 * n % 40)))
                session.wait_background()
                started = _background_starts(host.log, name)
                estimate = session.build_model_view().estimated_tokens
                if estimate < prepare_at:
                    assert started == 0, (name, n, estimate)
                    continue
                assert started == 1, (name, n, estimate)
                prepared = [r.event for r in host.log.read(name)]
                assert any(isinstance(event, SummaryPrepared) for event in prepared)
                break


def test_wait_background_is_answered_when_nothing_is_due(tmp_path: Path) -> None:
    """Far below the prepare point, with background compaction on and off, ``wait_background``
    returns at once after every append (budget has nothing due) and nothing is started."""
    off = CONFIG.replace(prepare_threshold=0.0)
    with Host.open(tmp_path / "db", config=CONFIG, summarizer=digest_summarizer) as host:
        for name, config in (("on", CONFIG), ("off", off)):
            session = host.session(name, config=config)
            for n in range(20):
                session.append(Message.user(f"short {n}"))
                session.wait_background()
            assert _background_starts(host.log, name) == 0


class Tap(pykka.ThreadingActor):
    """Stands between the history actors and budget: forwards every message, keeps the
    ``Committed`` ones (asked ``"told"``: those kept so far, in order)."""

    def __init__(self, budget: Any) -> None:
        super().__init__()
        self.budget = budget
        self.told: list[Committed] = []

    def on_receive(self, message: Any) -> Any:
        if message == "told":
            return list(self.told)
        if isinstance(message, Committed):
            self.told.append(message)
        self.budget.tell(message)
        return None


def test_the_batches_of_a_running_background_summary_are_not_told_to_budget(
    tmp_path: Path,
) -> None:
    """While a session's background summary runs, budget decides nothing for it: its batches
    are not published (one message a batch less for an agent past its prepare point); once the
    summary is prepared, the next append is told again, and budget measures from the state."""
    started, release = threading.Event(), threading.Event()

    def held(request: SummaryRequest, /) -> str:
        started.set()
        if not release.wait(60):
            raise RuntimeError("the test never released the summariser")
        return digest_summarizer(request)

    with Host.open(tmp_path / "db", config=CONFIG, summarizer=held) as host:
        session = host.session("a")
        prepare_at = session.compact_if_needed().threshold * 0.85
        n = 0
        while session.build_model_view().estimated_tokens < prepare_at:
            n += 1
            assert n < 300
            session.append(Message.user(f"m{n} " + "x" * 60))
        assert started.wait(60), "no background summary started at the prepare point"
        budget = host._actors.budget
        real = budget.ref
        budget.ref = tap = Tap.start(real)
        try:
            for k in range(n + 1, n + 6):
                session.append(Message.user(f"m{k} " + "x" * 60))
            # Committed is told before an append is answered: the tap holds all there are.
            assert tap.ask("told") == []
            release.set()
            session.wait_background()
            assert _background_starts(host.log, "a") == 1
            session.append(Message.user("after " + "x" * 60))
            told = tap.ask("told")
        finally:
            release.set()
            budget.ref = real
            tap.stop()
    assert [c.events[-1].message.content[:5] for c in told[-1:]] == ["after"]
    assert all(c.session_id == "a" for c in told)


def test_the_summariser_input_is_made_on_a_compaction_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The digest of a summary's input (facts of long tool output: milliseconds) is made on the
    compaction worker that runs the summariser, for background and foreground summaries, never
    on the history actor that serves every step of its sessions; the summaries' records carry
    its address as before."""
    threads: list[str] = []
    real = _compaction_plan.summary_input

    def recorded(messages: Any, limit: int) -> Any:
        threads.append(threading.current_thread().name)
        return real(messages, limit)

    monkeypatch.setattr(_compaction_plan, "summary_input", recorded)
    log_text = "collecting\n" + "tests/test_a.py::test_ok PASSED\n" * 60 + "E   boom\n" * 2
    with Host.open(tmp_path / "db", config=CONFIG, summarizer=digest_summarizer) as host:
        session = host.session("s")
        for n in range(40):
            call = ToolCall(f"c{n}", "bash", '{"command": "pytest"}')
            session.append_many(
                [Message.assistant(f"run {n}", [call]), Message.tool(log_text, f"c{n}", "bash")]
            )
            session.wait_background()
        session.compact(focus="the tests")
        events = [record.event for record in host.log.read("s")]
    assert any(isinstance(e, SummaryPrepared) for e in events)
    assert any(isinstance(e, CompactionStarted) and not e.background for e in events)
    assert threads and all(name.startswith("CompactionActor") for name in threads), threads
    addresses = [e.input_hash for e in events if isinstance(e, SummaryPrepared)] + [
        e.checkpoint.input_hash
        for e in events
        if isinstance(e, CheckpointCreated) and not e.prepared
    ]
    assert addresses and all(len(a) == 64 for a in addresses)


def test_the_facts_of_a_foreground_summary_are_extracted_on_the_compaction_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The facts of the messages a foreground summary covers are extracted on the worker that
    made it, so that the checkpoint's fact block, made on the history actor as soon as the
    summary is answered, reads them from the memo: no history actor extracts any. (A summary
    prepared in the background is not warmed: see ``actors.compaction._warm_facts``.)"""
    threads: list[str] = []
    real = _fact_extract._compute_adds

    def recorded(message: Message, name: str | None, command: str | None) -> Any:
        threads.append(threading.current_thread().name)
        return real(message, name, command)

    monkeypatch.setattr(_fact_extract, "_compute_adds", recorded)
    monkeypatch.setattr(_fact_extract, "_memo", _fact_extract._Memo())
    log_text = "collecting\n" + "src/pkg/mod.py::test_ok PASSED\n" * 3 + "E   boom at x.py\n"
    foreground = CONFIG.replace(prepare_threshold=0.0)
    with Host.open(tmp_path / "db", config=foreground, summarizer=digest_summarizer) as host:
        session = host.session("s")
        for n in range(60):
            call = ToolCall(f"c{n}", "bash", f'{{"command": "pytest tests/t{n}.py"}}')
            session.step(
                [Message.assistant(f"run {n}", [call]), Message.tool(log_text, f"c{n}", "bash")]
            )
        session.compact(focus="the tests")
        events = [record.event for record in host.log.read("s")]
    made = [e for e in events if isinstance(e, CheckpointCreated)]
    assert len(made) > 1 and not any(e.prepared for e in made)
    assert all(e.checkpoint.facts for e in made)
    assert threads and all(name.startswith("CompactionActor") for name in threads), threads
