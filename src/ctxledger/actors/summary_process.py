"""Background summaries of the built-in offline summariser, made in worker processes.

The offline summariser (:class:`~ctxledger.summarizers.ExtractiveSummarizer`) and the digest of
its input are Python working on the CPU: a background summary of a few hundred messages takes
~100 ms, and while a compaction thread runs it every other thread of the process (the agent's
calls, the history actors, the journal) waits for the GIL at each hand-off, up to the switch
interval (5 ms) each time. Nobody waits for a background summary, but everyone waited behind it:
it was the tail of every latency in ``bench/peers.py`` and ``bench/bench_host.py``.

A host whose summariser is exactly that class (nothing else is known to be pure and CPU-bound:
an LLM summariser waits on the network, with the GIL released) runs its background jobs in up
to ``HostOptions.summary_processes`` worker processes (:class:`SummaryProcesses`). A foreground
summary stays on its compaction thread: the agent waits for it either way, and the first one
would wait for a process to start. Workers start on first use (``python -m
ctxledger.actors._summary_main``, never forked from the host's threaded process, importing the
same ``ctxledger`` the host runs), run at a lower priority (``os.nice``: the host's threads
first) and live until the host closes; they exit when their input closes, so a host that dies
leaves none behind. A job is one frame each way over the worker's pipes: the plan in msgpack
and the summariser pickled (a class of this package), then the summary (or what went wrong,
worded as a summariser failure on a thread is), the input's address, its size and the
summariser calls, which the plan keeps, so the history actor does not make the input again.
The summary is the same function of the same input as on a thread; a worker that dies or
answers garbage fails its job (recorded as any summariser failure) and is replaced for the
next one.

``bench/peers.py``'s sequential appends (20,000 messages, one session, never served: a summary
prepared ahead every few hundred messages), p50 / p99: 516 / 6,485 µs with the summaries on a
thread, ~500 / 1,530-1,650 µs in a process; with summaries that cost nothing, 560-600 /
940-1,090 µs (see ``bench/README.md``).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

import msgspec

from ctxledger._logging import get_logger
from ctxledger.domain import CompactionPlan, Summarizer, run_summarizer
from ctxledger.domain._compaction_plan import _Given
from ctxledger.summarizers import ExtractiveSummarizer

__all__ = ["SummaryProcessError", "SummaryProcesses", "in_processes", "main"]

_log = get_logger(__name__)

_HEADER = struct.Struct("!I")

#: How much nicer than the host a worker runs (see :func:`os.nice`).
_NICE = 10


class SummaryProcessError(Exception):
    """A job a worker process could not answer; the message is the job's failure detail."""


def in_processes(summarizer: object) -> bool:
    """Whether ``summarizer``'s background jobs may run in worker processes: it is exactly the
    built-in offline summariser (a subclass may do anything, an LLM call included)."""
    return type(summarizer) is ExtractiveSummarizer


class _Answer(msgspec.Struct, array_like=True, frozen=True):
    summary: str | None
    detail: str
    input_hash: str
    input_chars: int
    calls: int


