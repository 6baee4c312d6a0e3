"""Bad calls fail alone (issue 25), as a property of the public API.

While 16 agents step on their own threads (append, a tool call and its result, prepare_step,
record_usage, now and then a manual compaction, view_at, recall, current_messages), hypothesis
calls the public API of the same host with a wrong type or value for one argument at a time:
every such call must raise a ``ctxledger`` error, and no agent's call may fail or hang. After a
restart (a new Host on the same LMDB folder) every record decodes, ``verify`` passes, and each
agent's history is exactly what it was acknowledged.

The waits below are deadlock guards only; nothing here asserts how long anything takes.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from ctxledger import (
    Config,
    CtxLedgerError,
    Host,
    HostOptions,
    Message,
    ToolCall,
)
from ctxledger.domain import ReportedUsage
from ctxledger.replay import verify
from guards import GUARD, deep_list, outcome_of

AGENTS = 16
CONFIG = Config(context_window=4000, compression_threshold=0.5, min_retain_rounds=1)


class _ConfigWithAnExtra(Config, frozen=True, kw_only=True):
    """A Config that would not read back as itself (the codec drops ``extra``)."""

    extra: int = 1


class _DeepMetadata(dict[str, Any]):
    """Metadata nested 100k deep, with a repr short enough for a report of the example."""

    def __repr__(self) -> str:
        return "{'x': <a list nested 100,000 deep>}"


# --- bad values, by the kind of argument they are wrong for -------------------------------------

WRONG_TYPES = st.one_of(
    st.integers(),
    st.floats(allow_nan=True),
    st.binary(max_size=4),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.builds(object),
)
SURROGATE = st.sampled_from(["\ud800", "\udfff", "abc\udc80", "\ud83d tail"])
SOME_NOT_TEXT = WRONG_TYPES.filter(lambda v: not isinstance(v, str))  # None excluded
NOT_TEXT = st.one_of(SOME_NOT_TEXT, st.none())
BAD_IDS = st.one_of(
    NOT_TEXT,
    st.just(""),
    st.just("nul\x00id"),
    SURROGATE,
    st.text(alphabet="x", min_size=256, max_size=300),
)
BAD_SEQS = st.one_of(
    st.integers(max_value=0),
    st.integers(min_value=10**9),
    st.booleans(),
    st.floats(),
    st.text(max_size=3),
    st.none(),
)
BAD_COUNTS = st.one_of(
    st.integers(max_value=-1),
    st.integers(min_value=10**12 + 1, max_value=10**40),
    st.floats(),
    st.text(max_size=3),
    st.booleans(),
)
UNSTORABLE_METADATA = st.sampled_from(
    [
        {"x": object()},
        {1: "an int key"},
        {"x": "\ud800"},
        {"x": 2**70},
        _DeepMetadata(x=deep_list(100_000)),
        None,  # falsy, not a dict: once stored, then unreadable
        [],
        "",
        0,
    ]
)
BAD_MESSAGES = st.one_of(
    WRONG_TYPES,
    st.none(),
    st.text(max_size=5),
    UNSTORABLE_METADATA.map(lambda md: Message(role="user", content="m", metadata=md)),
    st.just(Message(role="summary", content="not appendable")),
    st.just(Message.tool("answers nothing", "no-such-call")),
)
BAD_BATCHES = st.one_of(
    st.integers(),
    st.none(),
    st.builds(object),
    st.lists(BAD_MESSAGES, min_size=1, max_size=2).map(
        lambda bad: [Message.user("fine"), *bad]  # the batch is atomic: nothing written
    ),
)
CONFIG_FIELDS = sorted(msgspec.structs.asdict(Config()))
BAD_CONFIGS = st.one_of(
    st.dictionaries(st.sampled_from(CONFIG_FIELDS), st.integers(), max_size=3),
    st.text(max_size=10),
    st.integers(),
    st.lists(st.integers(), max_size=2),
    st.builds(_ConfigWithAnExtra),
)
BAD_TOOL_ARGUMENTS = st.one_of(
    st.integers(),
    st.none(),
    st.just("not json"),
    st.just("[1, 2]"),
    st.just("[" * 100_000),
    st.just('{"query": "\\ud800"}'),
    st.just({"query": 5}),
    st.just({"query": "x", "nope": 1, 2: 3}),
    st.just({"query": "x", "limit": 0}),
)


def _short(value: object) -> str:
    try:
        text = repr(value)
    except RecursionError:
        text = f"<a {type(value).__name__} too deep to print>"
    return text if len(text) <= 200 else text[:200] + "..."


class _Unreadable:
    """A usage object whose every field raises when read."""

    def __getattr__(self, name: str) -> object:
        raise RuntimeError(f"no {name}")


def _usage_object() -> object:
    return {"unrelated": 1}


def _run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


#: A ReportedUsage built with bad counts (a Struct checks none of them).
BAD_REPORTS = st.builds(ReportedUsage, prompt_tokens=BAD_COUNTS) | st.builds(
    ReportedUsage, prompt_tokens=st.integers(0, 10), cached_tokens=st.integers(11, 100)
)
#: What ``usage=`` of step and append_many must refuse (None is no usage: not among them).
BAD_USAGE = BAD_COUNTS | BAD_REPORTS | st.builds(_usage_object) | st.builds(_Unreadable)

# (name, strategy of a bad value, the call made with it on a session (and host))
BadCall = tuple[str, st.SearchStrategy[Any], Callable[[Any, Host, Any], Any]]

BAD_CALLS: list[BadCall] = [
    ("Host.session(session_id)", BAD_IDS, lambda s, h, v: h.session(v)),
    ("Host.session(config)", BAD_CONFIGS, lambda s, h, v: h.session(s.id, config=v)),
    ("Host.session(config) new", BAD_CONFIGS, lambda s, h, v: h.session("fresh", config=v)),
    ("Host.asession(config)", BAD_CONFIGS, lambda s, h, v: _run(h.asession(s.id, config=v))),
    ("append(message)", BAD_MESSAGES, lambda s, h, v: s.append(v)),
    ("aappend(message)", BAD_MESSAGES, lambda s, h, v: _run(s.aappend(v))),
    ("append_many(messages)", BAD_BATCHES, lambda s, h, v: s.append_many(v)),
    ("record_usage(prompt_tokens)", BAD_COUNTS, lambda s, h, v: s.record_usage(v, 1)),
    (
        "record_usage(object)",
        st.builds(_usage_object) | st.builds(_Unreadable),
        lambda s, h, v: s.record_usage(v),
    ),
    ("record_usage(completion_tokens)", BAD_COUNTS, lambda s, h, v: s.record_usage(10, v)),
    (
        "record_usage(cached_tokens)",
        BAD_COUNTS | st.integers(min_value=11, max_value=10**6),
        lambda s, h, v: s.record_usage(10, 1, cached_tokens=v),
    ),
    (
        "record_usage(cache_write_tokens)",
        BAD_COUNTS,
        lambda s, h, v: s.record_usage(10, 1, cache_write_tokens=v),
    ),
    ("arecord_usage(prompt_tokens)", BAD_COUNTS, lambda s, h, v: _run(s.arecord_usage(v))),
    ("record_usage(ReportedUsage)", BAD_REPORTS, lambda s, h, v: s.record_usage(v)),
    ("step(usage)", BAD_USAGE, lambda s, h, v: s.step([Message.user("next")], usage=v)),
    ("astep(usage)", BAD_USAGE, lambda s, h, v: _run(s.astep(usage=v))),
    ("append_many(usage)", BAD_USAGE, lambda s, h, v: s.append_many([Message.user("x")], usage=v)),
    ("aappend_many(usage)", BAD_USAGE, lambda s, h, v: _run(s.aappend_many([], usage=v))),
    ("pin(seq)", BAD_SEQS, lambda s, h, v: s.pin(v)),
    ("view_at(seq)", BAD_SEQS.filter(lambda v: v != 0), lambda s, h, v: s.view_at(v)),
    ("explain(seq)", BAD_SEQS, lambda s, h, v: s.explain(v)),
    ("fork(new_id)", BAD_IDS | st.just("bad-0"), lambda s, h, v: s.fork(v)),
    (
        "fork(at_seq)",
        BAD_SEQS.filter(lambda v: v not in (0, None)),
        lambda s, h, v: s.fork("forked", v),
    ),
    ("compact(focus)", SOME_NOT_TEXT | SURROGATE, lambda s, h, v: s.compact(v)),
    ("acompact(focus)", SURROGATE, lambda s, h, v: _run(s.acompact(v))),
    ("prepare_step(pending)", NOT_TEXT, lambda s, h, v: s.prepare_step(v)),
    ("aprepare_step(pending)", NOT_TEXT, lambda s, h, v: _run(s.aprepare_step(v))),
    ("build_model_view(pending)", NOT_TEXT, lambda s, h, v: s.build_model_view(v)),
    ("compact_if_needed(pending)", NOT_TEXT, lambda s, h, v: s.compact_if_needed(v)),
    ("abuild_model_view(pending)", NOT_TEXT, lambda s, h, v: _run(s.abuild_model_view(v))),
    ("acompact_if_needed(pending)", NOT_TEXT, lambda s, h, v: _run(s.acompact_if_needed(v))),
    ("aretract_last(replacement)", BAD_BATCHES, lambda s, h, v: _run(s.aretract_last(v))),
    ("aappend_many(messages)", BAD_BATCHES, lambda s, h, v: _run(s.aappend_many(v))),
    ("retract_last(replacement)", BAD_BATCHES, lambda s, h, v: s.retract_last(v)),
    (
        "revert_compaction(checkpoint_id)",
        SOME_NOT_TEXT | SURROGATE | st.just("no-such-checkpoint"),
        lambda s, h, v: s.revert_compaction(v),
    ),
    (
        "revert_compaction(reason)",
        NOT_TEXT | SURROGATE,
        lambda s, h, v: s.revert_compaction(None, reason=v),
    ),
    ("audit(checkpoint_id)", SOME_NOT_TEXT | SURROGATE, lambda s, h, v: s.audit(v)),
    ("recall(query)", NOT_TEXT | SURROGATE, lambda s, h, v: s.recall(v)),
    (
        "recall(limit)",
        st.integers(max_value=0) | st.integers(min_value=51) | st.booleans() | st.text(max_size=2),
        lambda s, h, v: s.recall("x", limit=v),
    ),
    ("call_tool(name)", NOT_TEXT | st.just("nope"), lambda s, h, v: s.call_tool(v, "{}")),
    ("call_tool(arguments)", BAD_TOOL_ARGUMENTS, lambda s, h, v: s.call_tool("recall", v)),
    (
        "current_messages(limit)",
        st.integers(max_value=-1) | st.booleans() | st.floats() | st.text(max_size=2),
        lambda s, h, v: s.current_messages(v),
    ),
    (
        "acurrent_messages(limit)",
        st.integers(max_value=-1) | st.booleans() | st.text(max_size=2),
        lambda s, h, v: _run(s.acurrent_messages(v)),
    ),
    ("cost(pricing)", NOT_TEXT | st.text(max_size=3), lambda s, h, v: s.cost(v)),
]


@st.composite
def bad_calls(draw: st.DrawFn) -> tuple[str, Any, int]:
    """One public call with one bad argument, and which session it targets."""
    name, values, _ = draw(st.sampled_from(BAD_CALLS))
    value = draw(values)
    target = draw(st.integers(min_value=0, max_value=AGENTS))  # AGENTS: the bad session
    return name, value, target


class Agent:
    """A well-behaved agent stepping on its own thread until told to stop."""

    def __init__(self, host: Host, index: int) -> None:
        self.session = host.session(f"agent-{index}", config=CONFIG)
        self.index = index
        self.acknowledged: list[str] = []
        self.errors: list[BaseException] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"agent-{index}", daemon=True)

    def _run(self) -> None:
        session, step = self.session, 0
        try:
            while not self.stop.is_set() or step < 3:
                step += 1
                call = ToolCall(f"call-{self.index}-{step}", "bash", '{"command": "ls"}')
                batch = [
                    Message.user(f"agent {self.index} step {step}: list the files " + "u" * 60),
                    Message.assistant("checking", [call]),
                ]
                session.append_many(batch)
                result = Message.tool(f"file_{step}.py\n" + "x" * 150, call.id, "bash")
                session.append(result)
                self.acknowledged += [m.content for m in [*batch, result]]
                view = session.prepare_step()
                session.record_usage(max(1, view.estimated_tokens), 20)
                if step % 7 == 0:
                    session.compact(focus="keep the file names")
                if step % 5 == 0:
                    session.view_at(view.through_seq)
                    session.current_messages(3)
                    session.recall("files")
        except BaseException as exc:
            self.errors.append(exc)


def test_bad_calls_fail_alone_while_agents_step(tmp_path: Path) -> None:
    """Every bad call raises a ctxledger error; no agent call fails or hangs; after a restart
    every record decodes, verify passes and every acknowledged message is there."""
    folder = tmp_path / "db"
    host = Host.open(folder, config=CONFIG)
    agents: list[Agent] = []
    try:
        agents = [Agent(host, index) for index in range(AGENTS)]
        bad = host.session("bad-0")
        bad.append_many([Message.user("one"), Message.assistant("two"), Message.user("three")])
        sessions = [agent.session for agent in agents] + [bad]
        for agent in agents:
            agent.thread.start()
        calls = {name: call for name, _, call in BAD_CALLS}

        @settings(
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(st.lists(bad_calls(), min_size=1, max_size=6))
        def bad_callers(drawn: list[tuple[str, Any, int]]) -> None:
            for name, value, target in drawn:
                note(f"{name} with {_short(value)} on session {target}")
                call = functools.partial(calls[name], sessions[target], host, value)
                outcome = outcome_of(call, name)
                error = outcome.get("error")
                assert isinstance(error, CtxLedgerError), (
                    f"{name} with {_short(value)}: expected a ctxledger error, got "
                    f"{error!r} (returned {outcome.get('value')!r:.100})"
                )

        bad_callers()
    finally:
        for agent in agents:
            agent.stop.set()
        for agent in agents:
            agent.thread.join(GUARD)
        host.close()
    assert not any(agent.thread.is_alive() for agent in agents), "an agent hung"
    errors = [(agent.index, error) for agent in agents for error in agent.errors]
    assert errors == [], errors
    # A restart: every record decodes, the log verifies, nothing acknowledged is missing.
    with Host.open(folder) as reopened:
        for session_id in reopened.sessions():
            list(reopened.log.read(session_id))
        for agent in agents:
            history = reopened.session(agent.session.id).history()
            assert [m.content for m in history] == agent.acknowledged
        bad_history = reopened.session("bad-0").history()
        assert [m.content for m in bad_history] == ["one", "two", "three"]
    report = verify(folder)
    assert report.ok, report


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("history_actors", 0),
        ("compaction_workers", "2"),
        ("max_active_sessions", True),
        ("lease_ttl", -1),
        ("lease_wait", float("nan")),
        ("host_id", 5),
        ("durability", "fast"),
        ("leases", 1),
    ],
)
def test_bad_host_options_fail_before_anything_is_opened(
    tmp_path: Path, argument: str, value: object
) -> None:
    """A bad HostOptions field fails when the options are built, and as an old ``Host.open``
    keyword before anything is created."""
    with pytest.raises(CtxLedgerError, match=argument):
        HostOptions(**{argument: value})  # type: ignore[arg-type]
    with (
        pytest.warns(DeprecationWarning, match=argument),
        pytest.raises(CtxLedgerError, match=argument),
    ):
        Host.open(tmp_path / "db", **{argument: value})  # type: ignore[arg-type]
    assert not (tmp_path / "db").exists()


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("clock", "now"),
        ("id_factory", 3),
        ("summarizer", "extractive"),
        ("tokenizer", len),
        ("config", {"context_window": 1000}),
    ],
)
def test_bad_host_arguments_fail_before_anything_is_opened(
    tmp_path: Path, argument: str, value: object
) -> None:
    """``Host.open`` with one bad argument raises a ctxledger error and creates nothing."""
    with pytest.raises(CtxLedgerError):
        Host.open(tmp_path / "db", **{argument: value})  # type: ignore[arg-type]
    assert not (tmp_path / "db").exists()
