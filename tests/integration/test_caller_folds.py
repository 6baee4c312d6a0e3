"""A blocking caller's recording command (an append, a pin, usage...) whose batch the journal's
thread committed is folded on the caller's thread before it goes on (``CallerRuns.fold_posted``),
not by waking the history actor's; a step's batch stays the actor's to fold; a caller that stops
waiting leaves its batch to the actor (an interruption in the middle of that fold:
``test_inline_commands``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_inline_commands import QUIET, _owner, _until_idle

from ctxledger import Host, Message
from ctxledger.actors.messages import Execute
from ctxledger.actors.waiters import Waiter
from ctxledger.actors.writes import Writes
from ctxledger.domain.commands import AppendMessages
from ctxledger.storage import open_log, queued_commits
from guards import call_in_thread


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    with Host(open_log(tmp_path / "db", durability="none"), config=QUIET) as opened:
        yield opened


def _folds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads that fold a durable batch from now on, in order."""
    threads: list[str] = []
    real = Writes._fold

    def fold(self: Writes, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Writes, "_fold", fold)
    return threads


def _append(text: str, *, abandoned: bool = False) -> tuple[Waiter, Execute]:
    """An append's command as ``Host._call`` hands it over, with its reply slot."""
    reply = Waiter()
    reply.folds = True
    reply.abandoned = abandoned  # (as Host._call marks itself when its wait is interrupted)
    return reply, Execute("s", reply, AppendMessages(messages=(Message.user(text),)))


def _thread_of(actor: Any) -> str:
    """The name of the history actor's own thread."""
    return next(t.name for t in threading.enumerate() if t.ident == actor._thread_id)


def test_an_appends_batch_committed_by_the_journal_is_folded_by_its_caller(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The append is carried out on the caller's thread, its batch committed by the journal's
    (as when other batches are outstanding): the batch is folded on the caller's thread before
    ``append`` returns, and the history actor's thread is neither told nor woken."""
    session = host.session("s")
    session.append(Message.user("first"))
    actor = _owner(host, "s")
    _until_idle(actor)
    folds = _folds(monkeypatch)
    handled = actor._handled
    with queued_commits():  # this thread's batches go to the journal's thread
        seqs = [session.append(Message.user(f"m{n}")) for n in range(3)]
    assert seqs == [2, 3, 4]
    assert folds == ["MainThread"] * 3
    assert actor._handled == handled  # the actor's own thread handled no message
    assert actor.actor_inbox.empty()
    assert not actor._durables.waiting() and not actor._durables._told
    assert [m.content for m in session.history()] == ["first", "m0", "m1", "m2"]


def test_a_steps_batch_is_folded_by_the_actor(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step serves a view: what folding its batch may start (a summary prepared ahead, a
    snapshot) is the actor's work, on its own thread, beside the caller."""
    session = host.session("s")
    session.append(Message.user("first"))
    actor = _owner(host, "s")
    _until_idle(actor)
    folds = _folds(monkeypatch)
    with queued_commits():
        view = session.step([Message.assistant("second")])
    assert view.appended_seqs == (2,)
    _until_idle(actor)
    assert folds == [_thread_of(actor)]


def test_a_batch_the_actor_committed_on_its_own_thread_is_folded_there(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command that reached the actor through its mailbox (the actor was busy), its batch
    committed by the actor's own thread (the journal idle): the actor, awake, folds it while
    the caller wakes; the caller is not asked to."""
    session = host.session("s")
    session.append(Message.user("first"))
    actor = _owner(host, "s")
    _until_idle(actor)
    folds = _folds(monkeypatch)
    reply, command = _append("second")
    with actor._exclusive:  # as if the actor were handling a message: the command takes the
        # mailbox (the lock is reentrant: the submission is made on another thread)
        call_in_thread(lambda: host._submit("s", command, wait=True))
    assert reply.wait() == [2]
    assert reply.posted_to is None
    _until_idle(actor)
    assert folds == [_thread_of(actor)]


def test_a_caller_that_stops_waiting_leaves_its_batch_to_the_actor(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller that no longer waits when its batch becomes durable (interrupted before its
    answer came) cannot fold it: the journal tells the actor instead, which folds it, and the
    session goes on."""
    session = host.session("s")
    session.append(Message.user("first"))
    actor = _owner(host, "s")
    _until_idle(actor)
    folds = _folds(monkeypatch)
    reply, command = _append("second", abandoned=True)
    with queued_commits():
        host._submit("s", command, wait=True)
    assert reply.wait() == [2]
    assert reply.posted_to is actor
    _until_idle(actor)
    assert not actor._durables.waiting()
    assert folds == [_thread_of(actor)]
    assert [m.content for m in session.history()] == ["first", "second"]
