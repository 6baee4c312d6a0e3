"""The compaction pool: summarisers run off every critical path, a few at a time.

Summarisers are LLM calls: I/O-bound, slow, and they may hang. A host runs a fixed number of
compaction actors (``HostOptions.compaction_workers``) that take jobs from one queue; each answers
the history actor that asked with :class:`~ctxledger.runtime.messages.SummaryDone`. The history
actor enforces the timeout: a job that times out is abandoned here, its worker is retired (its
thread ends when the stuck call returns; it is a daemon, so it never keeps the process alive)
and a fresh worker takes its place, so a hung summariser never blocks the pool or ``close()``.

A summariser that is a coroutine function is not run on a worker: it is awaited on the event
loop of the caller that asked for the compaction, or on the host's own loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, assert_never

import pykka

from ctxledger._logging import get_logger
from ctxledger.domain import Job, Summarizer, arun_summarizer, run_summarizer
from ctxledger.domain.summary import is_async_summarizer
from ctxledger.runtime.failures import LoggedFailures
from ctxledger.runtime.messages import CompactionMessage, Summarize, SummaryDone

if TYPE_CHECKING:
    from ctxledger.runtime.history import HistoryActor

__all__ = ["CompactionActor", "CompactionPool", "HostLoop"]

_log = get_logger(__name__)

#: Retired workers (stuck in a summariser call) beyond which no replacement is started.
MAX_RETIRED = 8


class CompactionActor(LoggedFailures, pykka.ThreadingActor):
    """Runs the summariser for one job at a time (a daemon thread; see the module docstring)."""

    use_daemon_thread = True

    def __init__(self, pool: CompactionPool, summarizer: Summarizer) -> None:
        super().__init__()
        self._pool = pool
        self._summarizer = summarizer

    def on_receive(self, message: CompactionMessage) -> None:
        """Handle one message of the actor's closed union."""
        match message:
            case Summarize():
                started = time.monotonic()
                plan = message.job.plan
                summary, detail = _summarize(lambda: run_summarizer(plan, self._summarizer))
                _answer(message, summary, detail, time.monotonic() - started)
                self._pool.finished(self.actor_ref, message)
            case _:
                assert_never(message)


