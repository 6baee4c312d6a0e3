"""A blocking caller's command is carried out on its own thread while the session's history
actor is idle (``ctxledger.actors.inline``), as the actor's single writer, and through the
mailbox otherwise; an interruption in the middle of one costs the session nothing."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxledger import Config, Host, HostOptions, Message
from ctxledger.actors.history import HistoryActor
from ctxledger.actors.messages import Evict
from ctxledger.actors.writes import Writes
from ctxledger.replay import verify
from ctxledger.storage import open_log, queued_commits
from ctxledger.storage.journal import Journal
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


def test_an_async_callers_step_is_decided_on_its_loop_and_committed_by_the_journal(
    host: tuple[Host, LogWriters],
) -> None:
    """An async caller's command runs on its event loop's thread too while the actor is idle,
    but its batch is committed by the journal's thread (the loop never blocks on a commit),
    which answers the awaiting task."""
    import asyncio

    opened, submitters = host
    session = opened.session("a")
    session.append(Message.user("first"))
    _until_idle(_owner(opened, "a"))
    submitters.names.clear()
    committed_on: list[str] = []
    submit = opened.log.submit

    def watched(session_id: str, events: Any, *, expected_seq: int, callback: Any) -> None:
        def done(records: Any, error: Any) -> None:
            committed_on.append(threading.current_thread().name)
            callback(records, error)

        submit(session_id, events, expected_seq=expected_seq, callback=done)

    opened.log.submit = watched  # type: ignore[method-assign]

    async def steps() -> list[Any]:
        views = []
        for n in range(5):
            views.append(await session.astep([Message.user(f"m{n}")]))
            await asyncio.sleep(0)
        return views

    views = asyncio.run(steps())
    assert [view.appended_seqs for view in views] == [(n,) for n in range(2, 7)]
    number = opened._router.number("a")  # type: ignore[union-attr]
    assert f"HistoryActor-{number} (inline on MainThread)" in submitters.names
    assert committed_on and "MainThread" not in committed_on
    assert [m.content for m in session.history()][-1] == "m4"


def test_a_busy_actor_takes_the_command_through_its_mailbox(
    host: tuple[Host, LogWriters],
) -> None:
    """While another caller holds the actor's lock (carrying out a command; the actor's own
    thread between messages), a caller's command goes to the mailbox at once, not waiting for
    the lock (the actor may commit it in one batch with others), and the actor's own thread
    carries it out once it can."""
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


@pytest.mark.parametrize("committed_by", ["caller", "journal"])
def test_an_interruption_mid_command_restarts_the_session_from_its_log(
    host: tuple[Host, LogWriters],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    committed_by: str,
) -> None:
    """Interrupted while folding its own durable batch on the caller's thread (committed there,
    in the command; or by the journal's thread, once the answer came: ``fold_posted``): the
    caller sees the interruption, the batch is in the log once, the session starts over from
    the log and goes on, and the log verifies."""
    opened, _ = host
    session = opened.session("s")
    session.append_many([Message.user("one"), Message.assistant("two")])
    _until_idle(_owner(opened, "s"))
    real = Writes._fold
    armed = [True]

    def interrupted(self: Writes, *args: Any, **kwargs: Any) -> None:
        if armed and threading.current_thread() is threading.main_thread():
            armed.clear()
            raise _Interrupt
        real(self, *args, **kwargs)

    monkeypatch.setattr(Writes, "_fold", interrupted)
    queued = queued_commits() if committed_by == "journal" else contextlib.nullcontext()
    with queued, pytest.raises(_Interrupt):
        session.append(Message.user("three"))
    assert not armed, "the fold did not run on the caller's thread"
    after = call_in_thread(lambda: session.append(Message.assistant("four")))
    assert after == 4
    assert [m.content for m in session.history()] == ["one", "two", "three", "four"]
    assert [m.seq for m in session.history()] == [1, 2, 3, 4]
    opened.close()
    assert verify(tmp_path / "db").ok


def _until(condition: Any) -> None:
    """Wait (under the guard) until ``condition()`` holds."""

    def poll() -> None:
        while not condition():
            threading.Event().wait(0.001)

    call_in_thread(poll)


def _tells(host: Host) -> list[Any]:
    """The commands the host's router hands to a history actor's mailbox from now on."""
    router = host._router
    assert router is not None
    told: list[Any] = []
    real_tell = router.tell

    def tell(session_id: str, command: Any) -> None:
        told.append(type(command).__name__)
        real_tell(session_id, command)

    router.tell = tell  # type: ignore[method-assign]
    return told


def _append_in_thread(session: Any, content: str, order: list[str]) -> threading.Thread:
    def append() -> None:
        order.append(f"appended {session.append(Message.user(content))}")

    thread = threading.Thread(target=append, name="caller", daemon=True)
    thread.start()
    return thread


class _SlowEvicts:
    """Each ``Evict`` message the actor handles takes until the test lets it go on."""

    def __init__(self, actor: HistoryActor, order: list[str]) -> None:
        self.entered = threading.Semaphore(0)
        self.go_on = threading.Event()
        self.order = order
        actor._evict = self  # type: ignore[assignment, method-assign]

    def __call__(self, *, ask_others: bool = True) -> None:
        if not ask_others:  # (the actor also calls it after a command: nothing to do here)
            self.entered.release()
            assert self.go_on.wait(120)
            self.order.append("actor's message")


class _Watched:
    """Session ``s`` of the host with one message, its history actor idle, its ``Evict``
    messages slowed (:class:`_SlowEvicts`), and what reaches the mailbox recorded from now on."""

    def __init__(self, host: tuple[Host, LogWriters]) -> None:
        self.host, self.submitters = host
        self.session = self.host.session("s")
        self.session.append(Message.user("first"))
        self.actor = _owner(self.host, "s")
        _until_idle(self.actor)
        self.order: list[str] = []
        self.evicts = _SlowEvicts(self.actor, self.order)
        self.told = _tells(self.host)
        self.submitters.names.clear()

    def actor_in_a_message(self) -> None:
        """The actor's own thread handles an ``Evict`` until ``evicts.go_on`` is set."""
        self.actor.actor_ref.tell(Evict())
        assert self.evicts.entered.acquire(timeout=120)