class _Worker:
    """One worker process and its pipes."""

    def __init__(self) -> None:
        package = Path(__file__).resolve().parents[2]  # the folder holding this ctxledger
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(package), *filter(None, [env.get("PYTHONPATH")])])
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ctxledger.actors._summary_main"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._input: IO[bytes] = self.process.stdin
        self._output: IO[bytes] = self.process.stdout

    def run(self, frame: bytes) -> _Answer:
        try:
            self._input.write(_HEADER.pack(len(frame)) + frame)
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
    """Up to ``limit`` worker processes, started on first use, shared by the compaction threads.

    Args:
        limit: Processes at most; a job waits for a free one.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._lock = threading.Condition()
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._closed = False
        #: False once a worker could not be started: the jobs run on the threads from then on.
        self.available = True

    def summarize(self, plan: CompactionPlan, summarizer: Summarizer) -> str | None:
        """Summarise ``plan`` with ``summarizer`` in a worker and keep its input's address and
        size on the plan; return the summary (``None`` where the summariser returned none).

        Raises:
            SummaryProcessError: The job failed: the summariser raised (the message is worded
                as for a summariser on a thread), the worker died, or the host is closing.
        """
        frame = msgspec.msgpack.encode(
            (msgspec.msgpack.encode(plan, enc_hook=_no_given), pickle.dumps(summarizer))
        )
        worker = self._take()
        answer: _Answer | None = None
        try:
            answer = worker.run(frame)
        finally:
            self._give_back(worker, broken=answer is None)
        if answer.detail:
            raise SummaryProcessError(answer.detail)
        plan.made_elsewhere(answer.input_hash, answer.input_chars, answer.calls)
        return answer.summary

    def close(self) -> None:
        """End every worker: idle ones now, busy ones killed (their jobs fail); reap them."""
        with self._lock:
            self._closed = True
            idle, busy = self._idle, list(self._busy)
            self._idle = []
            self._lock.notify_all()
        for worker in idle:
            worker.close()
        for worker in busy:
            worker.close(kill=True)

    def _take(self) -> _Worker:
        worker: _Worker | None
        with self._lock:
            while True:
                if self._closed:
                    raise SummaryProcessError("the host is closing")
                if self._idle:
                    worker = self._idle.pop()
                    break
                if len(self._busy) < self._limit:
                    worker = None
                    break
                self._lock.wait()
            if worker is not None:
                self._busy.add(worker)
                return worker
        try:
            started = _Worker()  # outside the lock: it takes a moment
        except OSError as exc:  # no interpreter to start (an embedded Python, a sandbox...)
            with self._lock:
                self.available = False
                self._lock.notify_all()
            _log.warning("summary_process_unavailable", error=repr(exc))
            raise SummaryProcessError(f"could not start a summary process: {exc}") from None
        with self._lock:
            self._busy.add(started)
            closed = self._closed
        if closed:
            self._give_back(started, broken=True)
            raise SummaryProcessError("the host is closing")
        return started

    def _give_back(self, worker: _Worker, *, broken: bool) -> None:
        with self._lock:
            self._busy.discard(worker)
            keep = not broken and not self._closed
            if keep:
                self._idle.append(worker)
            self._lock.notify()
        if not keep:
            worker.close(kill=broken)


def _no_given(value: object) -> None:
    """The plan's cache of its input is not sent: the worker makes the input."""
    if isinstance(value, _Given):
        return None
    raise NotImplementedError(f"cannot send {type(value).__name__}")


def _read_frame(stream: IO[bytes]) -> bytes | None:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    body = stream.read(size)
    return body if len(body) == size else None


def _answer(frame: bytes) -> _Answer:
    encoded_plan, pickled = msgspec.msgpack.decode(frame, type=tuple[bytes, bytes])
    plan = msgspec.msgpack.decode(
        encoded_plan, type=CompactionPlan, dec_hook=lambda kind, value: _Given()
    )
    summarizer: Any = pickle.loads(pickled)  # our own host, over our own pipe
    try:
        summary = run_summarizer(plan, summarizer)
    except Exception as exc:  # reported as a summariser failure, as on a thread
        return _Answer(None, f"summarizer raised {type(exc).__name__}: {exc}", "", 0, 0)
    return _Answer(summary, "", plan.input_hash, plan.made_chars, plan.summarizer_calls)


def main() -> None:
    """The worker: answer each job frame on stdin with one on stdout until stdin closes."""
    with contextlib.suppress(OSError, AttributeError):  # not everywhere (Windows has none)
        os.nice(_NICE)  # nobody waits for a background summary: the host's threads go first
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing printed by accident may break the frames
    while True:
        frame = _read_frame(source)
        if frame is None:
            return
        body = msgspec.msgpack.encode(_answer(frame))
        sink.write(_HEADER.pack(len(body)) + body)
        sink.flush()
