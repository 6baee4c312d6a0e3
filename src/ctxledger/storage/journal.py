"""The journal: one thread that owns the LMDB write transaction and group-commits requests.

Callers on any thread :meth:`Journal.submit` a request and block until it is durable. The journal
thread takes everything queued, applies all of it in ONE write transaction (each request succeeds
or fails on its own: a version conflict excludes only its batch) and commits it: one fsync for the
whole group. While the disk flushes, new requests pile up and form the next group, so the cost of
an fsync is shared by everyone who arrived during the previous one.

A caller is woken only after its group committed, but not at once: the journal first writes the
next group, then wakes the previous group's callers just before it commits, so that their threads
prepare their next appends while the fsync runs (it releases the GIL) instead of contending for
the GIL with the journal's puts. When nothing else is queued, callers are woken at once.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import lmdb
import structlog

from ctxledger.errors import StorageError

__all__ = ["Gate", "GroupWriter", "Journal"]

_log = structlog.get_logger(__name__)


class GroupWriter(Protocol):
    """What the journal drives: applies one group of requests inside a write transaction."""

    def write_group(
        self, txn: lmdb.Transaction, ops: list[Any]
    ) -> list[tuple[Any, BaseException | None]]:
        """Apply ``ops`` in ``txn``; return one ``(result, error)`` per op, in order.

        A failed op (``error`` set) must leave nothing of itself in ``txn``. An exception raised
        out of this method aborts the whole group.
        """
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


_STOP = object()
_Answer = tuple[_Request, Any, BaseException | None]  # a committed request and its outcome


class Journal:
    """The single writer of one LMDB environment, group-committing requests from many threads.

    Args:
        env: The environment; the journal is the only code that begins write transactions in it.
        writer: Applies each group inside the transaction.
        grow: Enlarges the map; called (on the journal thread) after ``MDB_MAP_FULL``, then the
            group is retried from scratch.
        name: The thread's name.
    """

    def __init__(
        self,
        env: lmdb.Environment,
        writer: GroupWriter,
        *,
        grow: Callable[[], None],
        name: str = "ctxledger-journal",
    ) -> None:
        self._env = env
        self._writer = writer
        self._grow = grow
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
        if self._closed:
            raise StorageError("the event log is closed")
        request = _Request(op)
        self._queue.put(request)
        if self._stopped:  # lost a race with close(): nobody else may drain the queue any more
            self._refuse_queued()
        return request.wait()

    def close(self) -> None:
        """Commit everything already submitted, then stop the thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        self._thread.join()

    def _run(self) -> None:
        answered: list[_Answer] = []  # durable, callers not yet woken
        while True:
            group: list[Any] = []
            self._drain(group)
            if not group:
                self._wake(answered)
                group.append(self._queue.get())
                self._drain(group)
            stop = _STOP in group
            requests = group[: group.index(_STOP)] if stop else group
            if requests:
                answered = self._commit(requests, answered)
            if stop:
                self._wake(answered)
                self._stopped = True
                self._refuse(group[len(requests) + 1 :])
                self._refuse_queued()
                return

    def _drain(self, group: list[Any]) -> None:
        while True:
            try:
                group.append(self._queue.get_nowait())
            except queue.Empty:
                return

    def _commit(self, requests: list[_Request], answered: list[_Answer]) -> list[_Answer]:
        """Write and commit one group; wake the callers of the previous one meanwhile.

        The previous group is already durable. Its callers are woken only once this group's
        writes are done and its commit (the fsync, which releases the GIL) begins: their threads
        then prepare their next appends while the disk flushes, instead of competing for the GIL
        with the journal's puts.
        """
        ops = [request.op for request in requests]
        while True:
            txn = self._env.begin(write=True)
            try:
                outcomes = self._writer.write_group(txn, ops)
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
                        self._fail(requests, grow_exc)
                        return []
                    continue
                if not isinstance(exc, Exception):
                    raise
                self._fail(requests, exc)  # every caller must be woken
                return []
            break
        self._writer.group_committed()
        return [(request, *outcome) for request, outcome in zip(requests, outcomes, strict=True)]

    def _refuse_queued(self) -> None:
        late: list[Any] = []
        self._drain(late)
        self._refuse(late)

    @staticmethod
    def _refuse(late: list[Any]) -> None:
        for request in late:
            if request is not _STOP:
                request.resolve(None, StorageError("the event log is closed"))

    @staticmethod
    def _wake(answered: list[_Answer]) -> None:
        for request, result, error in answered:
            request.resolve(result, error)
        answered.clear()

    @staticmethod
    def _fail(requests: list[_Request], cause: BaseException) -> None:
        _log.error("journal group failed", requests=len(requests), error=repr(cause))
        for request in requests:
            # One exception object per caller: each thread raises (and so mutates) its own.
            error = StorageError(f"the write transaction failed: {cause}")
            error.__cause__ = cause
            request.resolve(None, error)
