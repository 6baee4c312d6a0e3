"""The journal's group commit, driven with a fake environment so that grouping is deterministic."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import lmdb
import pytest

from ctxledger.errors import StorageError, VersionConflictError
from ctxledger.storage import _group_commit as committer_module
from ctxledger.storage.journal import Journal, RequestFailed


class FakeTxn:
    """Records the ops written into it, and whether it was committed or aborted."""

    def __init__(self, env: FakeEnv) -> None:
        self.env = env
        self.committed = False
        self.aborted = False
        self.ops: list[Any] = []

    def commit(self) -> None:
        """Mark committed, or raise the storage failure the test scripted for this commit."""
        failure = self.env.fail_commits.pop(0) if self.env.fail_commits else None
        if failure is not None:
            raise failure
        self.committed = True

    def abort(self) -> None:
        """Mark aborted."""
        self.aborted = True


class FakeEnv:
    """Hands out fake write transactions; ``fail_commits`` scripts the next commits' failures."""

    def __init__(self) -> None:
        self.txns: list[FakeTxn] = []
        self.fail_commits: list[BaseException | None] = []

    def begin(self, write: bool = False) -> FakeTxn:
        """Begin a fake transaction."""
        assert write
        self.txns.append(FakeTxn(self))
        return self.txns[-1]

    def committed_ops(self) -> list[Any]:
        """Every op written by a committed transaction, in commit order."""
        return [op for txn in self.txns if txn.committed for op in txn.ops]


class Writer:
    """A GroupWriter whose ops say what should happen to them; a group can be held at its start."""

    def __init__(self) -> None:
        self.groups: list[list[Any]] = []
        self.txn_of: dict[Any, FakeTxn] = {}
        self.hold = threading.Event()
        self.hold.set()
        self.entered = threading.Event()
        self.aborted = 0
        self.map_full_once = True

    def begin_group(self, txn: FakeTxn) -> None:
        """Start recording a group; wait while held."""
        self.entered.set()
        self.hold.wait()
        self.groups.append([])

    def apply(self, txn: FakeTxn, op: Any) -> tuple[Any, BaseException | None]:
        """Apply one scripted op."""
        if op == "map_full" and self.map_full_once:
            self.map_full_once = False
            raise lmdb.MapFullError("full")
        if op == "boom":
            raise RuntimeError("writer broke")
        txn.ops.append(op)  # written, even if refused below: the journal must roll it back
        if op.startswith("refused"):
            raise RequestFailed(ValueError(f"{op} is too long"))
        self.groups[-1].append(op)
        self.txn_of[op] = txn
        if op == "conflict":
            return None, VersionConflictError("s", 1, 2)
        return f"done:{op}", None

    def finish_group(self, txn: FakeTxn) -> None:
        """Nothing to finish."""

    def group_committed(self) -> None:
        """Nothing to publish."""

    def group_aborted(self) -> None:
        """Forget the aborted group; count aborts."""
        self.groups.pop()
        self.aborted += 1


@pytest.fixture
def writer() -> Writer:
    """A scripted writer."""
    return Writer()


@pytest.fixture
def grown() -> list[int]:
    """Counts map growths."""
    return []


@pytest.fixture
def env() -> FakeEnv:
    """The fake environment under the journal."""
    return FakeEnv()


@pytest.fixture
def journal(env: FakeEnv, writer: Writer, grown: list[int]) -> Any:
    """A journal over a fake environment, closed after the test."""
    opened = Journal(env, writer, grow=lambda: grown.append(1))  # type: ignore[arg-type]
    yield opened
    writer.hold.set()
    opened.close()


def submit_in_threads(journal: Journal, ops: list[Any]) -> tuple[list[threading.Thread], dict]:
    """Submit each op from its own thread; outcomes land in the returned dict."""
    outcomes: dict[Any, Any] = {}

    def run(op: Any) -> None:
        try:
            outcomes[op] = journal.submit(op)
        except Exception as exc:
            outcomes[op] = exc

    threads = [threading.Thread(target=run, args=(op,)) for op in ops]
    for thread in threads:
        thread.start()
    return threads, outcomes


def wait_until_queued(journal: Journal, count: int) -> None:
    """Spin until ``count`` requests wait in the journal's queue."""
    while journal._queue.qsize() < count:
        threading.Event().wait(0.001)


def queued_behind_a_held_group(journal: Journal, writer: Writer, ops: list[Any]) -> dict:
    """Hold a first group in the writer, queue ``ops`` behind it, release; return outcomes."""
    writer.hold.clear()
    writer.entered.clear()  # set by any earlier group: wait for this one to be held
    first, _ = submit_in_threads(journal, ["first"])
    writer.entered.wait()
    rest, outcomes = submit_in_threads(journal, ops)
    wait_until_queued(journal, len(ops))
    writer.hold.set()
    for thread in first + rest:
        thread.join()
    return outcomes


def test_submit_returns_the_writers_result(journal: Journal) -> None:
    """A lone request is written, committed, and answered with its result."""
    assert journal.submit("a") == "done:a"


