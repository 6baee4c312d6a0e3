"""``Session.step``: an agent's step in one commit (issue 28).

``step(messages, pending)`` records what ``append_many(messages)`` then ``prepare_step(pending)``
record, and answers the same view, but writes the appends and the served view as one batch when
no compaction is due. These tests run a real host on a real LMDB log and count the batches the
host hands to it (each is one commit, one fsync, when a step runs alone).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ctxledger import (
    BudgetExceededError,
    Config,
    Host,
    InternalError,
    InvalidMessageError,
    Message,
    SummaryRequest,
    ToolCall,
    VersionConflictError,
)
from ctxledger.domain import CharTokenizer
from ctxledger.events import (
    CheckpointCreated,
    CompactionStarted,
    Event,
    MessageAppended,
    SessionOpened,
    UsageReported,
    ViewServed,
)
from ctxledger.testing import digest_summarizer

TIGHT = Config(context_window=2_000, min_retain_rounds=1, prepare_threshold=0.0)
ROOMY = Config(context_window=128_000, prepare_threshold=0.0)


def _counter() -> Callable[[], str]:
    ids = itertools.count(1)
    return lambda: f"c{next(ids)}"


@contextmanager
def _host(path: Path, config: Config = TIGHT, **options: Any) -> Iterator[Host]:
    options.setdefault("summarizer", digest_summarizer)
    options.update(config=config, clock=lambda: 1.0e9, id_factory=_counter())
    with Host.open(path, **options) as host:
        yield host


def _count_batches(host: Host) -> list[int]:
    """Count the batches ``host`` hands to its log (wraps this log instance's ``submit``)."""
    counter = [0]
    submit = host.log.submit

    def counted(*args: Any, **kwargs: Any) -> Any:
        counter[0] += 1
        return submit(*args, **kwargs)

    host.log.submit = counted  # type: ignore[method-assign]
    return counter


def _events(host: Host, session_id: str) -> list[Event]:
    """The session's events, without the fields that are wall times (creation, summary time)."""
    events: list[Event] = []
    for record in host.log.read(session_id):
        event = record.event
        if isinstance(event, SessionOpened):
            event = msgspec.structs.replace(event, session_id="", created_at=0.0)
        elif isinstance(event, CheckpointCreated):
            checkpoint = msgspec.structs.replace(event.checkpoint, summary_seconds=0.0)
            event = msgspec.structs.replace(event, checkpoint=checkpoint)
        events.append(event)
    return events


def _agent_step(index: int) -> list[Message]:
    """A user request, a tool call and its output, and the answer."""
    call = ToolCall(f"t{index}", "bash", '{"command": "make test"}')
    return [
        Message.user(f"request {index}: " + "please " * 25),
        Message.assistant("running the tests", [call]),
        Message.tool(f"output {index} " + "ok " * 90, call.id, "bash"),
        Message.assistant(f"done {index}"),
    ]


def test_a_step_without_compaction_is_one_commit(tmp_path: Path) -> None:
    """Each step is one batch: its appends, then the view served; the view names their seqs."""
    with _host(tmp_path / "db", ROOMY) as host:
        session = host.session("s")
        batches = _count_batches(host)
        for index in range(10):
            view = session.step(_agent_step(index), pending="p" * 10)
            first = 4 * index + 1
            assert view.appended_seqs == (first, first + 1, first + 2, first + 3)
            assert view.through_seq == first + 3
            assert view.view_hash == session.view_at(first + 3).view_hash
        assert batches[0] == 10
        kinds = [type(event) for event in _events(host, "s")[1:]]
        assert kinds == ([MessageAppended] * 4 + [ViewServed]) * 10


class _Watching:
    """:func:`digest_summarizer` that notes the newest message in ``log`` when it is called."""

    def __init__(self) -> None:
        self.host: Host | None = None
        self.newest: list[int] = []

    def __call__(self, request: SummaryRequest) -> str:
        if self.host is not None:
            appended = [r.event for r in self.host.log.read("s")]
            seqs = [e.message.seq or 0 for e in appended if isinstance(e, MessageAppended)]
            self.newest.append(max(seqs))
        return digest_summarizer(request)


def test_step_records_what_append_many_then_prepare_step_record(tmp_path: Path) -> None:
    """Across compactions, a host's steps record the events and answer the views of
    append_many + prepare_step on another host; the appends are durable before each summary."""
    watching = _Watching()
    with (
        _host(tmp_path / "twin", summarizer=_Watching()) as twin,
        _host(tmp_path / "stepped", summarizer=watching) as stepped,
    ):
        watching.host = stepped
        session, other = stepped.session("s"), twin.session("s")
        batches = _count_batches(stepped)
        compacting: list[int] = []
        for index in range(25):
            messages = _agent_step(index)
            before, summaries = batches[0], len(watching.newest)
            view = session.step(messages, pending="p" * 30)
            seqs = other.append_many(messages)
            expected = other.prepare_step("p" * 30)
            assert view.appended_seqs == tuple(seqs)
            assert msgspec.structs.replace(view, appended_seqs=()) == expected
            if len(watching.newest) > summaries:
                assert watching.newest[-1] == seqs[-1]  # the step's messages were durable
                compacting.append(batches[0] - before)
            else:
                assert batches[0] - before == 1
        assert _events(stepped, "s") == _events(twin, "s")
        assert any(isinstance(e, CompactionStarted) for e in _events(twin, "s"))
    assert compacting and set(compacting) == {3}  # appends; CompactionStarted; checkpoint + view


def test_a_refused_message_fails_the_whole_step_and_writes_nothing(tmp_path: Path) -> None:
    """A message that does not fit, or metadata the log cannot store, refuses the step as
    append_many refuses it; nothing is written and the session goes on."""
    with _host(tmp_path / "db", ROOMY) as host:
        session = host.session("s")
        session.step(_agent_step(0))
        before = _events(host, "s")
        orphan = Message.tool("output", "never-made", "bash")
        with pytest.raises(InvalidMessageError, match="never made"):
            session.step([Message.user("next"), orphan])
        bad = Message(role="assistant", content="x", metadata={"tags": {1: "one"}})
        with pytest.raises(InvalidMessageError) as from_step:
            session.step([Message.user("next"), bad])
        with pytest.raises(InvalidMessageError) as from_append:
            session.append_many([Message.user("next"), bad])
        assert str(from_step.value) == str(from_append.value)
        assert _events(host, "s") == before
        assert session.step([Message.user("next")]).appended_seqs == (5,)
        assert [m.content for m in session.history()][-1] == "next"


def test_a_step_the_log_refuses_leaves_the_session_as_its_log_says(tmp_path: Path) -> None:
    """Another writer moved the log on: the step fails with the conflict, its appends (folded
    ahead of the log) are forgotten, and the session goes on from the log."""
    with _host(tmp_path / "db", ROOMY) as host:
        session = host.session("s")
        session.step(_agent_step(0))
        host.log.append("s", [UsageReported(prompt_tokens=7)], expected_seq=host.log.last_seq("s"))
        with pytest.raises(VersionConflictError):
            session.step([Message.user("lost")])
        assert [m.content for m in session.history()] == [m.content for m in _agent_step(0)]
        view = session.step([Message.user("kept")])
        assert view.appended_seqs == (5,)
        assert [m.content for m in session.history()][-1] == "kept"


class _Fragile(CharTokenizer):
    """Counts like the default, but fails on a message saying "boom" (a defect in a plug-in)."""

    def count_messages(self, messages: Sequence[Message]) -> int:
        if any("boom" in message.content for message in messages):
            raise RuntimeError("the tokenizer broke")
        return super().count_messages(messages)


def test_a_failure_after_the_appends_are_folded_writes_nothing(tmp_path: Path) -> None:
    """A defect while the view is decided (the appends already folded ahead of the log) fails
    the step alone; nothing is written and the session reloads from its log."""
    with _host(tmp_path / "db", ROOMY, tokenizer=_Fragile()) as host:
        session = host.session("s")
        session.step([Message.user("one")])
        before = _events(host, "s")
        with pytest.raises(InternalError, match="the tokenizer broke"):
            session.step([Message.assistant("boom")])
        assert _events(host, "s") == before
        assert session.step([Message.assistant("two")]).appended_seqs == (2,)
        assert [m.content for m in session.history()] == ["one", "two"]


def test_a_view_refused_for_the_budget_keeps_the_appends(tmp_path: Path) -> None:
    """Past max_total_tokens the messages are recorded and the view refused, as by
    append_many + prepare_step."""
    capped = ROOMY.replace(max_total_tokens=100)
    with _host(tmp_path / "a", capped) as host, _host(tmp_path / "b", capped) as twin:
        session, other = host.session("s"), twin.session("s")
        for side in (session, other):
            side.step([Message.user("one")])
            side.record_usage(90, 20)
        with pytest.raises(BudgetExceededError):
            session.step([Message.assistant("two")])
        other.append_many([Message.assistant("two")])
        with pytest.raises(BudgetExceededError):
            other.prepare_step()
        assert _events(host, "s") == _events(twin, "s")
        assert [m.content for m in session.history()] == ["one", "two"]


def test_the_async_twin_steps_too(tmp_path: Path) -> None:
    """astep appends and serves in one batch on the caller's loop."""
    with _host(tmp_path / "db", ROOMY) as host:
        session = host.session("s")
        batches = _count_batches(host)

        async def agent() -> list[tuple[int, ...]]:
            return [(await session.astep(_agent_step(i))).appended_seqs for i in range(3)]

        assert asyncio.run(agent()) == [(1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11, 12)]
        assert batches[0] == 3
