"""Background summaries of the built-in offline summariser, made in a worker process.

A host whose summariser is exactly ``ExtractiveSummarizer`` makes its background summaries in
``HostOptions.summary_processes`` worker processes (real ``python -m`` children over pipes):

* the log is the one the same host writes with the summaries on its threads (byte for byte,
  but the wall times), so old and new hosts replay and verify alike;
* a worker killed with SIGKILL fails its job as a summariser failure would (recorded, backed
  off), and the next job starts a fresh worker;
* closing the host ends and reaps every worker;
* the option is checked: a count, and only for that summariser.
"""

from __future__ import annotations

import itertools
import os
import signal
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ctxledger import Config, Host, HostOptions, Message, replay
from ctxledger.actors import summary_process
from ctxledger.actors.compaction import _summarize
from ctxledger.actors.summary_process import SummaryProcesses, _answer, _job_frame
from ctxledger.domain import CompactionPlan
from ctxledger.errors import InvalidArgumentError
from ctxledger.events import (
    CheckpointCreated,
    CompactionFailed,
    CompactionStarted,
    Event,
    SummaryPrepared,
)
from ctxledger.events.codec import encode_payload
from ctxledger.storage import MemoryEventLog
from ctxledger.summarizers import ExtractiveSummarizer
from ctxledger.testing import digest_summarizer
from ctxledger.tooling.workload import take_messages
from log_capture import capture_logs

#: A summary is prepared in the background every few dozen messages of the workload.
CONFIG = Config(context_window=16_000, min_retain_rounds=1)


def _ids() -> Any:
    counter = itertools.count(1)
    return lambda: f"id{next(counter)}"


def _ticks() -> Any:
    counter = itertools.count(1)
    return lambda: 1_765_000_000.0 + next(counter)


def _host(path: Path, processes: int) -> Host:
    return Host.open(
        path,
        config=CONFIG,
        clock=_ticks(),
        id_factory=_ids(),
        options=HostOptions(summary_processes=processes),
    )


def _grow(host: Host, messages: list[Message]) -> None:
    session = host.session("s")
    processes = host._actors.compaction.processes
    for message in messages:
        _append(session, message, processes)


def _append(session: Any, message: Message, processes: SummaryProcesses | None) -> None:
    """Append and wait for the background summary it set off (one at a time: the same cuts
    whatever the timing); then for a worker it had started (a job that finds none idle runs on
    its thread), so that the next job finds it."""
    session.append(message)
    session.wait_background()
    if processes is not None:
        _settled(processes)


def _comparable(event: Event) -> bytes:
    if isinstance(event, SummaryPrepared):
        event = msgspec.structs.replace(event, summary_seconds=0.0)
    return encode_payload(event)


def _workers(host: Host) -> SummaryProcesses:
    processes = host._actors.compaction.processes
    assert processes is not None
    return processes


def test_summaries_made_in_a_process_are_those_made_on_a_thread(tmp_path: Path) -> None:
    messages = list(take_messages(0, 160))
    logs = []
    for processes in (0, 1):
        with _host(tmp_path / str(processes), processes) as host:
            assert host.options.summary_processes == processes
            _grow(host, messages)
            if processes:
                assert _workers(host).made >= 2, "no worker process made a summary"
            logs.append([r.event for r in host.log.read("s")])
    thread_log, process_log = logs
    assert sum(isinstance(e, SummaryPrepared) for e in thread_log) >= 2, "nothing to compare"
    assert [_comparable(e) for e in process_log] == [_comparable(e) for e in thread_log]
    with Host.open(tmp_path / "1") as host:
        assert replay.verify(host.log, "s").ok


def test_a_killed_worker_fails_its_job_and_the_next_job_gets_a_new_one(tmp_path: Path) -> None:
    messages = list(take_messages(0, 400))
    with _host(tmp_path, 1) as host:
        session = host.session("s")
        done = 0
        workers = _workers(host)
        while not workers._idle and done < len(messages):  # the first job starts a worker
            _append(session, messages[done], workers)
            done += 1
        _settled(workers)
        assert workers._idle, "no background summary ran"
        first = workers._idle[0].process
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        failed: list[CompactionFailed] = []
        while not failed and done < len(messages):
            _append(session, messages[done], workers)
            done += 1
            failed = [r.event for r in host.log.read("s") if isinstance(r.event, CompactionFailed)]
        assert failed and failed[0].background
        assert "summary process" in failed[0].detail
        prepared_before = _count(host, SummaryPrepared)
        while _count(host, SummaryPrepared) == prepared_before and done < len(messages):
            _append(session, messages[done], workers)
            done += 1
        assert _count(host, SummaryPrepared) > prepared_before, "no summary after the failure"
        _settled(workers)
        assert workers._idle and workers._idle[0].process is not first
        made = workers.made
        while workers.made == made and done < len(messages):
            _append(session, messages[done], workers)
            done += 1
        assert workers.made > made, "the new worker made no summary"
        assert session.prepare_step().view_tokens <= CONFIG.context_window  # it serves as ever
    assert first.returncode is not None