@pytest.mark.parametrize("turn", ["in hand", "awaited", "queued"])
def test_a_command_waits_for_the_actors_own_messages_then_runs_inline(
    host: tuple[Host, LogWriters], turn: str
) -> None:
    """While the actor's own thread handles a message of its own (budget's ``Measure``, a
    summary's outcome), waits for its turn to (a caller held the lock), or has only its own
    messages ahead in the mailbox, a caller's command waits for them and then runs on the
    caller's thread: the actor's messages still come first, and the command saves the
    mailbox's two thread hand-offs."""
    w = _Watched(host)
    actor = w.actor
    if turn == "awaited":
        with actor._exclusive:  # a caller's command in progress
            actor.actor_ref.tell(Evict())
            _until(lambda: actor._wanted)
            appended = _append_in_thread(w.session, "second", w.order)
            _until(lambda: actor._waiting == 1)
    else:
        w.actor_in_a_message()
        if turn == "queued":
            actor.actor_ref.tell(Evict())
        appended = _append_in_thread(w.session, "second", w.order)
        _until(lambda: actor._waiting == 1)
    w.evicts.go_on.set()
    appended.join(120)
    assert not appended.is_alive()
    messages = 2 if turn == "queued" else 1
    assert w.order == ["actor's message"] * messages + ["appended 2"]
    assert w.told == []
    number = w.host._router.number("s")  # type: ignore[union-attr]
    assert w.submitters.names == [f"HistoryActor-{number} (inline on caller)"]
    assert [m.content for m in w.session.history()] == ["first", "second"]


