"""The journal: one thread that owns the LMDB write transaction and group-commits requests.

Callers :meth:`Journal.submit` a request from any thread and block until it is durable, or
``await`` :meth:`Journal.submit_async` from an event loop. The journal thread takes the queued
requests as one group, applies each in ONE write transaction, and commits: one fsync for the
whole group.

Each request succeeds or fails on its own (see the fault-isolation rule of
:class:`~ctxledger.storage.EventLog`). A request the writer refuses before writing anything (a
version conflict) is simply left out. A request that fails while it writes (LMDB refuses one of
its keys or values) may have left part of itself in the transaction, so the journal aborts the
transaction and writes the group again without it (:class:`RequestFailed`): every other request
commits as if it had arrived alone. Only a failure of the storage itself (disk full, an I/O
error, a map that cannot grow) fails the whole group, and then nothing of it is visible.

Two groups are in flight at a time. The callers of a committed group are woken only once the next
group is written, just before its commit: their threads then prepare their next appends while
that fsync runs (it releases the GIL) instead of competing for the GIL with the journal's puts
(every LMDB put releases and re-takes the GIL, and re-taking it behind dozens of runnable threads
costs more than the put). When nothing else is queued, callers are woken at once.

A group waits for as many requests as the group before the last one had (the callers woken
meanwhile are likely to come straight back), but for no more than :data:`GATHER_GAP` seconds
without an arrival and :data:`GATHER_MAX` seconds in all, so a lone caller never waits.

The journal also encodes the events (see :class:`~ctxledger.storage._lmdb_writer.AppendOp`), so
that callers hold the GIL as briefly as possible. Callers on an event loop are answered with one
``call_soon_threadsafe`` per loop and group, not one thread wake-up per caller.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import lmdb

from ctxledger._logging import get_logger
from ctxledger.errors import StorageError

__all__ = ["GATHER_GAP", "GATHER_MAX", "Gate", "GroupWriter", "Journal", "RequestFailed"]

_log = get_logger(__name__)

#: Seconds a group waits for one more expected request before it is written without it.
GATHER_GAP = 0.0005
#: Seconds a group may wait for expected requests in all, from its first request.
GATHER_MAX = 0.002


class RequestFailed(Exception):
    """Raised by :meth:`GroupWriter.apply` when its op failed for a reason of its own mid-write.

    The op may have left part of itself in the transaction: the journal aborts it, answers the
    op's caller with ``error`` alone, and writes the rest of the group again in a new
    transaction.

    Args:
        error: What the op's caller raises.
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class GroupWriter(Protocol):
    """What the journal drives: applies the requests of one group inside a write transaction."""

    def begin_group(self, txn: lmdb.Transaction) -> None:
        """Start a group in the fresh write transaction ``txn``."""
        ...

    def apply(self, txn: lmdb.Transaction, op: Any) -> tuple[Any, BaseException | None]:
        """Apply one op; return ``(result, error)``.

        A failed op (``error`` set) must leave nothing of itself in ``txn``. An op that fails for
        a reason of its own after it may have written raises :class:`RequestFailed`: the group
        is written again without it. Any other exception raised out of this method is a failure
        of the storage and fails the whole group.
        """
        ...

    def finish_group(self, txn: lmdb.Transaction) -> None:
        """Write what the group changed as a whole, just before the commit."""
        ...

    def group_committed(self) -> None:
        """Publish the state of the group just committed (caches, counters)."""
        ...

    def group_aborted(self) -> None:
        """Forget the state of the group just aborted."""
        ...


class Gate:
    """Lets readers run together and lets the map be resized (or the env closed) by itself.

    LMDB may only resize its map while no transaction of the process is open: a resize remaps
    memory that an open read cursor points into.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._exclusive = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        """Hold the gate open for one read transaction."""
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers and self._exclusive:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the gate closed: no reader is inside until this block ends."""
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            self._exclusive = True  # new readers wait from here on, so a resize cannot starve
            while self._readers:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