def test_requests_queued_during_a_commit_form_one_group(journal: Journal, writer: Writer) -> None:
    """Everything that queues while a group is being written is written together next."""
    queued_behind_a_held_group(journal, writer, ["b", "c", "d", "e"])
    assert sorted(writer.groups[1]) == ["b", "c", "d", "e"]


def test_a_failed_request_does_not_fail_its_group(journal: Journal, writer: Writer) -> None:
    """A conflicting request fails alone; the others in its group succeed."""
    outcomes = queued_behind_a_held_group(journal, writer, ["x", "conflict", "y"])
    assert outcomes["x"] == "done:x" and outcomes["y"] == "done:y"
    assert isinstance(outcomes["conflict"], VersionConflictError)


def test_callers_are_answered_only_after_their_commit(
    journal: Journal, writer: Writer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the moment the journal answers a caller, the transaction holding its op has committed.

    Checked inside the answer itself rather than after the caller wakes, so an answer sent
    before the commit fails this test every time instead of only when it wins a race. Covers a
    lone request (answered at once) and a group answered while the next group is written.
    """
    seen: dict[Any, bool] = {}
    answer = committer_module._Request.resolve

    def checked(request: Any, result: Any, error: BaseException | None) -> None:
        seen[request.op] = request.op in writer.txn_of and writer.txn_of[request.op].committed
        answer(request, result, error)

    monkeypatch.setattr(committer_module._Request, "resolve", checked)
    journal.submit("a")
    queued_behind_a_held_group(journal, writer, ["b", "c", "d"])
    journal.submit("e")
    assert seen == dict.fromkeys(["a", "first", "b", "c", "d", "e"], True)


def test_async_callers_are_answered_only_after_their_commit(
    journal: Journal, writer: Writer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for tasks on an event loop: their loop is called only after the commit."""
    seen: dict[Any, bool] = {}
    call_in = committer_module._call_in

    def checked(loop: asyncio.AbstractEventLoop, items: list[tuple[Any, Any, Any]]) -> None:
        for _, result, _ in items:
            op = result.removeprefix("done:")
            seen[op] = writer.txn_of[op].committed
        call_in(loop, items)

    monkeypatch.setattr(committer_module, "_call_in", checked)

    async def go() -> list[Any]:
        return await asyncio.gather(*(journal.submit_async(op) for op in ["a", "b", "c"]))

    assert asyncio.run(go()) == ["done:a", "done:b", "done:c"]
    assert seen == dict.fromkeys(["a", "b", "c"], True)


def test_a_request_refused_mid_write_is_left_out_and_the_group_written_again(
    journal: Journal, env: FakeEnv, writer: Writer
) -> None:
    """A request that fails after writing part of itself fails alone; the rest commit without it.

    The transaction that held its partial write is aborted, never committed.
    """
    outcomes = queued_behind_a_held_group(journal, writer, ["x", "refused-1", "y", "z"])
    assert {op: outcomes[op] for op in "xyz"} == {op: f"done:{op}" for op in "xyz"}
    refused = outcomes["refused-1"]
    assert isinstance(refused, ValueError) and "too long" in str(refused)
    assert sorted(env.committed_ops()) == ["first", "x", "y", "z"]
    assert any(txn.aborted and "refused-1" in txn.ops for txn in env.txns)


def test_several_refused_requests_in_one_group_each_fail_alone(
    journal: Journal, env: FakeEnv, writer: Writer
) -> None:
    """Every refused request of a group gets its own error; every other one its own result."""
    ops = ["refused-1", "a", "refused-2", "b", "conflict", "refused-3"]
    outcomes = queued_behind_a_held_group(journal, writer, ops)
    assert (outcomes["a"], outcomes["b"]) == ("done:a", "done:b")
    assert isinstance(outcomes["conflict"], VersionConflictError)
    for op in ("refused-1", "refused-2", "refused-3"):
        assert isinstance(outcomes[op], ValueError) and op in str(outcomes[op])
    assert sorted(env.committed_ops()) == ["a", "b", "conflict", "first"]


def test_a_group_of_refused_requests_commits_nothing(journal: Journal, env: FakeEnv) -> None:
    """When every request fails on its own, no transaction commits and the journal goes on."""
    with pytest.raises(ValueError, match="too long"):
        journal.submit("refused-alone")
    assert env.committed_ops() == []
    assert journal.submit("next") == "done:next"


def test_a_storage_failure_fails_the_whole_group_and_commits_nothing(
    journal: Journal, env: FakeEnv, writer: Writer
) -> None:
    """A commit the storage fails (disk full) fails every request of the group, naming it."""
    env.fail_commits = [None, lmdb.DiskError("mdb_txn_commit: No space left on device")]
    outcomes = queued_behind_a_held_group(journal, writer, ["p", "q", "refused-9"])
    for op in ("p", "q"):
        error = outcomes[op]
        assert isinstance(error, StorageError) and "No space left on device" in str(error)
        assert isinstance(error.__cause__, lmdb.DiskError)
    assert isinstance(outcomes["refused-9"], ValueError)  # its own error, not the group's
    assert env.committed_ops() == ["first"]
    assert journal.submit("after") == "done:after"


def test_a_storage_failure_is_described_by_explain(writer: Writer) -> None:
    """The StorageError carries what ``explain`` says of the failure (e.g. a full disk)."""
    env = FakeEnv()
    env.fail_commits = [lmdb.Error("mdb_txn_commit: Input/output error")]
    journal = Journal(
        env,  # type: ignore[arg-type]
        writer,
        grow=lambda: None,
        explain=lambda exc: f"disk full: 0 bytes free ({exc})",
    )
    try:
        with pytest.raises(StorageError, match=r"disk full: 0 bytes free \(mdb_txn_commit"):
            journal.submit("a")
    finally:
        journal.close()


def test_a_map_that_cannot_grow_fails_the_group_naming_it(writer: Writer) -> None:
    """MDB_MAP_FULL followed by a failed growth fails the group with StorageError saying so."""

    def cannot_grow() -> None:
        raise lmdb.MemoryError("mdb_env_set_mapsize: Cannot allocate memory")

    journal = Journal(FakeEnv(), writer, grow=cannot_grow)  # type: ignore[arg-type]
    try:
        with pytest.raises(StorageError, match="the map cannot grow"):
            journal.submit("map_full")
    finally:
        journal.close()


def test_writer_exception_fails_the_group_with_storage_error(journal: Journal) -> None:
    """An unexpected error while writing fails the group's callers with StorageError."""
    with pytest.raises(StorageError) as caught:
        journal.submit("boom")
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_journal_keeps_working_after_a_failed_group(journal: Journal) -> None:
    """A failed group does not stop the journal thread."""
    with pytest.raises(StorageError):
        journal.submit("boom")
    assert journal.submit("after") == "done:after"


def test_map_full_grows_the_map_and_retries(
    journal: Journal, writer: Writer, grown: list[int]
) -> None:
    """MDB_MAP_FULL aborts the group, grows the map once, and retries it."""
    assert journal.submit("map_full") == "done:map_full"
    assert (grown, writer.aborted) == ([1], 1)


def test_close_commits_what_was_submitted(writer: Writer) -> None:
    """Requests queued before close() are committed before the thread stops."""
    journal = Journal(FakeEnv(), writer, grow=lambda: None)  # type: ignore[arg-type]
    writer.hold.clear()
    first, outcomes = submit_in_threads(journal, ["a"])
    writer.entered.wait()
    rest, more = submit_in_threads(journal, ["b", "c"])
    wait_until_queued(journal, 2)
    closer = threading.Thread(target=journal.close)
    closer.start()
    writer.hold.set()
    for thread in [*first, *rest, closer]:
        thread.join()
    assert {**outcomes, **more} == {"a": "done:a", "b": "done:b", "c": "done:c"}


def test_submit_after_close_raises(writer: Writer) -> None:
    """A closed journal refuses new requests."""
    journal = Journal(FakeEnv(), writer, grow=lambda: None)  # type: ignore[arg-type]
    journal.close()
    with pytest.raises(StorageError, match="closed"):
        journal.submit("late")


def test_async_submissions_are_answered_on_their_loop(journal: Journal) -> None:
    """submit_async resolves each awaiting task with its own result, or raises its error."""

    async def go() -> list[Any]:
        return await asyncio.gather(
            *(journal.submit_async(op) for op in ["a", "b", "conflict", "c"]),
            return_exceptions=True,
        )

    a, b, conflict, c = asyncio.run(go())
    assert (a, b, c) == ("done:a", "done:b", "done:c")
    assert isinstance(conflict, VersionConflictError)


def test_async_submission_on_a_closed_journal_raises(writer: Writer) -> None:
    """A closed journal refuses an awaited request too."""
    journal = Journal(FakeEnv(), writer, grow=lambda: None)  # type: ignore[arg-type]
    journal.close()
    with pytest.raises(StorageError, match="closed"):
        asyncio.run(journal.submit_async("late"))


def test_a_group_waits_for_the_callers_expected_back(writer: Writer) -> None:
    """After a group of 4, the group after next waits for 4 requests arriving one by one."""
    journal = Journal(
        FakeEnv(),  # type: ignore[arg-type]
        writer,
        grow=lambda: None,
        gather_gap=5.0,  # as patient as a slow CI needs
        gather_max=5.0,
    )
    try:
        _expect_a_group_of_four(journal, writer)
    finally:
        journal.close()


def _expect_a_group_of_four(journal: Journal, writer: Writer) -> None:
    queued_behind_a_held_group(journal, writer, ["b", "c", "d", "e"])
    # The next two groups expect 1 and then 4 requests (the sizes of the groups two back).
    assert journal.submit("solo") == "done:solo"
    for op in ["w", "x", "y", "z"]:
        threading.Thread(target=journal.submit, args=(op,)).start()
        threading.Event().wait(0.01)  # far apart: without the wait each would be its own group
    while sum(len(group) for group in writer.groups) < 10:
        threading.Event().wait(0.001)
    assert sorted(writer.groups[-1]) == ["w", "x", "y", "z"]
