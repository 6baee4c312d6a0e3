"""The requests a :class:`~ctxledger.storage._group_commit.GroupCommitter` answers, and how.

A blocking caller waits on a pre-acquired lock, a callback submission's callback runs on the
committing thread (guarded: a callback that raises is logged, and the committer goes on), and
an event loop's callers are answered with one ``call_soon_threadsafe`` per loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import msgspec

from ctxledger._logging import get_logger
from ctxledger.errors import StorageError

__all__ = ["Outcome", "failed_outcomes"]

_log = get_logger(__name__)

#: What a backend reports for one op: ``(result, None)`` or ``(None, error)``.
Outcome = tuple[Any, BaseException | None]


class _Request:
    """A caller blocked in :meth:`GroupCommitter.submit`."""

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


class _CallbackRequest(msgspec.Struct):
    """A caller that gave a callback to :meth:`GroupCommitter.submit_callback` and went on (a
    Struct: built without a call into Python, one per append)."""

    op: Any
    callback: Callable[[Any, BaseException | None], None]

    def resolve(self, result: Any, error: BaseException | None) -> None:
        try:
            self.callback(result, error)
        except Exception:  # a callback must not raise; if one does, the committer goes on
            _log.exception("append callback raised")


class _AsyncRequest:
    """A caller awaiting :meth:`GroupCommitter.submit_async` on an event loop."""

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


def _nothing() -> None:
    """No group before an inline commit has callers left to wake."""


def failed_outcomes(cause: BaseException, count: int) -> list[Outcome]:
    """The outcomes of ``count`` ops of a group the storage failed; nothing of it was committed.

    Each op gets its own :class:`StorageError` (each caller raises, and so mutates, its own). A
    :class:`StorageError` raised by the backend already says what failed: each caller gets its
    text, caused by what the backend's error was caused by (an ``lmdb.Error``, a ``psycopg``
    error); any other exception is "the write transaction failed".
    """
    _log.error("group commit failed", requests=count, error=str(cause))
    origin = cause
    if isinstance(cause, StorageError) and cause.__cause__ is not None:
        origin = cause.__cause__
    outcomes: list[Outcome] = []
    for _ in range(count):
        if isinstance(cause, StorageError):
            error = StorageError(str(cause))
        else:
            error = StorageError(f"the write transaction failed: {cause}")
        error.__cause__ = origin
        outcomes.append((None, error))
    return outcomes
