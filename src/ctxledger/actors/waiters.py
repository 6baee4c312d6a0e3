"""Replies to callers: a thread that blocks, or a task on an event loop that awaits.

Whoever finishes a caller's request (a history actor, or the journal's commit callback) calls
``resolve``, from any thread; the first answer wins and a later one is ignored, so that the
supervision code that fails every waiting caller of a broken session or a dead actor never
answers a caller twice. A thread waiting in :meth:`Waiter.wait` is woken through a
pre-acquired lock (the cheapest one-shot signal between two threads); a task awaiting
:meth:`LoopWaiter.wait` is answered with one ``call_soon_threadsafe`` on its own loop, so an
async caller needs no worker thread.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

__all__ = ["LoopWaiter", "Reply", "Waiter"]


class Waiter:
    """The reply slot of a caller that blocks its thread until the answer comes."""

    __slots__ = ("_done", "_once", "abandoned", "error", "folds", "posted_to", "value")

    def __init__(self) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        #: The caller folds the durable batch its answer comes with, or has the actor told
        #: (:meth:`~ctxledger.actors.inline.CallerRuns.fold_posted`): set by the caller before
        #: it hands its command over.
        self.folds = False
        #: The history actor whose box holds that batch, posted without telling the actor (set
        #: before the answer), and whether the caller no longer waits (the poster then tells it).
        self.posted_to: Any = None
        self.abandoned = False
        self._done = threading.Lock()
        self._done.acquire()
        self._once = [True]  # popped by the first answer (``list.pop`` is atomic)

    def resolve(self, value: Any, error: BaseException | None = None) -> None:
        """Answer the caller with ``value``, or make it raise ``error`` (first answer only)."""
        try:
            self._once.pop()
        except IndexError:
            return
        self.value, self.error = value, error
        self._done.release()

    def wait(self) -> Any:
        """Block until answered; return the value or raise the error."""
        self._done.acquire()
        if self.error is not None:
            raise self.error
        return self.value


class LoopWaiter:
    """The reply slot of a task on an event loop: resolved from any thread, awaited on the loop."""

    __slots__ = ("_once", "future", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        self._once = [True]

    def resolve(self, value: Any, error: BaseException | None = None) -> None:
        """Answer the awaiting task (first answer only; a no-op when its loop is closed).

        Answers to one loop that come close together share one wake-up of the loop: the first
        schedules a callback there, the others join its list until it runs.
        """
        try:
            self._once.pop()
        except IndexError:
            return
        loop = self.loop
        with _pending_lock:
            pending = _pending.get(loop)
            if pending is not None:
                pending.append((self.future, value, error))
                return
            _pending[loop] = [(self.future, value, error)]
        try:
            loop.call_soon_threadsafe(_settle_pending, loop)
        except RuntimeError:  # a closed loop: nobody is left to answer
            with _pending_lock:
                _pending.pop(loop, None)

    async def wait(self) -> Any:
        """Await the answer; return the value or raise the error."""
        return await self.future


_pending_lock = threading.Lock()
_pending: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any, Any]]] = {}


def _settle_pending(loop: asyncio.AbstractEventLoop) -> None:
    with _pending_lock:
        answers = _pending.pop(loop, [])
    for future, value, error in answers:
        if future.done():  # cancelled by its task
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)


#: Either kind of reply slot.
Reply = Waiter | LoopWaiter
