"""``prepare_step(defer_record=True)``: the view is answered at once and its ``ViewServed`` is
committed with the session's next batch (issue 28: the OpenAI Agents SDK's turn in three
commits instead of four).

The log ends up with the same events in the same order as without it; what changes is only
which commit carries the view's record, and until that commit the record is not durable.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ctxledger import Config, Host, HostOptions, Message
from ctxledger.errors import InvalidArgumentError
from ctxledger.events import CheckpointCreated, MessageAppended, ViewServed
from ctxledger.storage import LmdbEventLog, RecordedEvent
from ctxledger.testing.processes import child_process, kill

Batches = list[list[str]]


def _names(records: list[RecordedEvent]) -> list[str]:
    return [type(record.event).__name__ for record in records]


@contextmanager
def _observed(host: Host) -> Iterator[Batches]:
    """Each durable batch of ``host``, as the names of its events, in commit order."""
    batches: Batches = []
    host._observe_commits(lambda _session_id, records: batches.append(_names(records)))
    yield batches
    host._observe_commits(None)


def _assert_last_is(records: list[RecordedEvent], view: Any) -> None:
    """The newest of ``records`` records serving ``view``."""
    last = records[-1].event
    assert isinstance(last, ViewServed) and last.view_hash == view.view_hash


def _turns(session: Any, defer: bool, turns: int = 3) -> None:
    for turn in range(turns):
        session.prepare_step(defer_record=defer)
        session.append(Message.user(f"question {turn}"))
        session.append(Message.assistant(f"answer {turn}"))


def test_the_view_is_recorded_with_the_next_append(tmp_path: Path) -> None:
    """The held view goes first in the next append's batch: one commit fewer per turn, and the
    log holds what it holds without deferring (the same events, order and view hashes)."""
    with Host.open(tmp_path / "db") as host, _observed(host) as batches:
        deferred, plain = host.session("deferred"), host.session("plain")
        deferred.append(Message.user("hello"))
        view = deferred.prepare_step(defer_record=True)
        assert _names(host.log.read("deferred"))[-1] == "MessageAppended"  # not yet recorded
        before = len(batches)
        deferred.append(Message.user("next"))
        assert batches[before:] == [["ViewServed", "MessageAppended"]]
        recorded = [r.event for r in host.log.read("deferred")]
        assert isinstance(recorded[-2], ViewServed) and recorded[-2].view_hash == view.view_hash
        assert isinstance(recorded[-1], MessageAppended)

        plain.append(Message.user("hello"))
        plain.prepare_step()
        plain.append(Message.user("next"))
        for session in (deferred, plain):
            _turns(session, defer=session is deferred)
        logs = [[r.event for r in host.log.read(name)] for name in ("deferred", "plain")]
        assert [type(e) for e in logs[0]] == [type(e) for e in logs[1]]
        hashes = [[e.view_hash for e in log if isinstance(e, ViewServed)] for log in logs]
        assert hashes[0] == hashes[1] and len(hashes[0]) == 4


def test_a_view_that_compacts_is_recorded_at_once(tmp_path: Path) -> None:
    """A serve that compacts records its events before it answers, deferred or not."""
    config = Config(context_window=2_000, min_retain_rounds=1, prepare_threshold=0.0)
    with Host.open(tmp_path / "db", config=config) as host, _observed(host) as batches:
        session = host.session("s")
        for turn in range(12):
            session.append(Message.user(f"question {turn} " + "x" * 400))
            session.append(Message.assistant(f"answer {turn} " + "y" * 400))
        view = session.prepare_step(defer_record=True)
        assert view.checkpoint_id is not None
        events = [r.event for r in host.log.read("s")]
        assert any(isinstance(e, CheckpointCreated) for e in events)
        assert isinstance(events[-1], ViewServed) and events[-1].view_hash == view.view_hash
        assert batches[-1][-1] == "ViewServed"


@pytest.mark.parametrize(
    "read",
    [
        lambda s: s.history(),
        lambda s: s.current_messages(),
        lambda s: s.view_at(1),
        lambda s: s.wait_background(),
    ],
    ids=["history", "current_messages", "view_at", "wait_background"],
)
def test_a_command_that_writes_nothing_records_the_view_first(
    tmp_path: Path, read: Callable[[Any], Any]
) -> None:
    """A read of the session commits the held view alone before it answers."""
    with Host.open(tmp_path / "db") as host, _observed(host) as batches:
        session = host.session("s")
        session.append(Message.user("hello"))
        view = session.prepare_step(defer_record=True)
        before = len(batches)
        read(session)
        assert batches[before:] == [["ViewServed"]]
        _assert_last_is(host.log.read("s"), view)


def test_close_records_the_held_view(tmp_path: Path) -> None:
    """A host closed right after a deferred serve commits the view before the log closes."""
    with Host.open(tmp_path / "db") as host:
        session = host.session("s")
        session.append(Message.user("hello"))
        view = session.prepare_step(defer_record=True)
    with LmdbEventLog.open(tmp_path / "db") as log:
        _assert_last_is(log.read("s"), view)


def test_an_evicted_session_records_its_view(tmp_path: Path) -> None:
    """A session holding a view is not evicted before the view is committed."""
    options = HostOptions(max_active_sessions=1)
    with Host.open(tmp_path / "db", options=options) as host:
        first = host.session("first")
        first.append(Message.user("hello"))
        view = first.prepare_step(defer_record=True)
        other = host.session("other")
        other.append(Message.user("hi"))  # over the limit: "first" must go, view recorded
        deadline = time.monotonic() + 60
        while "first" in host.active_sessions():
            assert time.monotonic() < deadline, "the session holding a view was never evicted"
            time.sleep(0.01)
        _assert_last_is(host.log.read("first"), view)


def test_a_bad_flag_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    with Host.open(tmp_path / "db") as host:
        session = host.session("s")
        session.append(Message.user("hello"))
        count = len(host.log.read("s"))
        with pytest.raises(InvalidArgumentError, match="defer_record"):
            session.prepare_step(defer_record="yes")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="defer_record"):
            asyncio.run(session.aprepare_step(defer_record=1))  # type: ignore[arg-type]
        assert len(host.log.read("s")) == count
        assert session.prepare_step().through_seq == 1  # the session serves on


def test_the_async_twin_defers_too(tmp_path: Path) -> None:
    with Host.open(tmp_path / "db") as host, _observed(host) as batches:
        session = host.session("s")
        session.append(Message.user("hello"))

        async def turn() -> None:
            await session.aprepare_step(defer_record=True)
            await session.aappend(Message.user("next"))

        before = len(batches)
        asyncio.run(turn())
        assert batches[before:] == [["ViewServed", "MessageAppended"]]


_CHILD = """
import sys
from ctxledger import Host, Message
host = Host.open(sys.argv[1])
session = host.session("s")
session.append(Message.user("hello"))
view = session.prepare_step(defer_record=True)
print(view.view_hash, flush=True)
sys.stdin.read()
"""


def test_a_killed_process_loses_only_the_held_record(tmp_path: Path) -> None:
    """SIGKILL between the deferred serve and the next append: the log has the append, not the
    view's record (it was never durable); the session recovers and serves that same view."""
    path = tmp_path / "db"
    with child_process(
        [sys.executable, "-c", _CHILD, str(path)], stdin=subprocess.PIPE, stderr=None
    ) as child:
        assert child.stdout is not None
        served = child.stdout.readline().strip()
        kill(child)
    assert child.returncode == -signal.SIGKILL
    assert len(served) == 64
    with Host.open(path) as host:
        assert _names(host.log.read("s")) == ["SessionOpened", "MessageAppended"]
        assert host.session("s").prepare_step().view_hash == served


