"""A blocking caller's command is carried out on its own thread while the session's history
actor is idle (``ctxledger.actors.inline``), as the actor's single writer, and through the
mailbox otherwise; an interruption in the middle of one costs the session nothing."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxledger import Config, Host, Message
from ctxledger.actors.history import HistoryActor
from ctxledger.actors.writes import Writes
from ctxledger.replay import verify
from ctxledger.storage import open_log
from guards import LogWriters, call_in_thread

#: No background compaction: nothing but the caller's commands reaches the actor.
QUIET = Config(prepare_threshold=0)


@pytest.fixture
def host(tmp_path: Path) -> Iterator[tuple[Host, LogWriters]]:
    log = open_log(tmp_path / "db", durability="none")
    submitters = LogWriters()
    log.submit = submitters.wrap(log.submit)  # type: ignore[method-assign]
    with Host(log, config=QUIET) as opened:
        yield opened, submitters


def _owner(host: Host, session_id: str) -> HistoryActor:
    router = host._router
    assert router is not None
    actor: HistoryActor = router._instances[router.number(session_id)]
    return actor


def _until_idle(actor: HistoryActor) -> None:
    """Wait (under the guard) until the actor has nothing in its mailbox, in hand or on its
    way (a ``DurablesReady`` taken off the mailbox leaves the box told until it is handled)."""

    def idle() -> None:
        while True:
            if actor._exclusive.acquire(blocking=False):
                try:
                    if actor.actor_inbox.empty() and not actor._durables._told:
                        return
                finally:
                    actor._exclusive.release()
            threading.Event().wait(0.001)

    call_in_thread(idle)


def test_an_idle_actors_command_runs_on_the_callers_thread(
    host: tuple[Host, LogWriters],
) -> None:
    """Once the session is loaded and its actor idle, nothing else reaches the actor: every
    append is decided, committed and folded on the caller's thread, as the owning actor (no
    message is left for the actor), and answered there."""
    opened, submitters = host
    session = opened.session("s")
    session.append(Message.user("first"))
    _until_idle(_owner(opened, "s"))
    submitters.names.clear()
    seqs = [session.append(Message.user(f"m{n}")) for n in range(20)]
    assert seqs == list(range(2, 22))
    number = opened._router.number("s")  # type: ignore[union-attr]
    assert submitters.names == [f"HistoryActor-{number} (inline on MainThread)"] * 20
    assert [m.content for m in session.history()][-2:] == ["m18", "m19"]


def test_a_busy_actor_takes_the_command_through_its_mailbox(
    host: tuple[Host, LogWriters],
) -> None:
    """While the actor's lock is held (the actor handling a message), a caller's command goes
    to the mailbox and the actor's own thread carries it out once it can."""
    opened, submitters = host
    session = opened.session("s")
    session.append(Message.user("first"))
    actor = _owner(opened, "s")
    router = opened._router
    assert router is not None
    told = threading.Event()
    real_tell = router.tell

    def tell(*args: Any) -> None:
        real_tell(*args)
        told.set()

    router.tell = tell  # type: ignore[method-assign]
    submitters.names.clear()
    with actor._exclusive:  # as if the actor were handling a message
        appended = threading.Thread(target=session.append, args=(Message.user("second"),))
        appended.start()
        assert told.wait(120), "the command never reached the mailbox"
    appended.join()
    assert len(submitters.names) == 1
    assert submitters.names[0].startswith("HistoryActor-")
    assert "inline" not in submitters.names[0]
    assert [m.content for m in session.history()] == ["first", "second"]


class _Interrupt(BaseException):
    """Stands for a KeyboardInterrupt raised in the caller's thread."""


def test_an_interruption_mid_command_restarts_the_session_from_its_log(
    host: tuple[Host, LogWriters], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupted while folding its own durable batch on the caller's thread: the caller sees
    the interruption, the batch is in the log once, the session starts over from the log and
    goes on, and the log verifies."""
    opened, _ = host
    session = opened.session("s")
    session.append_many([Message.user("one"), Message.assistant("two")])
    real = Writes._fold
    armed = [True]

    def interrupted(self: Writes, *args: Any, **kwargs: Any) -> None:
        if armed and threading.current_thread() is threading.main_thread():
            armed.clear()
            raise _Interrupt
        real(self, *args, **kwargs)

    monkeypatch.setattr(Writes, "_fold", interrupted)
    with pytest.raises(_Interrupt):
        session.append(Message.user("three"))
    assert not armed, "the fold did not run on the caller's thread"
    after = call_in_thread(lambda: session.append(Message.assistant("four")))
    assert after == 4
    assert [m.content for m in session.history()] == ["one", "two", "three", "four"]
    assert [m.seq for m in session.history()] == [1, 2, 3, 4]
    opened.close()
    assert verify(tmp_path / "db").ok


def test_while_the_actor_waits_for_its_turn_commands_take_the_mailbox(
    host: tuple[Host, LogWriters],
) -> None:
    """Once the actor's thread waits for the lock (a caller appending in a loop holds it most
    of the time), the next commands go to the mailbox behind the actor's message instead of
    starting inline: the actor is never starved."""
    opened, submitters = host
    session = opened.session("s")
    session.append(Message.user("first"))
    actor = _owner(opened, "s")
    submitters.names.clear()
    actor._wanted = True  # as the actor's thread sets it before it blocks on the lock
    try:
        session.append(Message.user("second"))
    finally:
        actor._wanted = False
    assert len(submitters.names) == 1
    assert "inline" not in submitters.names[0] and submitters.names[0].startswith("HistoryActor")
    assert [m.content for m in session.history()] == ["first", "second"]


def test_callers_sharing_sessions_keep_every_append_once_and_in_their_order(
    tmp_path: Path,
) -> None:
    """Three threads on each of two sessions append and serve at once (some commands carried
    out inline, the others through the mailbox, as the actor is idle or not): each session
    holds every message once, each thread's in its own order, seqs without a gap, and the log
    verifies."""
    config = Config(context_window=6_000, compression_threshold=0.8, min_retain_rounds=1)
    failures: list[BaseException] = []

    def drive(host: Host, session_id: str, writer: int) -> None:
        try:
            session = host.session(session_id)
            for n in range(40):
                session.append(Message.user(f"w{writer} m{n} " + "x" * 200))
                if n % 8 == 7:
                    session.prepare_step()
        except BaseException as exc:  # collected and re-raised in the main thread
            failures.append(exc)

    with Host.open(tmp_path / "db", config=config) as host:
        for session_id in ("a", "b"):
            host.session(session_id)
        threads = [
            threading.Thread(target=drive, args=(host, session_id, writer))
            for session_id in ("a", "b")
            for writer in range(3)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failures, failures
        for session_id in ("a", "b"):
            history = host.session(session_id).history()
            assert [m.seq for m in history] == list(range(1, 121))
            for writer in range(3):
                words = [m.content.split() for m in history]
                assert [w[1] for w in words if w[0] == f"w{writer}"] == [f"m{n}" for n in range(40)]
    assert verify(tmp_path / "db").ok