def test_ctrl_c_in_the_terminal_does_not_end_a_worker(tmp_path: Path) -> None:
    """SIGINT reaches a terminal's whole process group: the worker ignores it (the host's
    program decides what it means) and goes on making summaries."""
    messages = list(take_messages(0, 400))
    with _host(tmp_path, 1) as host:
        session, workers, done = host.session("s"), _workers(host), 0
        while not workers._idle and done < len(messages):
            _append(session, messages[done], workers)
            done += 1
        assert workers._idle, "no worker started"
        worker = workers._idle[0].process
        os.kill(worker.pid, signal.SIGINT)
        made = workers.made
        while workers.made == made and done < len(messages):
            _append(session, messages[done], workers)
            done += 1
        assert workers.made > made and worker.poll() is None
        assert _count(host, CompactionFailed) == 0


def _settled(workers: SummaryProcesses) -> None:
    """Wait until the workers being started are ready (or could not start)."""
    with workers._lock:
        workers._promote(None)


def _count(host: Host, kind: type) -> int:
    return sum(isinstance(r.event, kind) for r in host.log.read("s"))


def test_closing_the_host_ends_and_reaps_its_workers(tmp_path: Path) -> None:
    host = _host(tmp_path, 2)
    _grow(host, list(take_messages(0, 160)))
    workers = _workers(host)
    _settled(workers)
    processes = [worker.process for worker in workers._idle]
    assert processes and workers.made
    host.close()
    assert all(process.returncode is not None for process in processes)
    assert not workers._idle and not workers._busy


def test_the_option_is_a_count_and_only_for_the_offline_summariser(tmp_path: Path) -> None:
    for wrong in (-1, True, 1.5, "1"):
        with pytest.raises(InvalidArgumentError) as info:
            HostOptions(summary_processes=wrong)  # type: ignore[arg-type]
        assert info.value.argument == "summary_processes"
    log = MemoryEventLog()
    with pytest.raises(InvalidArgumentError) as info:
        Host(log, summarizer=digest_summarizer, options=HostOptions(summary_processes=1))
    assert info.value.argument == "summary_processes"
    with pytest.raises(InvalidArgumentError):  # nothing is left open: the folder opens again
        Host.open(tmp_path, summarizer=digest_summarizer, options=HostOptions(summary_processes=2))
    with Host.open(tmp_path) as host:
        assert host.options.summary_processes == (1 if (os.cpu_count() or 1) > 1 else 0)
    with Host(log, summarizer=digest_summarizer) as host:
        assert host.options.summary_processes == 0
        assert host._actors.compaction.processes is None
    with Host(MemoryEventLog()) as host:
        assert host.options.summary_processes == (1 if (os.cpu_count() or 1) > 1 else 0)
    with Host(MemoryEventLog(), options=HostOptions(summary_processes=0)) as host:
        assert host._actors.compaction.processes is None


class _Raises:
    def __call__(self, request: object) -> str:
        raise ValueError("boom")


def _body(frame: bytearray) -> bytes:
    """A job frame's body: what follows its size (a 4-byte big-endian count of the rest)."""
    (size,) = struct.unpack("!I", frame[:4])
    assert size == len(frame) - 4
    return bytes(frame[4:])


def test_a_summariser_failure_in_a_worker_is_worded_as_on_a_thread() -> None:
    plan = CompactionPlan(
        reason="manual", retain_from_seq=3, covers_through_seq=2,
        covered=(Message(role="user", content="a", seq=1),
                 Message(role="assistant", content="b", seq=2)),
        previous_summary=None, previous_checkpoint_id=None, focus=None, max_chars=100,
        chunk_chars=1_000, estimated_tokens=1, threshold=2, target_tokens=1, planned_tokens=1,
    )  # fmt: skip
    encoded = plan.to_msgpack()
    assert CompactionPlan.from_msgpack(encoded) == plan
    answer = _answer(_body(_job_frame(plan, _Raises(), True)))
    on_thread = _summarize(lambda: _Raises()(None))
    assert (None, answer.detail) == on_thread
    made = _answer(_body(_job_frame(plan, ExtractiveSummarizer(), False)))
    assert made.input_hash == plan.input_hash and made.calls == plan.summarizer_calls
    assert made.made_chars == plan.made_chars and made.summary


def test_where_no_worker_can_start_the_threads_make_the_summaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    with _host(tmp_path / "db", 1) as host:
        _grow(host, list(take_messages(0, 160)))
        workers = _workers(host)
        _settled(workers)
        assert not workers.available and workers.made == 0
        assert _count(host, SummaryPrepared) >= 2  # all made on the threads
        assert _count(host, CompactionFailed) == 0


# A job that finds its worker starting waits for it, unless somebody waits for the job: the
# worker below never says it is ready, so each of these would hang without the hurry.