class _Request:
    """A caller blocked in :meth:`Journal.submit`."""

    __slots__ = ("_done", "error", "op", "result")

    def __init__(self, op: Any) -> None:
        self.op = op
        self.result: Any = None
        self.error: BaseException | None = None
        # A pre-acquired lock is the cheapest one-shot "done" signal between two threads.
        self._done = threading.Lock()
        self._done.acquire()

    def resolve(self, result: Any, error: BaseException | None) -> None:
        self.result, self.error = result, error
        self._done.release()

    def wait(self) -> Any:
        self._done.acquire()
        if self.error is not None:
            raise self.error
        return self.result


class _CallbackRequest:
    """A caller that gave a callback to :meth:`Journal.submit_callback` and went on."""

    __slots__ = ("callback", "op")

    def __init__(self, op: Any, callback: Callable[[Any, BaseException | None], None]) -> None:
        self.op = op
        self.callback = callback

    def resolve(self, result: Any, error: BaseException | None) -> None:
        try:
            self.callback(result, error)
        except Exception:  # a callback must not raise; if one does, the journal goes on
            _log.exception("append callback raised")


class _AsyncRequest:
    """A caller awaiting :meth:`Journal.submit_async` on an event loop."""

    __slots__ = ("future", "loop", "op")

    def __init__(self, op: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.op = op
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()

    def resolve(self, result: Any, error: BaseException | None) -> None:
        _call_in(self.loop, [(self.future, result, error)])


def _call_in(loop: asyncio.AbstractEventLoop, items: list[tuple[Any, Any, Any]]) -> None:
    try:
        loop.call_soon_threadsafe(_settle, items)
    except RuntimeError:  # the loop is closed: nobody is left to answer
        _log.warning("event loop closed before its appends were answered", requests=len(items))


def _settle(items: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    for future, result, error in items:
        if future.cancelled():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)


_STOP = object()
_Answer = tuple[Any, Any, BaseException | None]  # a committed request and its outcome


class Journal:
    """The single writer of one LMDB environment, group-committing requests from many threads.

    Args:
        env: The environment; the journal is the only code that begins write transactions in it.
        writer: Applies each group inside the transaction.
        grow: Enlarges the map; called (on the journal thread) after ``MDB_MAP_FULL``, then the
            group is retried from scratch.
        explain: Describes a storage failure for the callers' :class:`StorageError` (for
            example "disk full: 0 bytes free on ..."); the failure's own text by default.
        name: The thread's name.
    """

    def __init__(
        self,
        env: lmdb.Environment,
        writer: GroupWriter,
        *,
        grow: Callable[[], None],
        explain: Callable[[BaseException], str] = str,
        name: str = "ctxledger-journal",
    ) -> None:
        self._env = env
        self._writer = writer
        self._grow = grow
        self._explain = explain
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False  # no new submissions
        self._stopped = False  # the thread has committed its last group
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, op: Any) -> Any:
        """Queue ``op``, wait until its group is committed, and return its result.

        Raises:
            StorageError: The journal is closed, or the transaction failed.
            Exception: The error the writer reported for this op (for example a version conflict).
        """
        request = _Request(op)
        self._enqueue(request)
        return request.wait()

    async def submit_async(self, op: Any) -> Any:
        """Like :meth:`submit`, awaiting the commit instead of blocking the thread.

        Cancelling the awaiting task does not withdraw ``op``: it may still be committed.

        Raises:
            StorageError: The journal is closed, or the transaction failed.
            Exception: The error the writer reported for this op (for example a version conflict).
        """
        request = _AsyncRequest(op, asyncio.get_running_loop())
        self._enqueue(request)
        return await request.future

    def submit_callback(
        self, op: Any, callback: Callable[[Any, BaseException | None], None]
    ) -> None:
        """Queue ``op`` and return; ``callback(result, error)`` runs on the journal thread.

        It is called once, when ``op``'s group is committed (or fails, or the journal closes);
        callbacks of one group run in the order their ops were queued.
        """
        request = _CallbackRequest(op, callback)
        try:
            self._enqueue(request)
        except StorageError as exc:
            request.resolve(None, exc)

    def close(self) -> None:
        """Commit everything already submitted, then stop the thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        self._thread.join()

    def _enqueue(self, request: _Request | _AsyncRequest | _CallbackRequest) -> None:
        if self._closed:
            raise StorageError("the event log is closed")
        self._queue.put(request)
        if self._stopped:  # lost a race with close(): nobody else may drain the queue any more
            self._refuse_queued()

    def _run(self) -> None:
        answered: list[_Answer] = []  # durable, callers not yet woken
        sizes = [1, 1]  # the sizes of the last two groups
        while True:
            try:
                first = self._queue.get_nowait()
            except queue.Empty:
                self._wake(answered)
                first = self._queue.get()
            if first is _STOP:
                stop = True
            else:
                requests, stop = self._gather(first, expected=sizes[0])
                answered = self._commit(requests, answered)
                sizes = [sizes[1], len(requests)]
            if stop:
                self._wake(answered)
                self._stopped = True
                self._refuse_queued()
                return

    def _gather(self, first: Any, *, expected: int) -> tuple[list[Any], bool]:
        """Collect a group from ``first`` on; return it and whether a stop request came."""
        requests = [first]
        deadline = time.monotonic() + GATHER_MAX
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                wait = min(GATHER_GAP, deadline - time.monotonic())
                if len(requests) >= expected or wait <= 0:
                    return requests, False
                try:
                    item = self._queue.get(timeout=wait)
                except queue.Empty:
                    return requests, False
            if item is _STOP:
                return requests, True
            requests.append(item)

    def _commit(self, requests: list[Any], answered: list[_Answer]) -> list[_Answer]:
        """Write and commit one group; wake the callers of the previous one meanwhile.

        The previous group is already durable. Its callers are woken only once this group's
        writes are done and its commit (the fsync, which releases the GIL) begins. A request
        that fails mid-write (:class:`RequestFailed`) is answered with its error and the group
        is written again without it; its answer waits for the group's, like every answer.
        """
        refused: list[_Answer] = []  # failed on their own; answered with the group
        while requests:
            outcomes: list[tuple[Any, BaseException | None]] = []
            failure: RequestFailed | None = None
            txn = self._env.begin(write=True)
            try:
                self._writer.begin_group(txn)
                for request in requests:
                    try:
                        outcomes.append(self._writer.apply(txn, request.op))
                    except RequestFailed as exc:
                        failure = exc
                        break
                if failure is None:
                    self._writer.finish_group(txn)
                    self._wake(answered)
                    txn.commit()
            except BaseException as exc:
                txn.abort()
                self._writer.group_aborted()
                self._wake(answered)
                if isinstance(exc, lmdb.MapFullError):
                    try:
                        self._grow()
                    except Exception as grow_exc:  # every caller must be woken
                        self._fail(requests, grow_exc, "the map cannot grow")
                        return refused
                    continue
                if not isinstance(exc, Exception):
                    raise
                self._fail(requests, exc, "the write transaction failed")
                return refused
            if failure is None:
                self._writer.group_committed()
                committed = zip(requests, outcomes, strict=True)
                return [*refused, *((request, *outcome) for request, outcome in committed)]
            # The failed request may have written part of itself: start again without it.
            txn.abort()
            self._writer.group_aborted()
            index = len(outcomes)
            refused.append((requests[index], None, failure.error))
            requests = requests[:index] + requests[index + 1 :]
        self._wake(answered)  # every request failed on its own: nothing to commit
        return refused

    def _refuse_queued(self) -> None:
        while True:
            try:
                request = self._queue.get_nowait()
            except queue.Empty:
                return
            if request is not _STOP:
                request.resolve(None, StorageError("the event log is closed"))

    @staticmethod
    def _wake(answered: list[_Answer]) -> None:
        """Answer committed requests: threads one by one, event loops one call per loop."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Any, Any, Any]]] = {}
        for request, result, error in answered:
            if type(request) is _AsyncRequest:
                by_loop.setdefault(request.loop, []).append((request.future, result, error))
            else:
                request.resolve(result, error)
        answered.clear()
        for loop, items in by_loop.items():
            _call_in(loop, items)

    def _fail(self, requests: list[Any], cause: BaseException, what: str) -> None:
        """Answer every request of a group that the storage failed; nothing of it committed."""
        try:
            explained = self._explain(cause)
        except Exception:  # a failing diagnosis must not keep callers waiting
            explained = str(cause)
        _log.error("journal group failed", requests=len(requests), error=explained)
        for request in requests:
            # One exception object per caller: each raises (and so mutates) its own.
            error = StorageError(f"{what}: {explained}")
            error.__cause__ = cause
            request.resolve(None, error)
