"""The compaction role: summary jobs run off every critical path, with their timeouts.

Summarisers are LLM calls: I/O-bound, slow, and they may hang. The history actors decide that a
compaction needs a summary (:func:`ctxledger.domain.decide` returns a ``Job`` once its
``CompactionStarted`` is durable) and hand the job to the host's :class:`CompactionPool`, which
owns it from then on: it queues it for one of a fixed number of :class:`CompactionActor` workers
(``HostOptions.compaction_workers``), arms its ``summary_timeout`` on the host's timer, and
answers the history actor that asked exactly once with
:class:`~ctxledger.actors.messages.SummaryDone`: the summary, the summariser's failure, or
"timed out" when the timeout fires first. A job that times out is abandoned: its late answer is
dropped, its worker is retired (its thread ends when the stuck call returns; it is a daemon, so
it never keeps the process alive) and a fresh worker takes its place, so a hung summariser never
blocks the pool or ``close()``. What the summary then becomes (a checkpoint, a prepared summary,
a failure recorded) is the history actor's decision (``decide(state, Summarized(...))``), made
on the session's state, which it alone holds.

A summariser that is a coroutine function is not run on a worker: it is awaited on the event
loop of the caller that asked for the compaction, or on the host's own loop. The background
jobs of the built-in offline summariser, which works on the CPU, are sent by their worker to a
process of :mod:`ctxledger.actors.summary_process`, out of the GIL the host's threads need.
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
from ctxledger.actors.fact_warming import FactWarming, warm_facts
from ctxledger.actors.failures import LoggedFailures
from ctxledger.actors.messages import CompactionMessage, HistoryRef, Summarize, SummaryDone
from ctxledger.actors.summary_process import SummaryProcessError, SummaryProcesses, in_processes
from ctxledger.domain import (
    CompactionPlan,
    Job,
    Summarizer,
    arun_summarizer,
    run_summarizer,
)
from ctxledger.domain.summary import is_async_summarizer

if TYPE_CHECKING:
    from ctxledger.actors.timer import Timer

__all__ = ["CompactionActor", "CompactionPool"]

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
                clock = self._pool.clock
                plan = message.job.plan
                warm = self._pool.warming.wanted(
                    message.session_id,
                    plan,
                    background=message.job.background,
                    served=message.served,
                )
                processes = self._pool.processes
                run = None
                if processes is not None and message.job.background:
                    # A worker process (once one is ready or free), or None: this thread runs it.
                    run = processes.take(self._pool.hurried(message.job.compaction_id))
                if run is not None:
                    started = clock()  # the input is made in the process, as part of the call
                    summary, detail = _summarize(lambda: run(plan, self._summarizer, warm))
                else:
                    _make_input(plan)
                    started = clock()
                    summary, detail = _summarize(lambda: run_summarizer(plan, self._summarizer))
                seconds = max(0.0, clock() - started)
                if summary is not None and warm and run is None:  # a worker read them
                    warm_facts(plan)
                self._pool.finished(message.job.compaction_id, summary, detail, seconds)
                self._pool.next_job(self.actor_ref)
            case _:
                assert_never(message)


def _make_input(plan: CompactionPlan) -> None:
    """Make ``plan``'s summariser input now (it is made on first use; see
    :class:`~ctxledger.domain.CompactionPlan`): on this thread, not the history actor's, and
    not counted in the summariser's time. A failure here is met again by the summariser's run,
    which reports it as the compaction's failure."""
    with contextlib.suppress(Exception):
        plan.input_hash  # noqa: B018 - made and kept by the property


class _Running:
    """A job the pool owns until it answers it: where it runs and its timeout."""

    __slots__ = ("hurried", "message", "timeout", "timer", "worker")

    def __init__(self, message: Summarize, timeout: float, timer: int) -> None:
        self.message = message
        self.timeout = timeout
        self.timer = timer
        self.worker: pykka.ActorRef[CompactionActor] | None = None  # None while queued
        self.hurried = threading.Event()  # set: it waits for no worker process


