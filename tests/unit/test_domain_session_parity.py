"""``DomainSession`` has every command ``Session`` has, and forks, recalls and awaits as it does
(issue 28): the same names and parameters, the same events, answers and errors as a host."""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.property.test_host_domain_equivalence import _comparable, _encoded

from ctxledger import Config, Host, Message, Session, ToolCall
from ctxledger.errors import CtxLedgerError
from ctxledger.events import Event
from ctxledger.testing import DomainSession, digest_summarizer

CONFIG = Config(context_window=2_000, min_retain_rounds=1, prepare_threshold=0.0)
NOW = 1_765_000_000.0


def _counter() -> Callable[[], str]:
    ids = itertools.count(1)
    return lambda: f"c{next(ids)}"


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    options: dict[str, Any] = {"summarizer": digest_summarizer, "clock": lambda: NOW}
    with Host.open(tmp_path / "db", config=CONFIG, id_factory=_counter(), **options) as opened:
        yield opened


def _domain() -> DomainSession:
    return DomainSession(CONFIG, session_id="s", clock=lambda: NOW, id_factory=_counter())


def _converse(session: Session | DomainSession) -> None:
    """The same commands on either: tool rounds, a compaction, a usage report, a view."""
    for turn in range(6):
        call = ToolCall(f"t{turn}", "bash", '{"command": "grep -r needle src"}')
        session.append(Message.user(f"turn {turn}: find the needle " + "x" * 200))
        session.append(Message.assistant("looking", [call]))
        session.append(Message.tool(f"src/mod{turn}.py: needle here " + "y" * 300, call.id))
        session.append(Message.assistant(f"found it in mod{turn} " + "z" * 100))
    session.compact()
    session.record_usage(900, 40)
    session.prepare_step()


def _both(host: Host) -> tuple[Session, DomainSession]:
    live, domain = host.session("s"), _domain()
    _converse(live)
    _converse(domain)
    host.session("s", config=CONFIG.replace(compression_threshold=0.6))  # the fork takes it
    domain.change_config(CONFIG.replace(compression_threshold=0.6))
    return live, domain


def _host_events(host: Host, session_id: str) -> list[Event]:
    return [record.event for record in host.log.read(session_id)]


def _public(cls: type) -> dict[str, Any]:
    return {
        name: getattr(cls, name)
        for name in dir(cls)
        if not name.startswith("_") and callable(getattr(cls, name))
    }


def test_every_command_of_session_is_a_domain_session_command_with_its_parameters() -> None:
    """Each public callable of Session exists on DomainSession with the same parameters."""
    ours = _public(DomainSession)
    for name, theirs in _public(Session).items():
        assert name in ours, f"DomainSession lacks {name}"
        expected = inspect.signature(theirs)
        got = inspect.signature(ours[name])
        shape = [(p.name, p.kind, p.default) for p in expected.parameters.values()]
        assert [(p.name, p.kind, p.default) for p in got.parameters.values()] == shape, name
        returns = str(expected.return_annotation).replace("Session", "DomainSession")
        assert str(got.return_annotation) in (expected.return_annotation, returns), name
        assert inspect.iscoroutinefunction(ours[name]) == inspect.iscoroutinefunction(theirs), name
        assert ours[name].__doc__, f"DomainSession.{name} has no docstring"


@pytest.mark.parametrize("at_seq", [None, 0, 5, 13, 24])
def test_a_fork_records_and_holds_what_the_hosts_fork_does(host: Host, at_seq: int | None) -> None:
    """A fork on a DomainSession: the host's events, messages, usage, Config and next view."""
    live, domain = _both(host)
    host_fork, domain_fork = live.fork("f", at_seq), domain.fork("f", at_seq)
    assert _encoded(_host_events(host, "f")) == _encoded(domain_fork.events)
    assert _host_events(host, "f")[0].created_at == NOW  # type: ignore[attr-defined]
    assert domain_fork.id == "f"
    assert domain_fork.config == host_fork.config
    assert domain_fork.history() == host_fork.history()
    assert domain_fork.usage() == host_fork.usage()
    checkpoints = [_comparable(c) for c in host_fork.checkpoints()]
    assert [_comparable(c) for c in domain_fork.checkpoints()] == checkpoints
    assert _comparable(domain_fork.prepare_step()) == _comparable(host_fork.prepare_step())
    domain_fork.append(Message.user("and now?"))
    host_fork.append(Message.user("and now?"))
    assert _comparable(domain_fork.compact()) == _comparable(host_fork.compact())
    assert _encoded(_host_events(host, "f")) == _encoded(domain_fork.events)
    last = domain_fork.state.last_seq
    assert _comparable(domain_fork.view_at(last)) == _comparable(host_fork.view_at(last))