def test_an_agents_sdk_turn_without_run_config_is_three_commits(tmp_path: Path) -> None:
    """Without run_config() the SDK calls the model after storing the run's input, so the view
    ``get_items()`` served is committed with that input: a turn of one tool call is three
    commits (the input, the call with its output, the answer), and every view is recorded."""
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from ctxledger.integrations.openai_agents import LedgerSession

    set_tracing_disabled(True)

    @function_tool
    def build_status(service: str) -> str:
        """Return the build status of a service."""
        return f"{service}: step 12 failed"

    script = []
    for turn in range(3):
        call = function_call("build_status", {"service": "api"}, call_id=f"c{turn}")
        script += [ModelStep(output=[call]), ModelStep(output=[assistant_message(f"done {turn}")])]
    agent = Agent(name="ops", model=ScriptedModel(script), tools=[build_status])
    with Host.open(tmp_path / "db") as host, _observed(host) as batches:
        session = LedgerSession(host.session("sdk"))
        per_run = []
        for turn in range(3):
            before = len(batches)
            asyncio.run(Runner.run(agent, f"task {turn}", session=session))
            per_run.append(batches[before:])
        assert per_run[1] == [
            ["ViewServed", "MessageAppended"],
            ["MessageAppended", "MessageAppended"],
            ["MessageAppended"],
        ]
        assert per_run[2] == per_run[1]
        served = [r.event for r in host.log.read("sdk") if isinstance(r.event, ViewServed)]
        assert len(served) == 3  # one view a run, each recorded
