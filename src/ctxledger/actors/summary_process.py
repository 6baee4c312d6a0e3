"""Background summaries of the built-in offline summariser, made in worker processes.

The offline summariser (:class:`~ctxledger.summarizers.ExtractiveSummarizer`) and the digest of
its input are Python working on the CPU: a background summary of a few hundred messages takes
~100 ms, and while a compaction thread runs it every other thread of the process (the agent's
calls, the history actors, the journal) waits for the GIL at each hand-off, up to the switch
interval (5 ms) each time. Nobody waits for a background summary, but everyone waited behind it:
it was the tail of every latency in ``bench/peers.py`` and ``bench/bench_host.py``.

A host whose summariser is exactly that class (nothing else is known to be pure and CPU-bound:
an LLM summariser waits on the network, with the GIL released) runs its background jobs in up to
``HostOptions.summary_processes`` worker processes (:class:`SummaryProcesses`). A foreground
summary stays on its compaction thread: the agent waits for it either way. The first job starts
a worker (``python -m ctxledger.actors._summary_main``, never forked from the host's threaded
process, importing the same ``ctxledger`` the host runs, handed out once it says it is ready,
~0.1-0.2 s later) and waits for it, as does every job that finds the workers starting or busy,
unless the job is hurried: a step awaits it (the session reached its threshold),
``wait_background`` does, or its compaction thread is wanted for a job queued behind it (and at
its timeout and the host's close); then it runs on its thread at once. So a summary somebody
waits for never waits for a worker to start or to be free, and the ones nobody waits for stay
off the host's GIL: on a thread, each of them held the steps of every session up to the switch
interval at each hand-off (``bench/bench_host.py``: one session's p99 ~11 ms when the first jobs
ran beside it, ~7 with them waiting for the worker; the open loop's p99 ~12 ms with the jobs
that found the worker busy on threads, ~9 with them waiting). No thread is started for any of
it. Workers run at a lower priority (``os.nice``: the host's threads first) and live until the
host closes; they exit when their input closes, so a host that dies leaves none behind.

A job is one frame each way over the worker's pipes: the plan, the summariser pickled (a class
of this package) and whether to read the facts of the covered messages (encoded once), then
the summary (or what went wrong, worded as a summariser failure on a thread is), the input's
address, its size and the summariser calls, which the plan keeps, so the history actor does
not make the input again, and what each covered message gives the checkpoint's fact block when
asked (see :mod:`ctxledger.actors.fact_warming`), and all their facts, which the host keeps.
The summary is the same function of the same input as on a thread; a worker that dies or
answers garbage fails its job (recorded as any summariser failure) and is not used again.

On a thread, these summaries made ``bench/peers.py``'s sequential p99 four times what it is with
them in a process (``bench/README.md``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import msgspec

from ctxledger.domain._compaction_plan import CompactionPlan, run_summarizer
from ctxledger.domain._fact_extract import (
    Fact,
    MessageReads,
    extract_facts,
    message_reads,
    remember_facts,
    remember_reads,
)
from ctxledger.domain.summary import Summarizer
from ctxledger.summarizers import ExtractiveSummarizer

__all__ = ["SUPPORTED", "SummaryProcessError", "SummaryProcesses", "in_processes", "main"]

_HEADER = struct.Struct("!I")
_JOB_ENCODER = msgspec.msgpack.Encoder(enc_hook=CompactionPlan.encode_hook)
_JOB_DECODER = msgspec.msgpack.Decoder(
    tuple[CompactionPlan, bytes, bool], dec_hook=CompactionPlan.decode_hook
)

#: The frame a worker sends once it is ready for jobs.
_READY = b"ready"
#: The module a worker runs (``python -m``).
_MAIN = "ctxledger.actors._summary_main"
#: Seconds between two looks at the workers by a job waiting for one.
_READY_POLL = 0.005

#: How much nicer than the host a worker runs (see :func:`os.nice`).
_NICE = 10


class SummaryProcessError(Exception):
    """A job a worker process could not answer; the message is the job's failure detail."""


#: Whether worker processes can be used here (the readiness poll selects on a pipe: POSIX).
SUPPORTED = os.name == "posix"


def in_processes(summarizer: object) -> bool:
    """Whether ``summarizer``'s background jobs may run in worker processes: it is exactly the
    built-in offline summariser (a subclass may do anything, an LLM call included)."""
    return type(summarizer) is ExtractiveSummarizer


class _Answer(msgspec.Struct, array_like=True, frozen=True):
    summary: str | None
    detail: str
    input_hash: str
    made_chars: int
    calls: int
    reads: MessageReads  # what each covered message gives the fact block (see _answer)
    facts: list[Fact]  # and the facts of them all, extract_facts(plan.covered)


