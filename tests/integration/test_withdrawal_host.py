"""Session.retract_last / clear / current_messages over a real LMDB host, replay and verify."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import run

from ctxledger import Config, Host, InvalidMessageError, InvalidSeqError, Message, ToolCall, replay
from ctxledger.events import MessagePinned, MessageRetracted
from ctxledger.testing import DomainSession, check_view_invariants

SMALL = Config(context_window=2000, compression_threshold=0.5, min_retain_rounds=1)


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    ids = (f"id{n}" for n in itertools.count(1))
    with Host.open(tmp_path / "db", config=SMALL, id_factory=lambda: next(ids)) as opened:
        yield opened


def _call(call_id: str) -> ToolCall:
    return ToolCall(call_id, "bash", '{"command": "ls"}')


def test_retract_last_withdraws_and_records_an_event(host: Host) -> None:
    """The newest message leaves the view and current_messages; history and the log keep it."""
    session = host.session("s")
    session.append_many([Message.user("hi"), Message.assistant("oops")])
    retracted = session.retract_last()
    assert (retracted.seq, retracted.content) == (2, "oops")
    assert [m.content for m in session.current_messages()] == ["hi"]
    assert [m.content for m in session.prepare_step().messages] == ["hi"]
    assert len(session.history()) == 2
    events = [record.event for record in host.log.read("s")]
    assert MessageRetracted(seq=2) in events


def test_retract_last_with_a_replacement_is_one_batch(host: Host) -> None:
    """A grouped call message narrows to one call atomically; a bad replacement writes nothing."""
    session = host.session("s")
    session.append_many([Message.user("go"), Message.assistant("", [_call("a"), _call("b")])])
    before = host.log.last_seq("s")
    with pytest.raises(InvalidMessageError):
        session.retract_last([Message.tool("x", "zzz")])
    assert host.log.last_seq("s") == before
    session.retract_last([Message.assistant("", [_call("a")])])
    assert [c.id for c in session.current_messages(1)[0].tool_calls] == ["a"]
    session.append(Message.tool("done", "a", "bash"))


def test_retract_last_refuses_when_nothing_is_shown(host: Host) -> None:
    """An empty (or fully withdrawn) conversation has nothing to retract."""
    session = host.session("s")
    with pytest.raises(InvalidSeqError, match="no message to retract"):
        session.retract_last()
    session.append(Message.user("a"))
    session.clear()
    with pytest.raises(InvalidSeqError, match="no message to retract"):
        session.retract_last()


def test_clear_starts_afresh_and_survives_a_restart(tmp_path: Path) -> None:
    """After clear the view is empty; a reopened host shows the same; ids may be reused."""
    path = tmp_path / "db"
    with Host.open(path, config=SMALL) as host:
        session = host.session("s")
        session.append_many(
            [Message.system("old"), Message.user("go"), Message.assistant("", [_call("a")])]
        )
        assert session.clear() == 3
        assert session.prepare_step().messages == ()
        session.append_many([Message.user("new"), Message.assistant("", [_call("a")])])
        session.append(Message.tool("ok", "a", "bash"))
        served = session.prepare_step()
    with Host.open(path, config=SMALL) as host:
        session = host.session("s")
        assert session.build_model_view().view_hash == served.view_hash
        assert [m.content for m in session.current_messages()] == ["new", "", "ok"]


def test_verify_view_at_and_cli_handle_withdrawals(host: Host, tmp_path: Path) -> None:
    """verify rebuilds every served view; view_at reproduces them; the CLI shows the events."""
    session = host.session("s")
    served = {}
    cleared = 0
    for round_ in range(16):
        session.append_many(
            [Message.user(f"question {round_} " * 40), Message.assistant("a" * 300)]
        )
        if round_ % 3 == 2:
            session.retract_last()
            session.append(Message.assistant("b" * 150))
        if round_ == 7:
            cleared = session.clear()
        view = session.prepare_step()
        served[view.through_seq] = view.view_hash
        state = session._live_state()
        check_view_invariants(
            state.history,
            view,
            state.config,
            checkpoint=state.active_checkpoint,
            pins=state.pins,
            retracted=state.retracted,
            cleared_through=state.cleared_through,
        )
    cuts = [c.retain_from_seq for c in session.checkpoints()]
    assert min(cuts) < cleared < max(cuts), "compactions before and after the clear"
    for seq, view_hash in served.items():
        assert session.view_at(seq).view_hash == view_hash
    host.close()
    report = replay.verify(tmp_path / "db")
    assert report.ok and report.views_checked == len(served), report.mismatches
    assert run("verify", "--db", tmp_path / "db").exit_code == 0
    what_if = replay.what_if(tmp_path / "db", "s", SMALL)  # the same policy: the same views
    assert [step.view_tokens for step in what_if.steps] == [
        step.original_tokens for step in what_if.steps
    ]
    shown = run("show", "s", "--db", tmp_path / "db", "--events", "--limit", "500")
    assert "message_retracted" in shown.output and "history_cleared" in shown.output
    assert f"through #{cleared}" in shown.output


def test_async_twins(host: Host) -> None:
    """aretract_last, aclear and acurrent_messages run off the event loop."""
    session = host.session("s")
    session.append_many([Message.user("a"), Message.assistant("b")])

    async def main() -> tuple[Message, list[Message], int]:
        retracted = await session.aretract_last()
        shown = await session.acurrent_messages()
        return retracted, shown, await session.aclear()

    retracted, shown, through = asyncio.run(main())
    assert (retracted.content, [m.content for m in shown], through) == ("b", ["a"], 2)


def test_current_messages_checks_its_limit(host: Host) -> None:
    """A negative or non-integer limit is refused."""
    session = host.session("s")
    with pytest.raises(ValueError, match="limit"):
        session.current_messages(-1)


def test_pin_of_a_retracted_message_is_refused_as_the_domain_refuses_it(host: Host) -> None:
    """pin(seq) of a retracted or cleared message raises InvalidSeqError and writes nothing,
    exactly as DomainSession.pin does (both call ctxledger.domain.pin_message)."""
    session = host.session("s")
    session.append_many([Message.user("one"), Message.assistant("two")])
    session.retract_last()
    before = host.log.last_seq("s")
    with pytest.raises(InvalidSeqError, match="message 2 was withdrawn"):
        session.pin(2)
    assert host.log.last_seq("s") == before
    domain = DomainSession(SMALL, session_id="s")
    domain.append_many([Message.user("one"), Message.assistant("two")])
    domain.retract_last()
    with pytest.raises(InvalidSeqError, match="message 2 was withdrawn"):
        domain.pin(2)
    session.clear()
    with pytest.raises(InvalidSeqError, match="message 1 was withdrawn"):
        session.pin(1)
    session.append(Message.user("three"))
    session.pin(3)
    assert [record.event for record in host.log.read("s")][-1] == MessagePinned(seq=3)
