"""The journal: the group committer of an LMDB environment, with an LMDB write transaction.

Callers :meth:`~Journal.submit` a request from any thread and block until it is durable,
``await`` :meth:`~Journal.submit_async` from an event loop, or hand over a callback with
:meth:`~Journal.submit_callback`. The queueing, gathering, waking and closing are those of
:class:`~ctxledger.storage._group_commit.GroupCommitter` (the PostgreSQL log drives the same
class): one write path for every backend. What this module adds is the commit of one group: its
requests applied by a :class:`GroupWriter` in ONE write transaction, and one fsync for all.

Each request succeeds or fails on its own (see the fault-isolation rule of
:class:`~ctxledger.storage.EventLog`). A request the writer refuses before writing anything (a
version conflict) is simply left out. A request that fails while it writes (LMDB refuses one of
its keys or values) may have left part of itself in the transaction, so the journal aborts the
transaction and writes the group again without it (:class:`RequestFailed`): every other request
commits as if it had arrived alone. ``MDB_MAP_FULL`` aborts the group, grows the map and writes
it again. Only a failure of the storage itself (disk full, an I/O error, a map that cannot grow)
fails the whole group, and then nothing of it is visible.

The callers of a committed group are woken once the next group is written, just before its
commit: their threads then prepare their next appends while that fsync runs (it releases the
GIL) instead of competing for the GIL with the journal's puts (every LMDB put releases and
re-takes the GIL, and re-taking it behind dozens of runnable threads costs more than the put).
When nothing else is queued, callers are woken at once. A callback submission (the history
actors') made while no other request is outstanding is committed on the submitting thread
(``inline_when_idle``): one hand-off fewer for a lone writer.

The journal also encodes the events (see :class:`~ctxledger.storage._lmdb_writer.AppendOp`), so
that callers hold the GIL as briefly as possible.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import lmdb

from ctxledger.errors import StorageError
from ctxledger.storage._group_commit import GroupCommitter, Outcome, failed_outcomes

__all__ = ["GATHER_GAP", "GATHER_MAX", "Gate", "GroupWriter", "Journal", "RequestFailed"]

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


class Journal(GroupCommitter):
    """The single writer of one LMDB environment: a group committer whose commit is LMDB's.

    Args:
        env: The environment; the journal is the only code that begins write transactions in it.
        writer: Applies each group inside the transaction.
        grow: Enlarges the map; called (on the journal thread) after ``MDB_MAP_FULL``, then the
            group is written again from scratch.
        explain: Describes a storage failure for the callers' :class:`StorageError` (for
            example "disk full: 0 bytes free on ..."); the failure's own text by default.
        name: The thread's name.
        gather_gap: Seconds a group waits for one more expected request.
        gather_max: Seconds a group may wait for expected requests in all.
    """

    def __init__(
        self,
        env: lmdb.Environment,
        writer: GroupWriter,
        *,
        grow: Callable[[], None],
        explain: Callable[[BaseException], str] = str,
        name: str = "ctxledger-journal",
        gather_gap: float = GATHER_GAP,
        gather_max: float = GATHER_MAX,
    ) -> None:
        self._env = env
        self._writer = writer
        self._grow = grow
        self._explain = explain
        super().__init__(
            self._commit_lmdb,
            name=name,
            gather_gap=gather_gap,
            gather_max=gather_max,
            inline_when_idle=True,
        )

    def _commit_lmdb(self, ops: list[Any], wake_previous: Callable[[], None]) -> list[Outcome]:
        """Write ``ops`` in one transaction and commit it; one outcome per op.

        ``wake_previous`` answers the previous (durable) group: called once this group's writes
        are done and its commit (the fsync, which releases the GIL) begins, or as soon as this
        group is known to fail or to be written again.

        A failure of the storage itself fails every op still in the group with a
        :class:`StorageError` (see :func:`failed_outcomes`); nothing of the group is visible.
        """
        outcomes: list[Outcome] = [(None, None)] * len(ops)
        pending = list(range(len(ops)))  # the ops still in the group
        while pending:
            written: list[Outcome] = []
            txn = self._env.begin(write=True)
            try:
                self._writer.begin_group(txn)
                for index in pending:
                    written.append(self._writer.apply(txn, ops[index]))
                self._writer.finish_group(txn)
                wake_previous()
                txn.commit()
            except RequestFailed as failed:
                # The failed op may have written part of itself: write the group again without it.
                self._abort(txn, wake_previous)
                outcomes[pending.pop(len(written))] = (None, failed.error)
                continue
            except lmdb.MapFullError:
                self._abort(txn, wake_previous)
                try:
                    self._grow()
                except Exception as grow_exc:
                    return self._failed(outcomes, pending, "the map cannot grow", grow_exc)
                continue
            except Exception as exc:
                self._abort(txn, wake_previous)
                return self._failed(outcomes, pending, "the write transaction failed", exc)
            except BaseException:
                self._abort(txn, wake_previous)
                raise
            self._writer.group_committed()
            for index, outcome in zip(pending, written, strict=True):
                outcomes[index] = outcome
            return outcomes
        wake_previous()  # every op failed on its own: nothing to commit
        return outcomes

    def _abort(self, txn: lmdb.Transaction, wake_previous: Callable[[], None]) -> None:
        txn.abort()
        self._writer.group_aborted()
        wake_previous()

    def _failed(
        self, outcomes: list[Outcome], pending: list[int], what: str, cause: Exception
    ) -> list[Outcome]:
        """``outcomes`` with the storage failure ``cause`` as the outcome of every pending op.

        The ops that failed on their own before keep their own errors.
        """
        error = StorageError(f"{what}: {self._describe(cause)}")
        error.__cause__ = cause
        for index, outcome in zip(pending, failed_outcomes(error, len(pending)), strict=True):
            outcomes[index] = outcome
        return outcomes

    def _describe(self, failure: BaseException) -> str:
        try:
            return self._explain(failure)
        except Exception:  # a failing diagnosis must not keep callers waiting
            return str(failure)
