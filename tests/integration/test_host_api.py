"""The public Host / Session API over a real LMDB log."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxledger import (
    Config,
    ContextOverflowError,
    Host,
    HostClosedError,
    HostOptions,
    InvalidMessageError,
    InvalidSeqError,
    Message,
    SessionExistsError,
    SummaryRequest,
    ToolCall,
)
from ctxledger.events import (
    CheckpointCreated,
    CompactionFailed,
    CompactionStarted,
    ConfigChanged,
    MessagePinned,
    UsageReported,
    ViewServed,
)

SMALL = Config(context_window=2000, compression_threshold=0.5, min_retain_rounds=1)


def _counter() -> Iterator[str]:
    return (f"id{n}" for n in itertools.count(1))


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    ids = _counter()
    with Host.open(tmp_path / "db", config=SMALL, id_factory=lambda: next(ids)) as opened:
        yield opened


def fill_rounds(session, rounds: int, size: int = 400) -> None:  # type: ignore[no-untyped-def]
    """Append ``rounds`` user/assistant/tool rounds of roughly ``size`` chars per message."""
    for n in range(rounds):
        call = ToolCall(f"c{session.id}-{n}", "bash", '{"command": "ls -la src/"}')
        session.append_many(
            [
                Message.user(f"round {n}: please look at src/module_{n}.py " + "u" * size),
                Message.assistant("checking", [call]),
                Message.tool(f"src/module_{n}.py\n" + "x" * size, call.id, "bash"),
                Message.assistant(f"done with round {n} " + "a" * size),
            ]
        )


def events_of(host: Host, session_id: str) -> list[object]:
    return [record.event for record in host.log.read(session_id)]


def test_append_returns_dense_seqs_and_history_is_unaltered(host: Host) -> None:
    """append/append_many return 1, 2, 3 ... and history() returns the messages with seqs."""
    s = host.session("a")
    assert s.append(Message.system("be brief")) == 1
    assert s.append_many([Message.user("hi"), Message.assistant("hello")]) == [2, 3]
    history = s.history()
    assert [m.seq for m in history] == [1, 2, 3]
    assert [m.content for m in history] == ["be brief", "hi", "hello"]
    assert host.sessions() == ["a"]


def test_invalid_message_writes_nothing(host: Host) -> None:
    """A tool result answering no open call raises InvalidMessageError and writes nothing."""
    s = host.session("a")
    s.append(Message.user("hi"))
    before = host.log.last_seq("a")
    with pytest.raises(InvalidMessageError):
        s.append_many([Message.assistant("ok"), Message.tool("result", "nope", "bash")])
    assert host.log.last_seq("a") == before
    assert [m.content for m in s.history()] == ["hi"]


def test_summary_role_cannot_be_appended(host: Host) -> None:
    """The view-only summary role is rejected on append."""
    with pytest.raises(InvalidMessageError):
        host.session("a").append(Message(role="summary", content="x"))


def test_closed_host_raises(tmp_path: Path) -> None:
    """Every call on a closed host raises HostClosedError."""
    host = Host.open(tmp_path / "db")
    s = host.session("a")
    host.close()
    with pytest.raises(HostClosedError):
        s.append(Message.user("late"))
    with pytest.raises(HostClosedError):
        host.session("b")


def test_reopen_recovers_history(tmp_path: Path) -> None:
    """A re-opened host restores a session's history and views from the log."""
    with Host.open(tmp_path / "db", config=SMALL) as host:
        s = host.session("a")
        fill_rounds(s, 3)
        view = s.prepare_step()
        history = s.history()
    with Host.open(tmp_path / "db", config=SMALL) as host:
        s = host.session("a")
        assert s.history() == history
        assert s.build_model_view().view_hash == view.view_hash


def test_build_model_view_records_view_served(host: Host) -> None:
    """build_model_view records a ViewServed event with the view's hash and through_seq."""
    s = host.session("a")
    s.append_many([Message.system("sys"), Message.user("hello")])
    view = s.build_model_view()
    served = [e for e in events_of(host, "a") if isinstance(e, ViewServed)]
    assert served == [
        ViewServed(
            through_seq=2,
            estimated_tokens=view.estimated_tokens,
            view_hash=view.view_hash,
            checkpoint_id=None,
            message_count=len(view.messages),
            view_chars=sum(len(message.content) for message in view.messages),
        )
    ]
    assert view.mode == "full_history"