def test_one_caller_waits_for_the_actor_the_next_ones_take_the_mailbox(
    host: tuple[Host, LogWriters],
) -> None:
    """While one caller waits for the actor's own message, a second caller's command goes to
    the mailbox at once (several callers at once are a batch for the actor to commit, not a
    queue of callers committing one by one); the waiting caller's command comes after it.
    Each command is carried out once."""
    w = _Watched(host)
    w.actor_in_a_message()
    waiting = _append_in_thread(w.session, "waits", w.order)
    _until(lambda: w.actor._waiting == 1)
    second = _append_in_thread(w.session, "second caller", w.order)
    _until(lambda: w.told == ["Execute"])
    assert w.actor._waiting == 1
    w.evicts.go_on.set()
    for thread in (waiting, second):
        thread.join(120)
        assert not thread.is_alive()
    # The waiting caller then took the mailbox, or ran on its own thread once the actor had
    # carried the second caller's command out: behind it, either way.
    assert w.told in (["Execute"], ["Execute", "Execute"])
    assert w.order[0] == "actor's message"
    assert sorted(w.order[1:]) == ["appended 2", "appended 3"]
    assert [m.content for m in w.session.history()] == ["first", "second caller", "waits"]


def test_a_caller_of_another_session_takes_the_mailbox(
    host: tuple[Host, LogWriters],
) -> None:
    """A caller waits for the actor's own work only as the lone writer of the actor's
    sessions (the session of the actor's last command): a caller of another session of the
    same actor takes the mailbox at once, as with callers at once on many sessions, whose
    commands the actor commits in one batch."""
    opened, _ = host
    router = opened._router
    assert router is not None
    same = router.number("s")
    other = next(f"t{n}" for n in range(1000) if router.number(f"t{n}") == same)
    other_session = opened.session(other)
    other_session.append(Message.user("other's first"))
    w = _Watched(host)  # session s: the actor's last command
    w.actor_in_a_message()
    appended = _append_in_thread(other_session, "other's second", w.order)
    _until(lambda: w.told == ["Execute"])
    assert w.actor._waiting == 0
    w.evicts.go_on.set()
    appended.join(120)
    assert not appended.is_alive()
    assert w.order == ["actor's message", "appended 2"]
    names = w.submitters.names
    assert names and all("inline" not in n and n.startswith("HistoryActor") for n in names)
    history = other_session.history()
    assert [m.content for m in history] == ["other's first", "other's second"]


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


def test_commands_waiting_in_the_mailbox_are_committed_together_by_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight writers' commands wait in the mailbox of the one history actor: the actor hands
    their batches to the journal, whose thread commits them in groups, instead of committing
    each on its own thread as a group of one, the next one only after the last one's commit
    (one history actor under 64 writers made ~1,800 appends a second instead of ~10,000)."""
    groups: list[tuple[str, int]] = []  # the committing thread and the ops of each group
    commit = Journal._commit_lmdb

    def recording(journal: Journal, ops: list[Any], wake_previous: Any) -> Any:
        groups.append((threading.current_thread().name, len(ops)))
        return commit(journal, ops, wake_previous)

    monkeypatch.setattr(Journal, "_commit_lmdb", recording)
    log = open_log(tmp_path / "db", durability="none")
    with Host(log, config=QUIET, options=HostOptions(history_actors=1)) as opened:
        sessions = [opened.session(f"s{n}") for n in range(8)]
        for session in sessions:
            session.append(Message.user("first"))
        actor = _owner(opened, "s0")
        router = opened._router
        assert router is not None
        told = threading.Semaphore(0)
        real_tell = router.tell

        def tell(*args: Any) -> None:
            real_tell(*args)
            told.release()

        router.tell = tell  # type: ignore[method-assign]
        groups.clear()
        with actor._exclusive:  # as if the actor were handling a message: the commands wait
            writers = [
                threading.Thread(target=session.append, args=(Message.user("second"),))
                for session in sessions
            ]
            for writer in writers:
                writer.start()
            for _ in writers:
                assert told.acquire(timeout=120), "a command never reached the mailbox"
        for writer in writers:
            writer.join()
        assert all(len(session.history()) == 2 for session in sessions)
    on_the_actor = [ops for name, ops in groups if name.startswith("HistoryActor")]
    assert sum(ops for _, ops in groups) == 8
    # The last command may find the journal idle and the mailbox empty: committed in place.
    assert len(on_the_actor) <= 1 and len(groups) < 8, groups
