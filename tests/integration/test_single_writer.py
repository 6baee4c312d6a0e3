"""Each session has one writer, its history actor: creating a session and forking one go
through it like every other write (issue 28), so nothing is ever written beside it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxledger import Host, Message, SessionExistsError
from ctxledger.events import SessionForked, SessionOpened
from ctxledger.replay import verify
from ctxledger.storage import open_log
from guards import LogWriters, call_in_thread


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[tuple[Host, LogWriters]]:
    log = open_log(tmp_path / "db", durability="none")
    writers = LogWriters()
    log.append = writers.wrap(log.append)  # type: ignore[method-assign]
    log.submit = writers.wrap(log.submit)  # type: ignore[method-assign]
    with Host(log) as host:
        yield host, writers


def test_creation_and_forks_are_written_by_the_owning_history_actor(
    recorded: tuple[Host, LogWriters],
) -> None:
    """A new session, a fork, a fork of a fork and a fork at a seq: every batch of each was
    handed to the log by a history actor, on its thread or by a caller's thread carrying out a
    command in its place (under its lock), never beside it: not by a caller on its own nor by a
    projection actor."""
    host, writers = recorded
    parent = host.session("parent")
    parent.append_many([Message.user("one"), Message.assistant("two"), Message.user("three")])
    child = parent.fork("child")
    child.append(Message.assistant("four"))
    early = parent.fork("early", at_seq=1)
    grandchild = child.fork("grandchild", at_seq=3)
    assert [m.content for m in early.history()] == ["one"]
    assert [m.content for m in grandchild.history()] == ["one", "two", "three"]
    assert set(writers.by_session) == {"parent", "child", "early", "grandchild"}
    for session_id, threads in writers.by_session.items():
        assert all(name.startswith("HistoryActor") for name in threads), (session_id, threads)
    first = [record.event for record in host.log.read("early")][:2]
    assert isinstance(first[0], SessionOpened) and isinstance(first[1], SessionForked)
    assert (first[1].parent_id, first[1].at_seq) == ("parent", 1)


def test_a_fork_onto_an_existing_session_writes_nothing(recorded: tuple[Host, LogWriters]) -> None:
    """Forking onto a session that exists (in memory, or only in the log) raises
    SessionExistsError and leaves that session's log as it was."""
    host, _ = recorded
    parent = host.session("parent")
    parent.append(Message.user("one"))
    other = host.session("other")
    other.append(Message.user("mine"))
    before = [record.event for record in host.log.read("other")]
    with pytest.raises(SessionExistsError):
        call_in_thread(lambda: parent.fork("other"))
    with pytest.raises(SessionExistsError):
        call_in_thread(lambda: parent.fork("parent"))
    assert [record.event for record in host.log.read("other")] == before
    assert call_in_thread(lambda: other.append(Message.assistant("still mine"))) == 2


def test_a_fork_and_an_open_of_the_same_new_id_at_once_create_it_once(tmp_path: Path) -> None:
    """``fork("x")`` and ``session("x")`` racing for a new id: the one the owner takes first
    creates it, the fork either succeeds or raises SessionExistsError, and the log verifies."""
    with Host.open(tmp_path / "db") as host:
        parent = host.session("parent")
        parent.append(Message.user("one"))
        for n in range(20):
            new_id = f"x{n}"
            outcome: dict[str, object] = {}

            def fork(new_id: str = new_id, outcome: dict[str, object] = outcome) -> None:
                try:
                    outcome["fork"] = parent.fork(new_id)
                except SessionExistsError as exc:
                    outcome["fork"] = exc

            thread = threading.Thread(target=fork)
            thread.start()
            opened = host.session(new_id)
            thread.join()
            events = [record.event for record in host.log.read(new_id)]
            assert sum(isinstance(event, SessionOpened) for event in events) == 1
            forked = any(isinstance(event, SessionForked) for event in events)
            assert forked == (not isinstance(outcome["fork"], SessionExistsError))
            assert opened.append(Message.user("next")) == (2 if forked else 1)
    assert verify(tmp_path / "db").ok