def test_prepare_step_compacts_over_threshold(host: Host) -> None:
    """prepare_step compacts once the estimate reaches the threshold and records the events."""
    s = host.session("a")
    fill_rounds(s, 6)
    view = s.prepare_step()
    assert view.mode == "compact_checkpoint"
    assert [m.role for m in view.messages].count("summary") == 1
    kinds = [type(e) for e in events_of(host, "a")]
    assert kinds.index(CompactionStarted) < kinds.index(CheckpointCreated) < kinds.index(ViewServed)
    (checkpoint,) = s.checkpoints()
    assert checkpoint.reason == "threshold_exceeded"
    assert view.checkpoint_id == checkpoint.id


def test_compact_if_needed_below_threshold(host: Host) -> None:
    """Below the threshold nothing is compacted and nothing is written."""
    s = host.session("a")
    s.append_many([Message.user("hi"), Message.assistant("hello"), Message.user("bye")])
    before = host.log.last_seq("a")
    result = s.compact_if_needed()
    assert (result.compacted, result.reason) == (False, "below_threshold")
    assert host.log.last_seq("a") == before


def test_manual_compact_passes_focus(tmp_path: Path) -> None:
    """compact(focus=...) hands the focus to the summariser and records it on the checkpoint."""
    seen: list[SummaryRequest] = []

    def summarizer(request: SummaryRequest) -> str:
        seen.append(request)
        return "summary keeping the API signatures"

    config = Config(context_window=100_000, min_retain_rounds=1)
    with Host.open(tmp_path / "db", config=config, summarizer=summarizer) as host:
        s = host.session("a")
        fill_rounds(s, 3, size=50)
        result = s.compact(focus="the API signatures")
        assert result.compacted and result.reason == "compacted"
        assert seen[-1].focus == "the API signatures"
        assert s.checkpoints()[-1].focus == "the API signatures"
        assert s.checkpoints()[-1].reason == "manual"


@pytest.mark.parametrize(
    "behaviour", ["raises", "empty", "none"], ids=["raises", "returns-empty", "returns-none"]
)
def test_failing_summarizer_keeps_previous_view(tmp_path: Path, behaviour: str) -> None:
    """A summariser that raises or returns nothing: summary_unavailable and CompactionFailed;
    the view stays the full history while it fits the window, and once it does not, no view is
    served (ContextOverflowError: the provider would refuse it)."""

    def summarizer(request: SummaryRequest) -> str | None:
        if behaviour == "raises":
            raise RuntimeError("model offline")
        return "" if behaviour == "empty" else None

    with Host.open(tmp_path / "db", config=SMALL, summarizer=summarizer) as host:
        s = host.session("a")
        fill_rounds(s, 3)  # over the threshold, within the window
        result = s.compact_if_needed()
        assert (result.compacted, result.reason) == (False, "summary_unavailable")
        assert s.checkpoints() == []
        assert any(isinstance(e, CompactionFailed) for e in events_of(host, "a"))
        assert s.build_model_view().mode == "full_history"
        s.append(Message.user("and now " + "m" * 3000))  # over the window now
        with pytest.raises(ContextOverflowError, match="does not fit the window"):
            s.prepare_step()
        assert s.checkpoints() == []


def test_slow_summarizer_times_out_promptly(tmp_path: Path) -> None:
    """A summariser past summary_timeout gives summary_unavailable without holding the step."""
    release = threading.Event()

    def summarizer(request: SummaryRequest) -> str:
        release.wait(10)
        return "late answer"

    config = SMALL.replace(summary_timeout=0.2)
    with Host.open(tmp_path / "db", config=config, summarizer=summarizer) as host:
        s = host.session("a")
        fill_rounds(s, 6)
        result = s.compact_if_needed()
        assert result.reason == "summary_unavailable"
        release.set()
        s.append(Message.user("still responsive"))
        assert s.checkpoints() == []  # the late answer was discarded
        failed = [e for e in events_of(host, "a") if isinstance(e, CompactionFailed)]
        assert "timed out" in failed[0].detail


def test_close_returns_with_summarizer_in_flight(tmp_path: Path) -> None:
    """Closing the host does not wait for a summariser call that is still running."""
    started = threading.Event()

    def summarizer(request: SummaryRequest) -> str:
        started.set()
        time.sleep(30)
        return "never used"

    host = Host.open(
        tmp_path / "db", config=SMALL.replace(summary_timeout=60), summarizer=summarizer
    )
    s = host.session("a")
    fill_rounds(s, 6)
    worker = threading.Thread(target=lambda: _swallow(s.compact_if_needed), daemon=True)
    worker.start()
    assert started.wait(10)
    closer = threading.Thread(target=host.close)
    closer.start()
    closer.join(timeout=8)
    assert not closer.is_alive()