def test_a_fork_of_a_fork_branches_off_where_the_host_does(host: Host) -> None:
    """Forking a fork inside its inherited messages names the grandparent, as the host does."""
    live, domain = _both(host)
    live.fork("f", 13).fork("g", 5)
    grandchild = domain.fork("f", 13).fork("g", 5)
    assert _encoded(_host_events(host, "g")) == _encoded(grandchild.events)
    assert grandchild.events[1].parent_id == "s"  # type: ignore[attr-defined]
    assert grandchild.replay().to_snapshot() == grandchild.state.to_snapshot()
    assert grandchild.history() == host.session("g").history()


def test_a_fork_and_its_parent_go_on_apart() -> None:
    """Commands on the parent after the fork never change the fork, nor the other way."""
    domain = _domain()
    _converse(domain)
    fork = domain.fork("f", 3)
    before = list(domain.events)
    fork.append(Message.user("only in the fork"))
    assert domain.events == before
    domain.append(Message.user("only in the parent"))
    assert [m.content for m in fork.history()][-1] == "only in the fork"
    assert fork.summarizer is domain.summarizer and fork.clock is domain.clock


@pytest.mark.parametrize(
    ("new_id", "at_seq"),
    [("", None), (3, None), ("s", None), ("f", 99), ("f", -1), ("f", True), ("f", "3")],
)
def test_a_bad_fork_fails_as_on_the_host(host: Host, new_id: Any, at_seq: Any) -> None:
    """A bad id, a taken id or a bad fork point: the host's error type and message."""
    live, domain = _both(host)
    errors = []
    for session in (live, domain):
        with pytest.raises(CtxLedgerError) as caught:
            session.fork(new_id, at_seq)
        errors.append((type(caught.value), str(caught.value)))
    assert errors[0] == errors[1]
    assert len(domain.events) == len(_host_events(host, "s"))


def test_recall_and_call_tool_answer_as_the_host_after_a_compaction(host: Host) -> None:
    """The same hits and the same tool answer for the same history, after a compaction."""
    live, domain = _both(host)
    hits = domain.recall("needle mod2", limit=10)
    assert hits and hits == live.recall("needle mod2", limit=10)
    assert any(hit.placement == "summarized" for hit in hits)
    arguments = '{"query": "grep needle", "limit": 3}'
    assert domain.call_tool("recall", arguments) == live.call_tool("recall", arguments)
    fork = domain.fork("f", 13)
    assert fork.recall("needle") == live.fork("f", 13).recall("needle")


def test_the_async_twins_record_and_answer_what_the_commands_do() -> None:
    """Each ``a``-twin gives the answer and the events of the command of the same name."""

    def run(session: DomainSession, twin: bool) -> list[Any]:
        def call(name: str, *args: Any, **kwargs: Any) -> Any:
            try:
                if not twin:
                    return getattr(session, name)(*args, **kwargs)
                return asyncio.run(getattr(session, "a" + name)(*args, **kwargs))
            except CtxLedgerError as exc:
                return type(exc), str(exc)

        call_id = ToolCall("t1", "bash", "{}")
        answers = [
            call("append", Message.user("hello " + "x" * 900)),
            call("append_many", [Message.assistant("run", [call_id]), Message.tool("o", "t1")]),
            call("record_usage", 700, 10, cached_tokens=100, cache_write_tokens=5),
            call("step", [Message.user("more " + "y" * 900)], "pending"),
            call("prepare_step", "", defer_record=True),
            call("prepare_step", "", defer_record="yes"),  # refused, by the twin too
            call("build_model_view", "p"),
            call("compact_if_needed", "q" * 500),
            call("append", Message.user("again " + "z" * 900)),
            call("compact", "keep names"),
            call("wait_background"),
            call("current_messages", 2),
            call("retract_last", [Message.user("instead")]),
            call("reactive_compact", None),
            call("reactive_compact", None),  # refused: an error, as from the command
            call("clear"),
        ]
        return [_comparable(answer) for answer in answers]

    sync, twins = _domain(), _domain()
    assert run(sync, twin=False) == run(twins, twin=True)
    assert _encoded(sync.events) == _encoded(twins.events)