class CompactionPool:
    """Owns the host's summary jobs, from the hand-over to their one answer.

    Args:
        summarizer: The host's summariser (a plain callable or a coroutine function).
        workers: The number of worker threads.
        loop: Returns the host's event loop (started on first use) for coroutine summarisers
            whose caller has no loop of its own.
        timer: The host's timer (each job's timeout).
        clock: The host's clock, which times each summary (``summary_seconds``): the pace a
            background summary is judged by (``ready_in_time``) compares it with the time the
            session took to grow, on the same clock.
        processes: Worker processes for the background jobs of the built-in offline
            summariser (``HostOptions.summary_processes``; 0: none, the threads run them);
            kept as :attr:`processes` (see :mod:`ctxledger.actors.summary_process`).
    """

    def __init__(
        self,
        summarizer: Summarizer,
        workers: int,
        loop: Callable[[], asyncio.AbstractEventLoop],
        timer: Timer,
        clock: Callable[[], float] = time.time,
        *,
        processes: int = 0,
    ) -> None:
        self.clock = clock
        self.processes = (
            SummaryProcesses(processes) if processes and in_processes(summarizer) else None
        )
        self.warming = FactWarming()  # which summaries' facts are read ahead
        self._summarizer = summarizer
        self._async = is_async_summarizer(summarizer)
        self._host_loop = loop
        self._timer = timer
        self._lock = threading.Lock()
        self._idle: deque[pykka.ActorRef[CompactionActor]] = deque()
        self._queue: deque[str] = deque()  # compaction ids waiting for a worker
        self._jobs: dict[str, _Running] = {}  # every job not answered yet, by compaction id
        self._retired: list[pykka.ActorRef[CompactionActor]] = []
        self._futures: dict[str, concurrent.futures.Future[Any]] = {}
        self._stopped = False
        if not self._async:
            try:
                for _ in range(workers):
                    self._idle.append(CompactionActor.start(self, summarizer))
            except BaseException:  # the system refused a thread: stop those already started
                for ref in self._idle:
                    ref.stop(block=False)
                raise

    def run(
        self,
        session_id: str,
        job: Job,
        owner: HistoryRef,
        loop: asyncio.AbstractEventLoop | None,
        timeout: float,
        *,
        served: bool = True,
    ) -> None:
        """Summarise ``job`` and tell ``owner`` :class:`SummaryDone` once; return at once.

        Args:
            session_id: The session the job compacts.
            job: The job (its ``CompactionStarted`` is durable).
            owner: The history actor to answer.
            loop: The event loop of the caller waiting for it, if any: a coroutine summariser
                is awaited there.
            timeout: Seconds after which the job is answered "timed out" and abandoned.
            served: The session was served a view since its active checkpoint's cut (see
                :class:`~ctxledger.actors.fact_warming.FactWarming`).
        """
        message = Summarize(session_id, job, owner, served)
        compaction_id = job.compaction_id
        plan = job.plan
        _log.info(
            "compaction_started",
            session_id=session_id,
            compaction_id=compaction_id,
            reason=plan.reason,
            background=job.background,
            retain_from_seq=plan.retain_from_seq,
            messages=len(plan.covered),
        )
        with self._lock:
            if self._stopped:
                stopped = True
            else:
                stopped = False
                handle = self._timer.call_later(timeout, lambda: self._timed_out(compaction_id))
                running = self._jobs[compaction_id] = _Running(message, timeout, handle)
                if not self._async:
                    if self._idle:
                        running.worker = self._idle.popleft()
                    else:  # the jobs waiting for a worker process run on their threads
                        self._queue.append(compaction_id)
                        self._hurry_all()
        if stopped:
            _answer(message, None, "the host is closing", 0.0)
        elif self._async:
            self._run_async(message, loop)
        elif running.worker is not None:
            running.worker.tell(message)

    def finished(
        self, compaction_id: str, summary: str | None, detail: str, seconds: float
    ) -> None:
        """The summariser answered job ``compaction_id``: answer its owner (unless the job
        timed out or was abandoned meanwhile: then the late answer is dropped)."""
        with self._lock:
            running = self._jobs.pop(compaction_id, None)
        if running is None:
            _log.debug("late_summary_dropped", compaction_id=compaction_id)
            return
        self._timer.cancel(running.timer)
        _answer(running.message, summary, detail, seconds)

    def next_job(self, worker: pykka.ActorRef[CompactionActor]) -> None:
        """``worker`` is free (new, or done with its job): give it a queued job, or let it idle."""
        with self._lock:
            if worker in self._retired or self._stopped:
                return
            following = None
            while self._queue and following is None:
                following = self._jobs.get(self._queue.popleft())
            if following is None:
                self._idle.append(worker)
                return
            following.worker = worker
        worker.tell(following.message)

    def hurried(self, compaction_id: str) -> threading.Event | None:
        """The event that hurries job ``compaction_id`` (None once it is answered)."""
        running = self._jobs.get(compaction_id)
        return None if running is None else running.hurried

    def hurry(self, compaction_id: str) -> None:
        """Somebody waits for job ``compaction_id``: it no longer waits for a worker process
        to start or be free (see :mod:`ctxledger.actors.summary_process`)."""
        running = self._jobs.get(compaction_id)
        if running is not None:
            running.hurried.set()

    def _hurry_all(self) -> None:
        for running in self._jobs.values():
            running.hurried.set()

    def abandon(self, compaction_id: str) -> None:
        """Give up on a job: nobody waits for it any more (its session is being reloaded)."""
        self._drop(compaction_id)

    def _timed_out(self, compaction_id: str) -> None:
        """The job's timeout fired first (on the timer thread): abandon it, answer "timed out"."""
        running = self._drop(compaction_id)
        if running is not None:
            seconds = running.timeout
            _answer(running.message, None, f"summarizer timed out after {seconds}s", seconds)

    def _drop(self, compaction_id: str) -> _Running | None:
        """Forget an unanswered job; retire the worker stuck in it (a fresh one takes over)."""
        future = self._futures.pop(compaction_id, None)
        if future is not None:
            future.cancel()
        with self._lock:
            running = self._jobs.pop(compaction_id, None)
            if running is None:
                return None
            running.hurried.set()  # a job waiting for a worker process stops waiting
            worker = running.worker
            if worker is None:
                with contextlib.suppress(ValueError):
                    self._queue.remove(compaction_id)
            else:
                self._retired = [ref for ref in self._retired if ref.is_alive()]
                self._retired.append(worker)
            replace = worker is not None and len(self._retired) <= MAX_RETIRED and not self._stopped
        self._timer.cancel(running.timer)
        if worker is not None:
            worker.stop(block=False)  # handled once the stuck call returns
            _log.warning("summarizer_abandoned", compaction_id=compaction_id)
        if replace:
            self.next_job(CompactionActor.start(self, self._summarizer))
        return running

    def stop(self) -> None:
        """Stop the workers without waiting for a summariser call in progress."""
        with self._lock:
            self._stopped = True
            self._hurry_all()
            workers = list(self._idle) + [
                running.worker for running in self._jobs.values() if running.worker is not None
            ]
            self._idle.clear()
            queued = [self._jobs.pop(compaction_id) for compaction_id in self._queue]
            self._queue.clear()
        for running in queued:
            self._timer.cancel(running.timer)
            _answer(running.message, None, "the host is closing", 0.0)
        for worker in workers:
            worker.stop(block=False)
        for future in list(self._futures.values()):
            future.cancel()
        if self.processes is not None:
            self.processes.close()

    def _run_async(self, message: Summarize, loop: asyncio.AbstractEventLoop | None) -> None:
        target = loop if loop is not None and loop.is_running() else self._host_loop()
        clock = self.clock
        started = clock()
        summarizer: Any = self._summarizer
        plan = message.job.plan
        _make_input(plan)  # here, not on the loop the coroutine runs on (the caller's, maybe)
        future = asyncio.run_coroutine_threadsafe(arun_summarizer(plan, summarizer), target)
        compaction_id = message.job.compaction_id
        self._futures[compaction_id] = future

        def done(finished: concurrent.futures.Future[Any]) -> None:
            self._futures.pop(compaction_id, None)
            if finished.cancelled():
                return
            summary, detail = _summarize(finished.result)
            self.finished(compaction_id, summary, detail, max(0.0, clock() - started))

        future.add_done_callback(done)


