"""Runtime v2 (issue 13): bounded threads, activation off the history actors, quiet by default,
native async twins, and a hung summariser that others do not wait for.

Real LMDB logs and real threads throughout. No timed assertions: where a test must not hang, a
generous join timeout turns a deadlock into a failure instead of a stuck run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import subprocess
import sys
import textwrap
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ctxledger import Config, Host, HostOptions, Message, SummaryRequest, ToolCall
from ctxledger.events import CheckpointCreated, CompactionFailed, CompactionStarted, Event
from ctxledger.storage.lmdb import LmdbEventLog

SMALL = Config(context_window=2000, compression_threshold=0.5, min_retain_rounds=1)
#: Long enough never to fire in a test, short enough that a stuck run still ends.
HANG_GUARD = 120.0


def _step(session_id: str, n: int, size: int = 60) -> list[Message]:
    """One agent step: the user's turn, a tool call and its result, the assistant's answer."""
    call = ToolCall(f"c-{session_id}-{n}", "bash", '{"command": "ls"}')
    return [
        Message.user(f"step {n} of {session_id}: " + "u" * size),
        Message.assistant("checking", [call]),
        Message.tool("src/\n" + "x" * size, call.id, "bash"),
        Message.assistant(f"done {n} " + "a" * size),
    ]


def _new_threads(before: set[threading.Thread]) -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread not in before}


def _in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``call`` on a daemon thread; the list gets its result or its exception."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(call())
        except BaseException as exc:  # reported by the test that joins
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


# --- threads do not depend on the number of sessions ---------------------------------------------


def test_thread_count_does_not_depend_on_the_number_of_sessions(tmp_path: Path) -> None:
    """10 or 1,000 open sessions, used one by one or all at once: the same threads, at most 32."""
    before = set(threading.enumerate())
    with Host.open(tmp_path / "db", config=SMALL, options=HostOptions(durability="none")) as host:

        def use(first: int, last: int) -> None:
            for n in range(first, last):
                session = host.session(f"s{n}")
                session.append_many(_step(session.id, 0))
                session.prepare_step()

        use(0, 10)
        with_10 = _new_threads(before)
        use(10, 1000)
        with_1000 = _new_threads(before)
        assert len(host.active_sessions()) == 1000  # all of them open at once

        async def all_at_once() -> None:
            sessions = [await host.asession(f"s{n}") for n in range(1000)]

            async def step(n: int) -> None:
                await sessions[n].aappend_many(_step(sessions[n].id, 1))
                await sessions[n].aprepare_step()

            await asyncio.gather(*(step(n) for n in range(1000)))

        asyncio.run(all_at_once())
        concurrent_1000 = _new_threads(before)
        assert len(host.active_sessions()) == 1000
        assert [len(host.session(f"s{n}").history()) for n in (0, 500, 999)] == [8, 8, 8]

    host_threads = {thread.name for thread in with_1000}
    assert len(with_1000) <= 32, sorted(host_threads)
    assert len(concurrent_1000) <= 32, sorted(thread.name for thread in concurrent_1000)
    # Not one thread more for 990 more sessions, nor for 1,000 of them in flight at once.
    assert len(with_1000) == len(with_10), (sorted(t.name for t in with_10), sorted(host_threads))
    assert len(concurrent_1000) == len(with_10)


# --- a long activation does not stall the sessions sharing its history actor ---------------------


class GatedLog(LmdbEventLog):
    """A real LMDB log whose fold of one session stops half-way until ``gate`` is set.

    It makes "the activation is still in progress" observable without a clock: while the
    projection actor folding ``slow`` waits here, everything else must go on.
    """

    slow_id = ""
    entered: threading.Event
    gate: threading.Event

    def iter_bodies(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None
    ) -> Iterator[tuple[int, Event]]:
        for n, item in enumerate(super().iter_bodies(session_id, from_seq, to_seq)):
            if session_id == self.slow_id and n == 5_000:
                self.entered.set()
                self.gate.wait(HANG_GUARD)
            yield item


def _same_shard(session_id: str, shards: int, prefix: str) -> str:
    shard = zlib.crc32(session_id.encode()) % shards
    return next(
        f"{prefix}{n}" for n in range(1000) if zlib.crc32(f"{prefix}{n}".encode()) % shards == shard
    )


def test_long_activation_does_not_block_appends_of_its_actors_other_sessions(
    tmp_path: Path,
) -> None:
    """While a 20,000-event session is folded (no snapshot), a session of the same history actor
    appends, serves views and reports usage; the long one then opens with all its events."""
    path = tmp_path / "db"
    events = 20_000
    with Host.open(
        path,
        config=SMALL.replace(snapshot_interval=10**9),
        options=HostOptions(durability="none"),
    ) as host:
        slow = host.session("slow")
        for n in range(events // 4 // 100):
            slow.append_many([m for k in range(100) for m in _step("slow", n * 100 + k, 4)])
        assert host.log.snapshot_seqs("slow") == []
        written = host.log.last_seq("slow")
    assert written > events

    log = GatedLog.open(path, durability="none")
    log.slow_id, log.entered, log.gate = "slow", threading.Event(), threading.Event()
    with Host(log, config=SMALL) as host:
        peer_id = _same_shard("slow", len(host._history), "peer")
        assert host._owner(peer_id) is host._owner("slow")  # one history actor serves both
        peer = host.session(peer_id)
        peer.append(Message.user("before"))

        loading, loaded = _in_thread(lambda: len(host.session("slow").history()))
        try:
            assert log.entered.wait(HANG_GUARD), "the long session was never folded"

            def peer_work() -> int:
                for n in range(50):
                    peer.append_many(_step(peer_id, n))
                    view = peer.prepare_step()
                    peer.record_usage(view.estimated_tokens, 10)
                return len(peer.history())

            working, worked = _in_thread(peer_work)
            working.join(HANG_GUARD)
            assert not working.is_alive(), "the peer's appends waited for the long activation"
            assert not log.gate.is_set() and loading.is_alive()  # the fold was still under way
            assert worked == [1 + 50 * 4]
        finally:
            log.gate.set()
        loading.join(HANG_GUARD)
        assert loaded == [events]
        assert host.session("slow").append(Message.user("after")) == events + 1


# --- quiet by default ----------------------------------------------------------------------------

AGENT_LOOP = textwrap.dedent(
    """
    import asyncio, json, sys, tempfile
    import ctxledger
    from ctxledger import Config, Host, Message, ToolCall
    from ctxledger.events import CompactionFailed, CheckpointCreated

    config = Config(context_window=2000, compression_threshold=0.5, min_retain_rounds=1)

    def broken(request):
        raise RuntimeError("the summariser is down")

    def loop(session, steps, start=0):
        for n in range(start, start + steps):
            call = ToolCall(f"c{n}", "bash", '{"command": "ls"}')
            session.append_many([
                Message.user(f"step {n} " + "u" * 300),
                Message.assistant("checking", [call]),
                Message.tool("x" * 300, call.id, "bash"),
            ])
            view = session.prepare_step()
            session.append(Message.assistant(f"done {n} " + "a" * 200))
            session.record_usage(view.estimated_tokens, 50)

    async def aloop(session, steps):
        for n in range(steps):
            await session.aappend(Message.user(f"async {n} " + "q" * 300))
            view = await session.aprepare_step()
            await session.aappend_many([Message.assistant("a " + "b" * 300)])
            await session.arecord_usage(view.estimated_tokens, 20)

    with tempfile.TemporaryDirectory() as tmp:
        with Host.open(tmp + "/db", config=config) as host:
            agent = host.session("agent")
            loop(agent, 12)
            agent.compact(focus="the files")
            agent.reactive_compact("prompt is too long")
            asyncio.run(aloop(host.session("async"), 8))
        with Host.open(tmp + "/db", config=config, summarizer=broken) as host:
            agent = host.session("agent")  # recovery
            loop(agent, 4, start=12)  # failing summaries while the view still fits the window
            events = [record.event for record in host.log.read("agent")]
        result = {
            "summaries": sum(isinstance(e, CheckpointCreated) for e in events),
            "failed": sum(isinstance(e, CompactionFailed) for e in events),
        }
        with open(sys.argv[1], "w") as out:
            json.dump(result, out)
    """
)


def test_import_and_a_full_agent_loop_print_nothing(tmp_path: Path) -> None:
    """Default logging: compactions, failures, recovery and async steps write nothing at all."""
    result_file = tmp_path / "result.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONWARN", "CTXLEDGER"))}
    done = subprocess.run(
        [sys.executable, "-c", AGENT_LOOP, str(result_file)],
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_GUARD,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr == ""
    counts = json.loads(result_file.read_text())
    assert counts["summaries"] >= 1  # the loop did compact (info lines were due)
    assert counts["failed"] >= 1  # and failed to (warnings were due)


# --- native async twins --------------------------------------------------------------------------


class _RecordingExecutor(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor (what ``asyncio.to_thread`` uses), counting what it is given."""

    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.submitted: list[Any] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        self.submitted.append(fn)
        return super().submit(fn, *args, **kwargs)


