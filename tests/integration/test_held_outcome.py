"""A background summary's outcome is held for the session's next batch (``ctxledger.actors.steps``).

Through a real LMDB host, with a summariser the test releases:

* An append that follows the outcome carries it: ``SummaryPrepared`` and the append are recorded
  in one commit (same commit time, consecutive positions), in the order they happened.
* With no command after it, the host's timer records it alone (``FlushHeld``).
* ``wait_background`` answers only once it is recorded.
* A view served with ``defer_record`` before it is held with it, first, in the same commit.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_background import (
    _WAIT,
    CONFIG,
    HeldSummarizer,
    _append_to_the_prepare_point,
    _ids,
)

from ctxledger import Host, Message, Session, replay
from ctxledger.actors import steps
from ctxledger.events import MessageAppended, SummaryPrepared, ViewServed
from ctxledger.storage import RecordedEvent


@pytest.fixture
def started(tmp_path: Path) -> Iterator[tuple[Host, Session, HeldSummarizer]]:
    """A host whose session ``a`` has a background summary running (held by the test)."""
    held = HeldSummarizer()
    with Host.open(tmp_path / "db", config=CONFIG, summarizer=held, id_factory=_ids()) as host:
        session = host.session("a")
        _append_to_the_prepare_point(session, 0)
        assert held.started.wait(_WAIT), "no background summary started at the prepare point"
        yield host, session, held
    assert replay.verify(tmp_path / "db").ok


def _records(host: Host) -> list[RecordedEvent]:
    return list(host.log.read("a"))


def _prepared(host: Host) -> list[RecordedEvent]:
    return [r for r in _records(host) if isinstance(r.event, SummaryPrepared)]


def _live(host: Host) -> Any:
    router = host._router
    assert router is not None
    return router._instances[router.number("a")]._lives["a"]


def _until(condition: Any, what: str) -> None:
    """Poll ``condition`` (a hang guard only: no timing is asserted)."""
    deadline = time.monotonic() + _WAIT
    while not condition():
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.005)


@pytest.fixture
def no_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The timer does not record a held outcome while the test runs."""
    monkeypatch.setattr(steps, "HELD_FLUSH_SECONDS", 3600.0)


@pytest.mark.usefixtures("no_timer")
def test_the_next_append_records_the_outcome_in_its_commit(
    started: tuple[Host, Session, HeldSummarizer],
) -> None:
    host, session, held = started
    held.release.set()
    _until(lambda: any(isinstance(e, SummaryPrepared) for e in _live(host).held), "held")
    assert _prepared(host) == []  # folded, not recorded yet
    session.append(Message.user("and now the docs"))
    *_, outcome, appended = _records(host)
    assert isinstance(outcome.event, SummaryPrepared)
    assert isinstance(appended.event, MessageAppended)
    assert appended.event.message.content == "and now the docs"
    assert appended.position == outcome.position + 1
    assert appended.timestamp == outcome.timestamp  # one commit
    assert _live(host).held == ()


def test_the_timer_records_the_outcome_when_no_command_follows(
    started: tuple[Host, Session, HeldSummarizer],
) -> None:
    host, _session, held = started
    held.release.set()
    _until(lambda: _prepared(host) != [], "recorded without a command")
    assert _live(host).held == ()


@pytest.mark.usefixtures("no_timer")
def test_wait_background_answers_once_the_outcome_is_recorded(
    started: tuple[Host, Session, HeldSummarizer],
) -> None:
    host, session, held = started
    held.release.set()
    session.wait_background()
    (prepared,) = _prepared(host)
    assert prepared.event.compaction_id
    assert _live(host).held == ()


@pytest.mark.usefixtures("no_timer")
def test_a_held_view_and_outcome_are_recorded_in_the_order_they_happened(
    started: tuple[Host, Session, HeldSummarizer],
) -> None:
    """A view served with ``defer_record`` while the summary runs, then the summary's outcome:
    both held, both recorded first in the next append's commit, the view before the outcome."""
    host, session, held = started
    view = session.prepare_step(defer_record=True)
    assert [type(e) for e in _live(host).held] == [ViewServed]
    held.release.set()
    _until(lambda: len(_live(host).held) == 2, "held")
    session.append(Message.user("and now the docs"))
    *_, served, outcome, appended = _records(host)
    assert isinstance(served.event, ViewServed) and served.event.view_hash == view.view_hash
    assert isinstance(outcome.event, SummaryPrepared)
    assert isinstance(appended.event, MessageAppended)
    assert served.timestamp == outcome.timestamp == appended.timestamp  # one commit
    assert [outcome.position, appended.position] == [served.position + 1, served.position + 2]