def _summarize(call: Callable[[], str | None]) -> tuple[str | None, str]:
    try:
        summary = call()
    except SummaryProcessError as exc:  # worded in the process as below, or the process failed
        _log.warning("summarizer_raised", error=str(exc))
        return None, str(exc)
    except Exception as exc:  # a user's summariser may raise anything; it must not kill us
        _log.warning("summarizer_raised", error=repr(exc))
        return None, f"summarizer raised {type(exc).__name__}: {exc}"
    if not summary:
        return None, "summarizer returned no summary"
    if not summary.isascii():
        # A lone surrogate (say from a model's output cut mid-character) cannot be recorded.
        summary = summary.encode("utf-8", "replace").decode("utf-8")
    return summary, ""


def _answer(message: Summarize, summary: str | None, detail: str, seconds: float) -> None:
    job = message.job
    if summary:
        _log.info(
            "compaction_finished",
            session_id=message.session_id,
            compaction_id=job.compaction_id,
            background=job.background,
            chars=len(summary),
        )
    else:
        _log.warning(
            "compaction_failed",
            session_id=message.session_id,
            compaction_id=job.compaction_id,
            background=job.background,
            detail=detail,
        )
    with contextlib.suppress(pykka.ActorDeadError):  # the host closed meanwhile
        message.owner.tell(SummaryDone(message.session_id, job, summary, detail, seconds))