@pytest.fixture
def never_ready(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers that start and never say they are ready (they end when their input closes)."""
    folder = tmp_path / "never"
    folder.mkdir()
    (folder / "never_ready.py").write_text("import sys\nsys.stdin.buffer.read()\n")
    monkeypatch.setenv("PYTHONPATH", str(folder))
    monkeypatch.setattr(summary_process, "_MAIN", "never_ready")


def _within(seconds: float, call: Any) -> Any:
    """``call()`` on a thread; fail unless it returned within ``seconds`` (a hang's bound)."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{call} still waits after {seconds} s"
    return result[0] if result else None


def _until_background(host: Host, session: Any, messages: Any) -> int:
    """Append (without waiting) until a background summary has started; return how many."""
    for count, message in enumerate(messages, 1):
        session.append(message)
        started = host.log.read("s")
        if any(isinstance(r.event, CompactionStarted) and r.event.background for r in started):
            return count
    raise AssertionError("no background summary started")


def test_a_background_summary_nobody_waits_for_is_made_by_the_worker_it_started(
    tmp_path: Path,
) -> None:
    """The first job starts the worker and waits for it rather than run beside the host's
    threads (it ran on its thread before: ``made`` stayed 0)."""
    with _host(tmp_path, 1) as host:
        session, workers = host.session("s"), _workers(host)
        _until_background(host, session, take_messages(0, 400))
        deadline = time.monotonic() + 120  # a bound for a slow machine, not a timing
        while _count(host, SummaryPrepared) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _count(host, SummaryPrepared) == 1
        assert workers.made == 1, "the first summary was not made by the worker it started"


def test_wait_background_does_not_wait_for_a_worker_to_start(
    tmp_path: Path, never_ready: None
) -> None:
    with _host(tmp_path, 1) as host:
        session, workers = host.session("s"), _workers(host)
        _until_background(host, session, take_messages(0, 400))
        _within(60, session.wait_background)
        assert _count(host, SummaryPrepared) == 1 and workers.made == 0  # on its thread
        assert workers._starting, "the worker was not being started"


def test_a_step_that_awaits_a_summary_does_not_wait_for_a_worker_to_start(
    tmp_path: Path, never_ready: None
) -> None:
    with _host(tmp_path, 1) as host:
        session = host.session("s")
        messages = iter(take_messages(0, 2_000))
        _until_background(host, session, messages)
        # Steps until one reaches the threshold: it awaits the running summary.
        for message in messages:
            view = _within(60, lambda m=message: session.step([m]))
            if _count(host, CheckpointCreated):
                break
        assert _count(host, CheckpointCreated), "no step reached the threshold"
        assert view.view_tokens <= CONFIG.context_window
        assert _workers(host).made == 0


def test_a_foreground_summary_gets_the_thread_a_waiting_job_holds(
    tmp_path: Path, never_ready: None
) -> None:
    options = HostOptions(summary_processes=1, compaction_workers=1)
    with Host.open(tmp_path, config=CONFIG, options=options) as host:
        session = host.session("s")
        _until_background(host, session, take_messages(0, 400))
        other = host.session("other")
        other.append_many(list(take_messages(7, 60)))
        result = _within(60, lambda: other.compact(focus="the tests"))
        assert result.compacted, result.reason


def test_closing_the_host_does_not_wait_for_a_worker_to_start(
    tmp_path: Path, never_ready: None
) -> None:
    host = _host(tmp_path, 1)
    _until_background(host, host.session("s"), take_messages(0, 400))
    workers = _workers(host)
    deadline = time.monotonic() + 120  # the job takes its worker off the history actor's thread
    while not workers._starting and time.monotonic() < deadline:
        time.sleep(0.01)
    starting = [worker.process for worker in workers._starting]
    _within(60, host.close)
    assert starting and all(process.returncode is not None for process in starting)


def test_a_worker_that_cannot_start_is_logged_and_the_jobs_run_on_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(summary_process, "_MAIN", "ctxledger_no_such_module")
    with capture_logs() as logs, _host(tmp_path, 1) as host:
        workers = _workers(host)
        _grow(host, list(take_messages(0, 160)))
        assert _count(host, SummaryPrepared) >= 2 and workers.made == 0
        assert not workers.available
    unavailable = [event for event in logs if event["event"] == "summary_process_unavailable"]
    assert unavailable and "did not start" in unavailable[0]["error"]


def test_a_job_nobody_waits_for_waits_for_the_busy_worker_and_a_hurried_one_does_not() -> None:
    workers = SummaryProcesses(1)
    try:
        assert workers.take() is None  # no worker yet: one is started
        _settled(workers)
        taken = workers.take()
        assert taken is not None, "the worker did not start"
        worker = taken.args[0]  # busy now

        got: list[Any] = []
        waiting = threading.Thread(target=lambda: got.append(workers.take(threading.Event())))
        waiting.start()
        waiting.join(0.2)
        assert waiting.is_alive(), "a job nobody waits for did not wait for the busy worker"
        workers._give_back(worker, broken=False)
        waiting.join(60)
        assert got and got[0] is not None and got[0].args[0] is worker

        hurried = threading.Event()
        waiting = threading.Thread(target=lambda: got.append(workers.take(hurried)))
        waiting.start()
        hurried.set()
        waiting.join(60)
        assert not waiting.is_alive() and got[1] is None  # runs on its thread at once
    finally:
        workers.close()