def _swallow(call) -> None:  # type: ignore[no-untyped-def]
    with contextlib.suppress(HostClosedError):
        call()


def test_reactive_compaction_escalates_then_overflows(host: Host) -> None:
    """reactive_compact compacts harder each time and raises ContextOverflowError at the end."""
    s = host.session("a")
    fill_rounds(s, 4)
    error = {"error": {"code": "context_length_exceeded", "message": "maximum context length"}}
    outcomes = []
    with pytest.raises(ContextOverflowError):
        for _ in range(10):
            outcomes.append(s.reactive_compact(error))
    assert 1 <= len(outcomes) <= SMALL.max_reactive_retries
    assert all(result.compacted for result in outcomes)
    assert all(c.reason == "prompt_too_long" for c in s.checkpoints())


def test_record_usage_is_recorded(host: Host) -> None:
    """record_usage persists the measured usage against the newest message."""
    s = host.session("a")
    s.append(Message.user("hi"))
    s.record_usage(1234, 56)
    assert UsageReported(prompt_tokens=1234, completion_tokens=56, through_seq=1) in events_of(
        host, "a"
    )
    with pytest.raises(ValueError):
        s.record_usage(-1)


def test_pin_records_event_and_rejects_unknown_seq(host: Host) -> None:
    """pin(seq) records MessagePinned; an unknown seq raises InvalidSeqError."""
    s = host.session("a")
    s.append_many([Message.user("keep me"), Message.assistant("ok")])
    s.pin(1)
    assert MessagePinned(seq=1) in events_of(host, "a")
    with pytest.raises(InvalidSeqError):
        s.pin(99)


def test_pinned_message_survives_compaction(host: Host) -> None:
    """A pinned message stays verbatim in views after the rounds around it are summarised."""
    s = host.session("a")
    s.append(Message.user("PINNED: the deploy key lives in vault/ci"))
    s.append(Message.assistant("noted"))
    s.pin(1)
    fill_rounds(s, 6)
    view = s.prepare_step()
    assert view.mode == "compact_checkpoint"
    assert any(m.content == "PINNED: the deploy key lives in vault/ci" for m in view.messages)


def test_config_change_is_recorded(host: Host) -> None:
    """Passing a different Config to session() records ConfigChanged and applies it."""
    host.session("a")
    bigger = SMALL.replace(context_window=50_000)
    s = host.session("a", config=bigger)
    assert s.config == bigger
    assert ConfigChanged(config=bigger) in events_of(host, "a")
    host.session("a", config=bigger)
    assert sum(isinstance(e, ConfigChanged) for e in events_of(host, "a")) == 1


def test_fork_shares_prefix_and_is_isolated(host: Host) -> None:
    """A fork sees the parent's history up to at_seq; later parent appends do not reach it."""
    parent = host.session("p")
    parent.append_many([Message.user("one"), Message.assistant("two"), Message.user("three")])
    child = parent.fork("c", at_seq=2)
    assert [m.content for m in child.history()] == ["one", "two"]
    parent.append(Message.assistant("four"))
    assert child.append(Message.user("fork three")) == 3
    assert [m.content for m in child.history()] == ["one", "two", "fork three"]
    assert [m.content for m in parent.history()][-1] == "four"
    with pytest.raises(SessionExistsError):
        parent.fork("c")
    with pytest.raises(InvalidSeqError):
        parent.fork("d", at_seq=42)


def test_fork_survives_reopen(tmp_path: Path) -> None:
    """A fork of a fork is rebuilt from its ancestors' prefixes after a restart."""
    with Host.open(tmp_path / "db") as host:
        root = host.session("root")
        root.append_many([Message.user("a"), Message.assistant("b"), Message.user("c")])
        child = root.fork("child")
        child.append(Message.assistant("d"))
        grandchild = child.fork("grandchild", at_seq=2)
        grandchild.append(Message.user("e"))
    with Host.open(tmp_path / "db") as host:
        assert [m.content for m in host.session("child").history()] == ["a", "b", "c", "d"]
        assert [m.content for m in host.session("grandchild").history()] == ["a", "b", "e"]


