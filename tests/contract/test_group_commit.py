"""The backend-neutral GroupCommitter, driven by a scripted commit function (deterministic)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ctxledger.errors import StorageError, VersionConflictError
from ctxledger.storage._group_commit import GroupCommitter, Outcome, queued_commits


class Backend:
    """A commit function whose ops say what happens to them; groups can be held mid-commit.

    While ``held``, each group waits for one release of ``gate`` before it commits; every group
    releases ``entered`` once it is inside (after calling ``wake_previous``).
    """

    def __init__(self) -> None:
        self.groups: list[list[Any]] = []
        self.held = False
        self.gate = threading.Semaphore(0)
        self.entered = threading.Semaphore(0)
        self.committed: set[Any] = set()

    def commit(self, ops: list[Any], wake_previous: Callable[[], None]) -> list[Outcome]:
        """Record the group, call ``wake_previous``, wait while held, then 'commit'."""
        if "boom" in ops:
            raise RuntimeError("the server went away")
        self.groups.append(list(ops))
        wake_previous()
        held = self.held
        self.entered.release()
        if held:
            self.gate.acquire()
        self.committed.update(ops)
        return [
            (None, VersionConflictError("s", 1, 2)) if op == "conflict" else (f"done:{op}", None)
            for op in ops
        ]


@pytest.fixture
def backend() -> Backend:
    """A scripted backend."""
    return Backend()


@pytest.fixture(params=[False, True], ids=["wake-with-next", "wake-at-once"])
def committer(request: pytest.FixtureRequest, backend: Backend) -> Iterator[GroupCommitter]:
    """A committer over the scripted backend, in both wake modes, closed after the test."""
    opened = GroupCommitter(backend.commit, name="test-committer", wake_at_once=request.param)
    yield opened
    backend.held = False
    backend.gate.release(100)
    opened.close()


def submit_in_threads(
    committer: GroupCommitter, ops: list[Any]
) -> tuple[list[threading.Thread], dict]:
    """Submit each op from its own thread; outcomes land in the returned dict."""
    outcomes: dict[Any, Any] = {}

    def run(op: Any) -> None:
        try:
            outcomes[op] = committer.submit(op)
        except Exception as exc:
            outcomes[op] = exc

    threads = [threading.Thread(target=run, args=(op,)) for op in ops]
    for thread in threads:
        thread.start()
    return threads, outcomes


def queued_behind_a_held_group(committer: GroupCommitter, backend: Backend, ops: list[Any]) -> dict:
    """Hold a first group mid-commit, queue ``ops`` behind it, release; return all outcomes."""
    backend.held = True
    first, outcomes = submit_in_threads(committer, ["first"])
    backend.entered.acquire()
    rest, more = submit_in_threads(committer, ops)
    while committer._queue.qsize() < len(ops):
        threading.Event().wait(0.001)
    backend.held = False
    backend.gate.release()
    for thread in first + rest:
        thread.join()
    return {**outcomes, **more}


def test_submit_returns_the_backends_result(committer: GroupCommitter) -> None:
    """A lone op is committed and answered with its result."""
    assert committer.submit("a") == "done:a"


def test_ops_queued_during_a_commit_form_one_group(
    committer: GroupCommitter, backend: Backend
) -> None:
    """Everything that queues while a group commits is committed together next."""
    queued_behind_a_held_group(committer, backend, ["b", "c", "d", "e"])
    assert backend.groups[0] == ["first"] and sorted(backend.groups[1]) == ["b", "c", "d", "e"]


def test_an_op_that_fails_alone_does_not_fail_its_group(
    committer: GroupCommitter, backend: Backend
) -> None:
    """An op the backend reports as failed raises for its caller only."""
    outcomes = queued_behind_a_held_group(committer, backend, ["x", "conflict", "y"])
    assert (outcomes["x"], outcomes["y"]) == ("done:x", "done:y")
    assert isinstance(outcomes["conflict"], VersionConflictError)


def test_a_raising_commit_fails_every_op_of_the_group(
    committer: GroupCommitter, backend: Backend
) -> None:
    """An exception out of the commit function fails the whole group with StorageError, each
    caller with its own error chained to the cause; the next group commits normally."""
    outcomes = queued_behind_a_held_group(committer, backend, ["p", "boom", "q"])
    errors = [outcomes[op] for op in ("p", "boom", "q")]
    assert all(isinstance(error, StorageError) for error in errors)
    assert len({id(error) for error in errors}) == 3
    assert all(isinstance(error.__cause__, RuntimeError) for error in errors)
    assert committer.submit("after") == "done:after"


def test_callers_are_answered_only_after_the_commit(
    committer: GroupCommitter, backend: Backend
) -> None:
    """While a group's commit is held, none of its callers has returned."""
    backend.held = True
    threads, outcomes = submit_in_threads(committer, ["held"])
    backend.entered.acquire()
    threads[0].join(timeout=0.2)
    assert threads[0].is_alive() and "held" not in backend.committed and not outcomes
    backend.held = False
    backend.gate.release()
    threads[0].join()
    assert outcomes == {"held": "done:held"}