class _Worker:
    """One worker process and its pipes."""

    def __init__(self) -> None:
        package = Path(__file__).resolve().parents[2]  # the folder holding this ctxledger
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(package), *filter(None, [env.get("PYTHONPATH")])])
        self.process = subprocess.Popen(
            [sys.executable, "-m", _MAIN],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._input: IO[bytes] = self.process.stdin
        self._output: IO[bytes] = self.process.stdout

    def ready(self, timeout: float | None = 0.0) -> bool:
        """Whether the worker has imported what it needs and said so (waiting up to ``timeout``
        seconds for it; None: until it does). A job sent before would wait for the imports
        (~0.3 s), and the summary's time, which the pace rule reads, would count them.

        Raises:
            OSError: The process ended or said something else (it is closed).
        """
        readable, _, _ = select.select([self._output], [], [], timeout)
        if not readable:
            return False
        if _read_frame(self._output) != _READY:
            self.close(kill=True)
            raise OSError(f"the summary process did not start (code {self.process.poll()})")
        return True

    def run(self, frame: bytearray) -> _Answer:
        """Send ``frame`` (:func:`_job_frame`) and read the answer."""
        try:
            self._input.write(frame)
            self._input.flush()
            reply = _read_frame(self._output)
        except OSError as exc:
            raise SummaryProcessError(f"the summary process failed: {exc}") from None
        if reply is None:
            code = self.process.poll()
            raise SummaryProcessError(f"the summary process exited (code {code})")
        try:
            return msgspec.msgpack.decode(reply, type=_Answer)
        except msgspec.DecodeError as exc:
            raise SummaryProcessError(f"the summary process answered garbage: {exc}") from None

    def close(self, *, kill: bool = False) -> None:
        """End the process (its input closes: it exits) and reap it."""
        with contextlib.suppress(OSError):
            self._input.close()
        if kill:
            self.process.kill()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        with contextlib.suppress(OSError):
            self._output.close()


class SummaryProcesses:
    """Up to ``limit`` worker processes shared by the compaction threads; a job somebody waits
    for never waits for one.

    :meth:`take` hands out an idle worker, or none: then the job runs on its thread. Below the
    limit a job that finds none idle starts one, handed out once it said it is ready; a job
    nobody waits for yet waits for a worker, started or busy (see the module docstring). A
    summary's time (``summary_seconds``, which the pace rule compares with the session's
    growth) is the job's alone, not its wait. No thread is started for any of it.

    Args:
        limit: Processes at most.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._starting: list[_Worker] = []
        self._closed = False
        #: False once a worker could not be started: the jobs run on the threads from then on.
        self.available = True
        #: Summaries the workers made (answered without an error).
        self.made = 0

    def take(self, hurried: threading.Event | None = None) -> Callable[..., str | None] | None:
        """Return :meth:`summarize` in an idle worker for one job, or None: run the job on the
        thread (no worker can start, or the job was hurried, or it may not wait).

        A job that finds no worker idle starts one (below the limit); with ``hurried`` it then
        waits for a worker, started or busy, until ``hurried`` is set (somebody waits for the
        job, or its thread is wanted: it runs there at once). Without, it does not wait.
        """
        with self._lock:
            run = self._hand_out()
            if run is not None or self._closed or not self.available:
                return run
            start = len(self._busy) + len(self._starting) < self._limit
        if start:
            self._start()
        while hurried is not None:
            with self._lock:
                run = self._hand_out()
                if run is not None or self._closed or not (self._starting or self._busy):
                    return run  # None: closed, or no worker could start
            if hurried.wait(_READY_POLL):
                break
        return None

    def _hand_out(self) -> Callable[..., str | None] | None:
        """:meth:`summarize` in an idle worker (now busy), or None (under the lock)."""
        self._promote(0.0)
        if not self._idle:
            return None
        worker = self._idle.pop()
        self._busy.add(worker)
        return functools.partial(self.summarize, worker)

    def _start(self) -> None:
        """Start a worker process, handed out once it is ready (:meth:`_promote`)."""
        try:
            started = _Worker()  # the process only: its imports go on beside this job
        except OSError as exc:  # no interpreter to start (an embedded Python, a sandbox...)
            self._unavailable(exc)
            return
        with self._lock:
            keep = not self._closed
            if keep:
                self._starting.append(started)
        if not keep:
            started.close(kill=True)

    def summarize(
        self,
        worker: _Worker,
        plan: CompactionPlan,
        summarizer: Summarizer,
        reads: bool = False,
    ) -> str | None:
        """Summarise ``plan`` with ``summarizer`` in ``worker`` (from :meth:`take`; it is given
        back) and keep its input's address and size on the plan; return the summary (``None``
        where the summariser returned none).

        With ``reads`` the worker also reads the facts of the messages it summarised (see
        :mod:`ctxledger.actors.fact_warming`: the checkpoint's fact block reads them on the
        history actor otherwise), and the host keeps them in the memo of
        :func:`~ctxledger.domain.facts.extract_facts`, what each message gives and the facts
        of them all, where the block finds them: the host's threads neither read them nor
        gather them.

        Raises:
            SummaryProcessError: The job failed: the summariser raised (the message is worded
                as for a summariser on a thread), or the worker died (it is not used again).
        """
        frame = _job_frame(plan, summarizer, reads)
        answer: _Answer | None = None
        try:
            answer = worker.run(frame)
        finally:
            self._give_back(worker, broken=answer is None)
        if answer.detail:
            raise SummaryProcessError(answer.detail)
        with self._lock:
            self.made += 1
        plan.made_elsewhere(answer.input_hash, answer.made_chars, answer.calls)
        if answer.reads:
            remember_reads(plan.covered, answer.reads)
            remember_facts(plan.covered, answer.facts)
        return answer.summary

    def close(self) -> None:
        """End every worker: idle ones now, busy and starting ones killed (their jobs fail);
        reap them."""
        with self._lock:
            self._closed = True
            idle, busy = self._idle, [*self._busy, *self._starting]
            self._idle, self._starting = [], []
        for worker in idle:
            worker.close()
        for worker in busy:
            worker.close(kill=True)

    def _promote(self, timeout: float | None) -> None:
        """Hand out the started workers that are ready (under the lock; waiting up to
        ``timeout`` seconds for each, None: until it is)."""
        for worker in list(self._starting):
            try:
                ready = worker.ready(timeout)
            except OSError as exc:
                self._starting.remove(worker)
                self.available = False
                _unavailable_logged(exc)
                continue
            if ready:
                self._starting.remove(worker)
                self._idle.append(worker)

    def _unavailable(self, exc: OSError) -> None:
        with self._lock:
            self.available = False
        _unavailable_logged(exc)

    def _give_back(self, worker: _Worker, *, broken: bool) -> None:
        with self._lock:
            self._busy.discard(worker)
            keep = not broken and not self._closed
            if keep:
                self._idle.append(worker)
        if not keep:
            worker.close(kill=broken)


def _unavailable_logged(exc: OSError) -> None:
    # The logging package is imported here, not by the module: a worker imports the module
    # and never logs, and the import was a fifth of its start (~40 of ~180 ms).
    from ctxledger._logging import get_logger

    get_logger(__name__).warning("summary_process_unavailable", error=repr(exc))


def _read_frame(stream: IO[bytes]) -> bytes | None:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    body = stream.read(size)
    return body if len(body) == size else None


def _job_frame(plan: CompactionPlan, summarizer: Summarizer, reads: bool) -> bytearray:
    """A job's frame: its size, then the plan, the pickled summariser and ``reads``."""
    frame = bytearray(_HEADER.size)
    _JOB_ENCODER.encode_into((plan, pickle.dumps(summarizer), reads), frame, _HEADER.size)
    _HEADER.pack_into(frame, 0, len(frame) - _HEADER.size)
    return frame