def test_async_twins_use_no_worker_thread(tmp_path: Path) -> None:
    """2,000 concurrent aappend / aappend_many / aprepare_step / arecord_usage calls start no
    thread and never touch the loop's default executor (``asyncio.to_thread``)."""
    started: list[str] = []

    def on_thread_start(*_args: Any) -> None:  # called first thing in every new Python thread
        started.append(threading.current_thread().name)
        sys.setprofile(None)

    async def main(host: Host) -> int:
        executor = _RecordingExecutor()
        asyncio.get_running_loop().set_default_executor(executor)
        sessions = [await host.asession(f"a{n}") for n in range(100)]
        await sessions[0].aappend(Message.user("warm-up"))  # the log's lazy parts start now
        calls = 0
        threading.setprofile(on_thread_start)
        try:

            async def agent(n: int) -> int:
                session = sessions[n]
                for k in range(5):
                    await session.aappend(Message.user(f"question {k} " + "q" * 400))
                    await session.aappend_many(
                        [Message.assistant(f"answer {k} " + "a" * 400), Message.user("thanks")]
                    )
                    view = await session.aprepare_step()
                    await session.arecord_usage(view.estimated_tokens, 10)
                return 5 * 4

            calls = sum(await asyncio.gather(*(agent(n) for n in range(100))))
        finally:
            threading.setprofile(None)  # type: ignore[arg-type]
        assert executor.submitted == []
        executor.shutdown()
        return calls

    with Host.open(tmp_path / "db", config=SMALL, options=HostOptions(durability="none")) as host:
        calls = asyncio.run(main(host))
        assert len(host.session("a7").history()) == 15
        kinds = {type(record.event) for record in host.log.read("a7")}
    assert CompactionStarted in kinds  # aprepare_step did compact on the way
    assert calls == 2000
    assert started == []