class CompactionPool:
    """Dispatches summary jobs to a fixed number of :class:`CompactionActor` workers.

    Args:
        summarizer: The host's summariser (a plain callable or a coroutine function).
        workers: The number of worker threads.
        loop: Returns the host's event loop (started on first use) for coroutine summarisers
            whose caller has no loop of its own.
    """

    def __init__(
        self,
        summarizer: Summarizer,
        workers: int,
        loop: Callable[[], asyncio.AbstractEventLoop],
    ) -> None:
        self._summarizer = summarizer
        self._async = is_async_summarizer(summarizer)
        self._host_loop = loop
        self._lock = threading.Lock()
        self._idle: deque[pykka.ActorRef[CompactionActor]] = deque()
        self._queue: deque[Summarize] = deque()
        self._running: dict[str, tuple[pykka.ActorRef[CompactionActor], Summarize]] = {}
        self._retired: list[pykka.ActorRef[CompactionActor]] = []
        self._futures: dict[str, concurrent.futures.Future[Any]] = {}
        self._stopped = False
        if not self._async:
            for _ in range(workers):
                self._idle.append(CompactionActor.start(self, summarizer))

    def run(
        self,
        session_id: str,
        job: Job,
        owner: pykka.ActorRef[HistoryActor],
        loop: asyncio.AbstractEventLoop | None,
    ) -> None:
        """Summarise ``job`` and tell ``owner`` :class:`SummaryDone`; return at once.

        ``loop`` is the event loop of the caller waiting for it, if any: a coroutine summariser
        is awaited there.
        """
        run = Summarize(session_id, job, owner)
        if self._async:
            self._run_async(run, loop)
            return
        with self._lock:
            if self._stopped:
                _answer(run, None, "the host is closing", 0.0)
                return
            if self._idle:
                worker = self._idle.popleft()
                self._running[job.compaction_id] = (worker, run)
            else:
                self._queue.append(run)
                return
        worker.tell(run)

    def finished(self, worker: pykka.ActorRef[CompactionActor], run: Summarize | None) -> None:
        """A worker is done with ``run`` (None: it is new): give it a queued job, or let it idle."""
        with self._lock:
            if run is not None:
                current = self._running.get(run.job.compaction_id)
                if current is not None and current[0] is worker:
                    del self._running[run.job.compaction_id]
            if worker in self._retired or self._stopped:
                return
            if not self._queue:
                self._idle.append(worker)
                return
            following = self._queue.popleft()
            self._running[following.job.compaction_id] = (worker, following)
        worker.tell(following)

    def abandon(self, compaction_id: str) -> None:
        """Give up on a job (it timed out): its late answer is ignored by its owner."""
        future = self._futures.pop(compaction_id, None)
        if future is not None:
            future.cancel()
            return
        with self._lock:
            for index, run in enumerate(self._queue):
                if run.job.compaction_id == compaction_id:
                    del self._queue[index]
                    return
            current = self._running.pop(compaction_id, None)
            if current is None:
                return
            worker = current[0]
            self._retired = [ref for ref in self._retired if ref.is_alive()]
            self._retired.append(worker)
            replace = len(self._retired) <= MAX_RETIRED and not self._stopped
        worker.stop(block=False)  # handled once the stuck call returns
        _log.warning("summarizer_abandoned", compaction_id=compaction_id)
        if replace:
            self.finished(CompactionActor.start(self, self._summarizer), None)

    def stop(self) -> None:
        """Stop the workers without waiting for a summariser call in progress."""
        with self._lock:
            self._stopped = True
            workers = list(self._idle) + [worker for worker, _ in self._running.values()]
            self._idle.clear()
            queued, self._queue = list(self._queue), deque()
        for run in queued:
            _answer(run, None, "the host is closing", 0.0)
        for worker in workers:
            worker.stop(block=False)
        for future in list(self._futures.values()):
            future.cancel()

    def _run_async(self, run: Summarize, loop: asyncio.AbstractEventLoop | None) -> None:
        target = loop if loop is not None and loop.is_running() else self._host_loop()
        started = time.monotonic()
        summarizer: Any = self._summarizer
        future = asyncio.run_coroutine_threadsafe(arun_summarizer(run.job.plan, summarizer), target)
        compaction_id = run.job.compaction_id
        self._futures[compaction_id] = future

        def done(finished: concurrent.futures.Future[Any]) -> None:
            self._futures.pop(compaction_id, None)
            if finished.cancelled():
                return
            summary, detail = _summarize(finished.result)
            _answer(run, summary, detail, time.monotonic() - started)

        future.add_done_callback(done)


def _summarize(call: Callable[[], str | None]) -> tuple[str | None, str]:
    try:
        summary = call()
    except Exception as exc:  # a user's summariser may raise anything; it must not kill us
        _log.warning("summarizer_raised", error=repr(exc))
        return None, f"summarizer raised {type(exc).__name__}: {exc}"
    if not summary:
        return None, "summarizer returned no summary"
    if not summary.isascii():
        # A lone surrogate (say from a model's output cut mid-character) cannot be recorded.
        summary = summary.encode("utf-8", "replace").decode("utf-8")
    return summary, ""


def _answer(run: Summarize, summary: str | None, detail: str, seconds: float) -> None:
    with contextlib.suppress(pykka.ActorDeadError):  # the host closed meanwhile
        run.owner.tell(SummaryDone(run.session_id, run.job, summary, detail, seconds))


class HostLoop:
    """The host's own event loop, started on first use, for coroutine summarisers asked for by
    threads (kept apart from the Host so that the threads never hold the Host itself)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def get(self) -> asyncio.AbstractEventLoop:
        """Return the loop, starting it (on a daemon thread) if need be."""
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="ctxledger-loop", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def stop(self) -> None:
        """Stop the loop if it was started (waiting at most 5 s for it)."""
        with self._lock:
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        if not thread.is_alive():
            loop.close()