def test_previous_group_is_answered_before_the_next_commit_ends(backend: Backend) -> None:
    """Without wake_at_once, a group's callers are woken when the next group's commit begins
    (``wake_previous``), before that commit is over."""
    committer = GroupCommitter(backend.commit, name="test-committer")
    try:
        backend.held = True
        first, outcomes = submit_in_threads(committer, ["first"])
        backend.entered.acquire()
        second, more = submit_in_threads(committer, ["second"])
        while committer._queue.qsize() < 1:
            threading.Event().wait(0.001)
        backend.gate.release()  # "first" commits; "second" starts, wakes "first", is held
        backend.entered.acquire()
        first[0].join(timeout=60)
        assert not first[0].is_alive() and outcomes == {"first": "done:first"}
        assert second[0].is_alive() and not more  # its own commit is not over yet
    finally:
        backend.held = False
        backend.gate.release(100)
        committer.close()


def test_wake_at_once_answers_a_group_before_the_next_one_starts(backend: Backend) -> None:
    """With wake_at_once, a group's callers are woken as soon as it is committed, even while
    the next group is held."""
    committer = GroupCommitter(backend.commit, name="test-committer", wake_at_once=True)
    try:
        backend.held = True
        first, outcomes = submit_in_threads(committer, ["first"])
        backend.entered.acquire()
        second, more = submit_in_threads(committer, ["second"])
        while committer._queue.qsize() < 1:
            threading.Event().wait(0.001)
        backend.gate.release()
        first[0].join(timeout=60)
        assert not first[0].is_alive() and outcomes == {"first": "done:first"}
    finally:
        backend.held = False
        backend.gate.release(100)
        committer.close()
    second[0].join()
    assert more == {"second": "done:second"}


def test_aappend_style_submission_is_answered_on_the_loop(committer: GroupCommitter) -> None:
    """Tasks on an event loop get their results and their own errors."""

    async def go() -> tuple[list[Any], BaseException | None]:
        results = await asyncio.gather(*(committer.submit_async(f"t{i}") for i in range(8)))
        try:
            await committer.submit_async("conflict")
        except VersionConflictError as exc:
            return list(results), exc
        return list(results), None

    results, error = asyncio.run(go())
    assert results == [f"done:t{i}" for i in range(8)] and error is not None


def test_close_commits_what_was_queued_then_refuses(
    committer: GroupCommitter, backend: Backend
) -> None:
    """close() commits the queued ops, and later submissions raise StorageError."""
    backend.held = True
    threads, outcomes = submit_in_threads(committer, ["a", "b", "c"])
    backend.entered.acquire()
    while len(backend.groups[0]) + committer._queue.qsize() < 3:
        threading.Event().wait(0.001)
    closing = threading.Thread(target=committer.close)
    closing.start()
    backend.held = False
    backend.gate.release()
    closing.join()
    for thread in threads:
        thread.join()
    assert outcomes == {op: f"done:{op}" for op in "abc"}
    with pytest.raises(StorageError, match="closed"):
        committer.submit("late")


# --- inline commits (``inline_when_idle``: the LMDB journal) -----------------------------------


@pytest.fixture
def inline(backend: Backend) -> Iterator[GroupCommitter]:
    """A committer that commits a callback submission on the submitting thread when nothing
    else is outstanding."""
    opened = GroupCommitter(backend.commit, name="test-committer", inline_when_idle=True)
    yield opened
    backend.held = False
    backend.gate.release(100)
    opened.close()


def _recording(
    answers: list[tuple[Any, Any, str]], done: threading.Event | None = None
) -> Callable[[Any, Any], None]:
    def callback(result: Any, error: BaseException | None) -> None:
        answers.append((result, error, threading.current_thread().name))
        if done is not None:
            done.set()

    return callback


def test_a_lone_callback_submission_commits_on_the_submitting_thread(
    inline: GroupCommitter, backend: Backend
) -> None:
    """Nothing outstanding: the op is committed, and its callback called, before
    submit_callback returns, on the caller's thread (no hand-off to the committer)."""
    answers: list[tuple[Any, Any, str]] = []
    inline.submit_callback("a", _recording(answers))
    assert answers == [("done:a", None, threading.current_thread().name)]
    assert backend.groups == [["a"]]


