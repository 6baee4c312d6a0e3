"""Group commit for any backend: one thread gathers requests from many callers into transactions.

:class:`GroupCommitter` is the backend-neutral half of a journal. Callers :meth:`~GroupCommitter.
submit` an op from any thread and block until its group is committed, ``await``
:meth:`~GroupCommitter.submit_async` from an event loop, or hand over a callback with
:meth:`~GroupCommitter.submit_callback` and go on. The committer's thread takes the queued
ops as one group and hands them to the backend's ``commit`` function, which writes them in one
transaction and returns one outcome per op: an op that fails for a reason of its own fails alone,
while an exception raised out of ``commit`` (the storage itself failed) fails every op of the
group with a :class:`~ctxledger.errors.StorageError` (a ``commit`` that must keep the outcomes
of ops that already failed on their own returns :func:`failed_outcomes` for the others).

Two groups are in flight at a time: the callers of a committed group are woken when ``commit``
calls its ``wake_previous`` argument, just before it blocks on the next group's commit, so that
their threads prepare their next appends while that commit runs instead of competing for the GIL
with the writing of the group. A group waits for as many requests as the group before the last
one had (the callers woken meanwhile are likely to come straight back; with ``wake_at_once``, the
last group's and those already queued), but for no more than ``gather_gap`` seconds without an
arrival and ``gather_max`` seconds in all, so a lone caller never waits, and only while such
waits pay (see :mod:`ctxledger.storage._gathering`). Callers on an event loop are answered with
one ``call_soon_threadsafe`` per loop and group.

With ``inline_when_idle`` (the LMDB journal), a callback submission made while no other request
is outstanding (queued, or taken and not yet committed) is committed at once on the submitting
thread, as a group of one, and its callback called there before
:meth:`~GroupCommitter.submit_callback` returns: a lone writer (the history actor of a session
appending on its own) is spared the hand-off to the committer's thread and back. One lock is held
by whichever thread commits, so groups never overlap, and a request queued before is never
overtaken; under load requests are outstanding and groups form as before.

Both backends drive this class: the LMDB journal (:mod:`ctxledger.storage.journal`) with an
LMDB write transaction as its commit, the PostgreSQL log with a database transaction.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from ctxledger._logging import get_logger
from ctxledger.errors import StorageError
from ctxledger.storage._gathering import Gathering
from ctxledger.storage._group_requests import (
    Outcome,
    _AsyncRequest,
    _call_in,
    _CallbackRequest,
    _nothing,
    _Request,
    failed_outcomes,
)

__all__ = ["CommitGroup", "GroupCommitter", "Outcome", "failed_outcomes", "queued_commits"]

_log = get_logger(__name__)

#: ``commit(ops, wake_previous) -> outcomes``: writes and commits one group (see the module doc).
CommitGroup = Callable[[list[Any], Callable[[], None]], list[Outcome]]


_STOP = object()
_Answer = tuple[Any, Any, BaseException | None]  # a committed request and its outcome


class _ThreadFlags(threading.local):
    """Per thread: whether its callback submissions are queued for the committer's thread even
    when the committer is idle (see :func:`queued_commits`). A class default, not ``getattr``
    with one: a lookup that misses raises and catches an ``AttributeError`` inside (~0.3 µs an
    append)."""

    queued = False


_thread = _ThreadFlags()


def queued_commits() -> _QueuedCommits:
    """Queue this thread's callback submissions for the committer's thread within the block
    (``with queued_commits(): ...``), never committing one inline (``inline_when_idle``).

    For a submitter with more to submit right after (a history actor with commands waiting in
    its mailbox): committed inline, each of its batches would be a group of its own, the next
    one submitted only once the last one's commit (its fsync) is done; queued, they form one
    group on the committer's thread. What is committed, and when its callback runs relative to
    the others, does not change.
    """
    return _QueuedCommits()


class _QueuedCommits:
    """The block of :func:`queued_commits` (a class, not a generator-based context manager: it
    is entered once per batch a history actor submits with commands waiting)."""

    __slots__ = ("_before",)

    def __enter__(self) -> None:
        self._before = _thread.queued
        _thread.queued = True

    def __exit__(self, *exc_info: object) -> None:
        _thread.queued = self._before


class GroupCommitter:
    """One thread that group-commits the ops submitted from many threads and event loops.

    Args:
        commit: Writes and commits one group; see the module docstring.
        name: The thread's name.
        gather_gap: Seconds a group waits for one more expected request.
        gather_max: Seconds a group may wait for expected requests in all.
        wake_at_once: Wake a group's callers as soon as it is committed, instead of when the
            next group's commit begins. Right for a backend whose writes run elsewhere (a
            database server): the woken callers then join the very next group.
        inline_when_idle: Commit a callback submission on the submitting thread when nothing
            else is outstanding (see the module docstring). ``commit`` must then work from any
            thread, one at a time.
    """

    def __init__(
        self,
        commit: CommitGroup,
        *,
        name: str,
        gather_gap: float = 0.0005,
        gather_max: float = 0.002,
        wake_at_once: bool = False,
        inline_when_idle: bool = False,
    ) -> None:
        self._commit_group = commit
        self._inline = inline_when_idle
        # Held by whichever thread commits a group: the committer's, or a submitter's that
        # found it idle (inline_when_idle).
        self._commit_lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._outstanding = 0  # requests queued and not yet committed (or refused)
        self._wake_at_once = wake_at_once
        self._gathering = Gathering(gather_gap, gather_max, wake_at_once=wake_at_once)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False  # no new submissions
        self._closed_because = "the event log is closed"
        self._stopped = False  # the thread has committed its last group
        self._taken: list[Any] = []  # taken off the queue, not committed yet
        self._answered: list[_Answer] = []  # durable, callers not yet woken
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, op: Any) -> Any:
        """Queue ``op``, wait until its group is committed, and return its result.

        Raises:
            StorageError: The committer is closed, or the group's transaction failed.
            Exception: The error the backend reported for this op alone.
        """
        request = _Request(op)
        self._enqueue(request)
        return request.wait()

    async def submit_async(self, op: Any) -> Any:
        """Like :meth:`submit`, awaiting the commit instead of blocking the thread.

        Cancelling the awaiting task does not withdraw ``op``: it may still be committed.

        Raises:
            StorageError: The committer is closed, or the group's transaction failed.
            Exception: The error the backend reported for this op alone.
        """
        request = _AsyncRequest(op, asyncio.get_running_loop())
        self._enqueue(request)
        return await request.future

    def submit_callback(
        self, op: Any, callback: Callable[[Any, BaseException | None], None]
    ) -> None:
        """Queue ``op`` and return; ``callback(result, error)`` runs on the committer's thread.

        It is called once, when ``op``'s group is committed (or fails, or the committer
        closes); callbacks of one group run in the order their ops were queued. With
        ``inline_when_idle`` and nothing else outstanding, ``op`` is committed and ``callback``
        called on this thread before this returns, unless this thread runs an event loop.
        """
        request = _CallbackRequest(op, callback)
        if (
            self._inline
            and not self._outstanding
            and not _thread.queued  # see queued_commits()
            and asyncio._get_running_loop() is None  # an event loop must not block on a commit
            and self._commit_inline(request)
        ):
            return
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
        with self._commit_lock:  # a submitter's commit in progress ends first
            pass

    def _commit_inline(self, request: _CallbackRequest) -> bool:
        """Commit ``request`` alone on the submitting thread, if nothing else is to be committed.

        Returns whether it did (False: queue it). Saves a lone writer the hand-off to the
        committer's thread and back; under load requests are outstanding and groups form.
        Nothing queued before is overtaken: every request queued before this call was
        committed, or is being committed under the lock this waits for.
        """
        if not self._commit_lock.acquire(blocking=False):
            return False
        try:
            with self._count_lock:
                if self._outstanding or self._closed:
                    return False
            try:
                outcome = self._commit_group([request.op], _nothing)[0]
            except Exception as exc:  # the storage failed: this op alone was in the group
                outcome = failed_outcomes(exc, 1)[0]
        finally:
            self._commit_lock.release()
        request.resolve(*outcome)
        return True

    def _enqueue(self, request: _Request | _AsyncRequest | _CallbackRequest) -> None:
        if self._closed:
            raise StorageError(self._closed_because)
        with self._count_lock:
            self._outstanding += 1
        self._queue.put(request)
        if self._stopped:  # lost a race with close(): nobody else may drain the queue any more
            self._refuse_queued()

    def _run(self) -> None:
        """The committer's thread. Should it fail (a fault of the committer itself: a failure
        of the storage fails its group only), no caller is left waiting: the committed ones
        are answered, those taken and not committed and those queued fail with a
        :class:`StorageError`, and so does every later submission."""
        try:
            self._serve()
        except BaseException as exc:
            _log.exception("group committer failed", error=repr(exc))
            self._closed_because = f"the event log's writer thread failed: {exc!r}"
            self._closed = True
            self._wake(self._answered)
            taken, self._taken = self._taken, []
            self._fail(taken, StorageError(self._closed_because))
            self._stopped = True
            self._refuse_queued()

    def _serve(self) -> None:
        gathering = self._gathering
        while True:
            try:
                first = self._queue.get_nowait()
            except queue.Empty:
                self._wake(self._answered)
                first = self._queue.get()
            if first is _STOP:
                stop = True
            else:
                requests, stop = self._gather(first)  # the requests taken (self._taken)
                self._answered = self._commit(requests, self._answered)
                self._taken = []
                gathering.committed(len(requests))
            if stop:
                self._wake(self._answered)
                self._stopped = True
                self._refuse_queued()
                return

    def _gather(self, first: Any) -> tuple[list[Any], bool]:
        """Collect a group from ``first`` on; return it and whether a stop request came
        (how long it waits for more: :class:`~ctxledger.storage._gathering.Gathering`)."""
        gathering = self._gathering
        expected = gathering.expected()
        requests = self._taken = [first]  # taken off the queue: answered should this fail
        deadline = time.monotonic() + gathering.most
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                wait = min(gathering.gap, deadline - time.monotonic())
                if len(requests) >= expected or wait <= 0 or not gathering.worth_waiting():
                    return requests, False
                try:
                    item = self._queue.get(timeout=wait)
                except queue.Empty:
                    gathering.waited(arrived=False)
                    return requests, False
                gathering.waited(arrived=True)
            if item is _STOP:
                return requests, True
            requests.append(item)

    def _commit(self, requests: list[Any], answered: list[_Answer]) -> list[_Answer]:
        """Commit one group; the previous group's callers are woken on the way (or after)."""

        def wake_previous() -> None:
            self._wake(answered)

        try:
            with self._commit_lock:
                try:
                    outcomes = self._commit_group(
                        [request.op for request in requests], wake_previous
                    )
                finally:
                    with self._count_lock:
                        self._outstanding -= len(requests)
        except Exception as exc:  # every caller must be woken
            self._wake(answered)
            self._fail(requests, exc)
            return []
        self._wake(answered)
        committed = [
            (request, *outcome) for request, outcome in zip(requests, outcomes, strict=True)
        ]
        if self._wake_at_once:
            self._gathering.queued = self._queue.qsize()
            self._wake(committed)
        return committed

    def _refuse_queued(self) -> None:
        while True:
            try:
                request = self._queue.get_nowait()
            except queue.Empty:
                return
            if request is not _STOP:
                request.resolve(None, StorageError(self._closed_because))

    @staticmethod
    def _wake(answered: list[_Answer]) -> None:
        """Answer committed requests: threads one by one, event loops one call per loop."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Any, Any, Any]]] = {}
        for request, result, error in answered:
            if type(request) is _AsyncRequest:
                by_loop.setdefault(request.loop, []).append((request.future, result, error))
            else:
                request.resolve(result, error)  # never raises (a callback's error is logged)
        answered.clear()
        for loop, items in by_loop.items():
            _call_in(loop, items)

    @staticmethod
    def _fail(requests: list[Any], cause: BaseException) -> None:
        for request, outcome in zip(requests, failed_outcomes(cause, len(requests)), strict=True):
            request.resolve(*outcome)