def test_unanswered_tool_call_gets_synthetic_result_on_reopen(tmp_path: Path) -> None:
    """Recovery answers an open tool call with an interrupted result, recorded as an event."""
    call = ToolCall("call-1", "bash", '{"command": "make"}')
    with Host.open(tmp_path / "db") as host:
        host.session("a").append_many([Message.user("build it"), Message.assistant("", [call])])
    with Host.open(tmp_path / "db") as host:
        s = host.session("a")
        last = s.history()[-1]
        assert (last.role, last.tool_call_id, last.seq) == ("tool", "call-1", 3)
        assert "interrupted" in last.content
        view = s.build_model_view()
        assert view.messages[-1].tool_call_id == "call-1"
        kinds = [type(e).__name__ for e in events_of(host, "a")]
        assert "ToolResultSynthesized" in kinds


def test_passivation_bounds_active_sessions(tmp_path: Path) -> None:
    """Beyond max_active_sessions idle sessions are passivated and re-activated by replay."""
    with Host.open(tmp_path / "db", options=HostOptions(max_active_sessions=3)) as host:
        for n in range(8):
            host.session(f"s{n}").append(Message.user(f"hello {n}"))
            assert len(host.active_sessions()) <= 3
        threads_with_8 = threading.active_count()
        assert [m.content for m in host.session("s0").history()] == ["hello 0"]
        assert len(host.active_sessions()) <= 3
        assert threading.active_count() <= threads_with_8 + 1


def test_logs_are_bound_to_the_session(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Compaction and recovery log events carry the session id (through stdlib logging)."""
    caplog.set_level(logging.DEBUG, logger="ctxledger")
    with Host.open(tmp_path / "db", config=SMALL) as host:
        s = host.session("a")
        fill_rounds(s, 6)
        s.prepare_step()
    with Host.open(tmp_path / "db") as host:
        host.session("a").history()
    names = {
        record.getMessage()
        for record in caplog.records
        if record.name.startswith("ctxledger.") and getattr(record, "session_id", None) == "a"
    }
    assert {"compaction_started", "compaction_finished", "view_served", "recovery"} <= names


def test_async_twins_do_not_block_the_loop(tmp_path: Path) -> None:
    """aappend / aprepare_step / acompact / areactive_compact run inside a live event loop."""

    async def main() -> list[int]:
        ticks: list[int] = []

        async def ticker() -> None:
            for n in range(1000):
                ticks.append(n)
                await asyncio.sleep(0.001)

        task = asyncio.create_task(ticker())
        with Host.open(tmp_path / "db", config=SMALL) as host:
            s = host.session("a")
            for n in range(6):
                await s.aappend(Message.user(f"question {n} " + "q" * 400))
                await s.aappend(Message.assistant(f"answer {n} " + "a" * 400))
                await s.aprepare_step()
            manual = await s.acompact(focus="answers")
            for n in range(3):
                await s.aappend_many(
                    [Message.user(f"more {n} " + "m" * 400), Message.assistant("ok " + "k" * 400)]
                )
            reactive = await s.areactive_compact("prompt is too long")
        task.cancel()
        assert manual.reason in {
            "compacted",
            "no_progress",
            "checkpoint_current",
            "rounds_not_enough",
        }
        assert reactive.compacted
        return ticks

    ticks = asyncio.run(main())
    assert len(ticks) > 5


def test_slow_summarizer_of_one_session_does_not_block_another(tmp_path: Path) -> None:
    """While one session's summariser hangs, another session appends and serves views."""
    entered, release = threading.Event(), threading.Event()

    def summarizer(request: SummaryRequest) -> str:
        if any("SLOW" in m.content for m in request.messages):
            entered.set()
            release.wait(20)
        return "summary"

    config = SMALL.replace(summary_timeout=30)
    with Host.open(tmp_path / "db", config=config, summarizer=summarizer) as host:
        slow, fast = host.session("slow"), host.session("fast")
        slow.append(Message.user("SLOW task"))
        fill_rounds(slow, 6)
        worker = threading.Thread(target=slow.compact_if_needed)
        worker.start()
        assert entered.wait(10)
        fill_rounds(fast, 6)
        view = fast.prepare_step()
        assert view.mode == "compact_checkpoint"
        assert worker.is_alive()  # the slow session is still waiting for its summariser
        release.set()
        worker.join(10)
        assert slow.checkpoints()