def test_within_queued_commits_a_lone_submission_goes_to_the_committers_thread(
    inline: GroupCommitter, backend: Backend
) -> None:
    """Nothing outstanding, but the submitter has more to submit (``queued_commits``, a history
    actor with commands in its mailbox): the op is queued, committed and answered on the
    committer's thread, where the next ones may join its group; out of the block the next lone
    op is committed inline again."""
    answers: list[tuple[Any, Any, str]] = []
    done = threading.Event()
    with queued_commits():
        inline.submit_callback("a", _recording(answers, done))
    assert done.wait(30)
    assert answers == [("done:a", None, "test-committer")]
    inline.submit_callback("b", _recording(answers))
    assert answers[-1] == ("done:b", None, threading.current_thread().name)
    assert backend.groups == [["a"], ["b"]]


def test_queued_commits_nests_restores_on_error_and_is_per_thread(
    inline: GroupCommitter, backend: Backend
) -> None:
    """The block's flag is the calling thread's alone, an inner block leaves the outer one in
    force, and a block left by an exception ends it: a lone submission made after each is
    committed where the flag in force says."""
    answers: list[tuple[Any, Any, str]] = []
    queued = threading.Event()
    with queued_commits():
        other: list[tuple[Any, Any, str]] = []
        thread = threading.Thread(
            target=lambda: inline.submit_callback("other", _recording(other)), name="other"
        )
        thread.start()
        thread.join(30)
        assert other == [("done:other", None, "other")]  # not in a block: inline, its thread
        with queued_commits():
            pass
        inline.submit_callback("a", _recording(answers, queued))  # the outer block still holds
        assert queued.wait(30)
    assert answers == [("done:a", None, "test-committer")]
    with pytest.raises(RuntimeError), queued_commits():
        raise RuntimeError("left by an exception")
    inline.submit_callback("b", _recording(answers))
    assert answers[-1] == ("done:b", None, threading.current_thread().name)
    assert backend.groups == [["other"], ["a"], ["b"]]


def test_a_submission_from_an_event_loop_is_committed_by_the_committers_thread(
    inline: GroupCommitter, backend: Backend
) -> None:
    """Nothing outstanding, but the submitting thread runs an event loop, which must not block
    on a commit: the op goes to the committer's thread, which calls the callback."""
    import asyncio

    answers: list[tuple[Any, Any, str]] = []
    done = threading.Event()

    def callback(result: Any, error: BaseException | None) -> None:
        _recording(answers)(result, error)
        done.set()

    async def submit() -> None:
        inline.submit_callback("a", callback)

    asyncio.run(submit())
    assert done.wait(30)
    assert answers == [("done:a", None, "test-committer")]
    assert backend.groups == [["a"]]


def test_an_outstanding_request_is_never_overtaken(
    inline: GroupCommitter, backend: Backend
) -> None:
    """While a group is being committed (or queued), a callback submission queues behind it
    and is answered on the committer's thread, in order."""
    backend.held = True
    first, outcomes = submit_in_threads(inline, ["first"])
    backend.entered.acquire()  # "first" is mid-commit on the committer's thread
    answers: list[tuple[Any, Any, str]] = []
    inline.submit_callback("second", _recording(answers))
    assert answers == [] and inline._queue.qsize() == 1  # queued, not committed inline
    backend.held = False
    backend.gate.release()
    first[0].join()
    inline.submit("sync")  # answered after "second"'s group: its callback has run
    assert backend.groups[:2] == [["first"], ["second"]]
    assert answers == [("done:second", None, "test-committer")]
    assert outcomes == {"first": "done:first"}


def test_a_storage_failure_of_an_inline_commit_fails_that_op_alone(
    inline: GroupCommitter, backend: Backend
) -> None:
    """A commit that raises answers the inline op with a StorageError chained to the cause;
    the committer goes on."""
    answers: list[tuple[Any, Any, str]] = []
    inline.submit_callback("boom", _recording(answers))
    (result, error, _thread), = answers
    assert result is None and isinstance(error, StorageError)
    assert isinstance(error.__cause__, RuntimeError)
    assert inline.submit("after") == "done:after"