def _answer(body: bytes) -> _Answer:
    """Answer one job (a frame's body, after its size)."""
    plan, pickled, wanted = _JOB_DECODER.decode(body)
    summarizer: Any = pickle.loads(pickled)  # our own host, over our own pipe
    try:
        summary = run_summarizer(plan, summarizer)
    except Exception as exc:  # reported as a summariser failure, as on a thread
        return _Answer(None, f"summarizer raised {type(exc).__name__}: {exc}", "", 0, 0, [], [])
    # What the covered messages give the checkpoint's fact block (see SummaryProcesses.summarize).
    reads: MessageReads = []
    facts: list[Fact] = []
    if summary and wanted and plan.fact_chars:
        reads = message_reads(plan.covered)
        remember_reads(plan.covered, reads)
        facts = extract_facts(plan.covered)  # from the reads just kept
    return _Answer(
        summary, "", plan.input_hash, plan.made_chars, plan.summarizer_calls, reads, facts
    )


def main() -> None:
    """The worker: answer each job frame on stdin with one on stdout until stdin closes."""
    # Ctrl-C in a terminal reaches the whole process group: the host decides what it means,
    # and the worker ends when its input closes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError, AttributeError):  # not everywhere (Windows has none)
        os.nice(_NICE)  # nobody waits for a background summary: the host's threads go first
    source = sys.stdin.buffer
    # The frames get a descriptor of their own, and descriptor 1 becomes stderr: nothing
    # printed by accident (by Python or by a C library) may break them.
    sys.stdout.flush()
    sink = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    sink.write(_HEADER.pack(len(_READY)) + _READY)
    sink.flush()
    while True:
        frame = _read_frame(source)
        if frame is None:
            return
        body = msgspec.msgpack.encode(_answer(frame))
        sink.write(_HEADER.pack(len(body)) + body)
        sink.flush()