# --- a hung summariser ---------------------------------------------------------------------------


def test_hung_summarizer_times_out_while_other_sessions_go_on(tmp_path: Path) -> None:
    """One compaction worker, and the summariser never returns for one session: other sessions
    keep appending and serving views meanwhile; the stuck call hits summary_timeout, and the
    worker is replaced so that the others' compactions then succeed."""
    entered, never = threading.Event(), threading.Event()

    def summarizer(request: SummaryRequest) -> str:
        if any("HANG" in message.content for message in request.messages):
            entered.set()
            never.wait()  # never returns on its own (released at the end, to end the thread)
        return "summary of the earlier work"

    config = SMALL.replace(summary_timeout=1.0)
    try:
        with Host.open(
            tmp_path / "db",
            config=config,
            summarizer=summarizer,
            options=HostOptions(compaction_workers=1),
        ) as host:
            hung = host.session("hung")
            hung.append(Message.user("HANG here"))
            for n in range(8):
                hung.append_many(_step("hung", n, 300))
            stuck, outcome = _in_thread(hung.compact_if_needed)
            assert entered.wait(HANG_GUARD)

            others = [host.session(f"other{n}") for n in range(3)]
            for n in range(3):
                for session in others:  # small steps: views without compaction
                    session.append_many(_step(session.id, n))
                    assert session.build_model_view().mode == "full_history"
            assert not never.is_set()  # all of that while the summariser was stuck

            stuck.join(HANG_GUARD)
            assert not stuck.is_alive()
            assert [result.reason for result in outcome] == ["summary_unavailable"]
            failed = [
                e for e in (r.event for r in host.log.read("hung")) if type(e) is CompactionFailed
            ]
            assert "timed out" in failed[0].detail

            for session in others:  # the pool's one worker was replaced: compactions work
                for n in range(3, 10):
                    session.append_many(_step(session.id, n, 300))
                assert session.prepare_step().mode == "compact_checkpoint"
                created = [r.event for r in host.log.read(session.id)]
                assert any(type(e) is CheckpointCreated for e in created)
            hung.append(Message.user("still here"))
    finally:
        never.set()


# --- eviction ------------------------------------------------------------------------------------


def test_no_session_is_evicted_while_the_host_holds_at_most_max_active_sessions(
    tmp_path: Path,
) -> None:
    """64 sessions in a host keeping 64: all stay in memory, however their ids hash."""
    ids = [f"s{n}" for n in range(200)]
    lopsided = [i for i in ids if zlib.crc32(i.encode()) % 2 == 0][:40]
    lopsided += [i for i in ids if zlib.crc32(i.encode()) % 2 == 1][:24]
    with Host.open(
        tmp_path / "db",
        options=HostOptions(durability="none", max_active_sessions=64),
    ) as host:
        assert {host._owner(i) for i in lopsided[:40]} == {host._owner(lopsided[0])}
        for session_id in lopsided:
            host.session(session_id).append(Message.user("hello"))
        for session_id in lopsided:  # a second round: any eviction shows as a missing state
            host.session(session_id).append(Message.user("again"))
        assert sorted(host.active_sessions()) == sorted(lopsided)