def test_close_waits_for_an_inline_commit_in_progress(backend: Backend) -> None:
    """close() does not return while a submitter's inline commit is still in the backend (the
    LMDB environment is closed right after it)."""
    committer = GroupCommitter(backend.commit, name="test-committer", inline_when_idle=True)
    backend.held = True
    answers: list[tuple[Any, Any, str]] = []
    submitter = threading.Thread(
        target=committer.submit_callback, args=("held", _recording(answers)), name="submitter"
    )
    submitter.start()
    backend.entered.acquire()  # mid-commit on the submitter's thread
    closing = threading.Thread(target=committer.close)
    closing.start()
    closing.join(timeout=0.2)
    assert closing.is_alive() and answers == []
    backend.held = False
    backend.gate.release()
    closing.join()
    submitter.join()
    assert answers == [("done:held", None, "submitter")]
    answers.clear()
    committer.submit_callback("late", _recording(answers))
    assert isinstance(answers[0][1], StorageError)


def test_after_close_a_callback_submission_is_refused(inline: GroupCommitter) -> None:
    """No inline commit once closed: the callback gets the closed log's StorageError."""
    inline.close()
    answers: list[tuple[Any, Any, str]] = []
    inline.submit_callback("late", _recording(answers))
    assert answers[0][0] is None and "closed" in str(answers[0][1])


class _HeldGather(GroupCommitter):
    """A committer whose thread, once it took a request off the queue, waits before gathering
    the rest of its group: the queue is empty and no commit is running, yet a request is
    outstanding."""

    def __init__(self, commit: Callable[..., list[Outcome]]) -> None:
        self.gathering = threading.Event()
        self.go = threading.Event()
        super().__init__(commit, name="test-committer", inline_when_idle=True)

    def _gather(self, first: Any) -> tuple[list[Any], bool]:
        self.gathering.set()
        self.go.wait()
        return super()._gather(first)


def test_a_request_taken_off_the_queue_is_not_overtaken(backend: Backend) -> None:
    """A request the committer's thread has taken but not yet committed still counts: a
    callback submission made meanwhile is queued behind it, not committed inline first."""
    committer = _HeldGather(backend.commit)
    try:
        first, outcomes = submit_in_threads(committer, ["first"])
        committer.gathering.wait()
        answers: list[tuple[Any, Any, str]] = []
        committer.submit_callback("second", _recording(answers))
        assert answers == [] and backend.groups == []
        committer.go.set()
        first[0].join()
        committer.submit("sync")
        assert [op for group in backend.groups for op in group] == ["first", "second", "sync"]
        assert answers == [("done:second", None, "test-committer")]
        assert outcomes == {"first": "done:first"}
    finally:
        committer.go.set()
        committer.close()


class _FaultyGather(GroupCommitter):
    """A committer whose own code fails (not the storage): its thread raises while it gathers
    the group that holds ``"fault"``, after taking the request before it off the queue."""

    def __init__(self, commit: Callable[..., list[Outcome]]) -> None:
        self.taken = threading.Event()
        self.go = threading.Event()
        super().__init__(commit, name="test-committer")

    def _gather(self, first: Any) -> tuple[list[Any], bool]:
        if first.op == "taken":
            self.taken.set()
            self.go.wait()
        requests, stop = super()._gather(first)
        if "fault" in [request.op for request in requests]:
            raise ZeroDivisionError("a fault of the committer's own code")
        return requests, stop


def test_a_fault_of_the_committers_thread_leaves_no_caller_waiting(backend: Backend) -> None:
    """The thread dies: the group it had committed is answered with its outcomes, the requests
    it had taken and those queued fail with a StorageError naming the fault, and so does every
    later submission; nothing of the failed group was written."""
    committer = _FaultyGather(backend.commit)
    try:
        assert committer.submit("first") == "done:first"
        taken, outcomes = submit_in_threads(committer, ["taken"])
        committer.taken.wait()  # held while gathering: the next submissions queue behind it
        answers: list[tuple[Any, Any, str]] = []
        committer.submit_callback("fault", _recording(answers))
        queued, more = submit_in_threads(committer, ["queued"])
        committer.go.set()
        for thread in [*taken, *queued]:
            thread.join(timeout=30)
            assert not thread.is_alive(), "a caller was left waiting"
        for outcome in (outcomes["taken"], more["queued"]):
            assert isinstance(outcome, StorageError)
            assert "writer thread failed" in str(outcome) and "ZeroDivisionError" in str(outcome)
        assert [type(error) for _, error, _ in answers] == [StorageError]
        with pytest.raises(StorageError, match="writer thread failed"):
            committer.submit("later")
        assert [op for group in backend.groups for op in group] == ["first"]
    finally:
        committer.go.set()
        committer.close()
