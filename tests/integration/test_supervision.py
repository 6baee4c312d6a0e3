"""Bad calls fail alone (issue 25): a request that fails leaves no mark on its session, a defect
while handling one request fails that request only, and a dead actor is replaced."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ctxledger import (
    Config,
    ConfigError,
    CtxLedgerError,
    Host,
    HostClosedError,
    HostOptions,
    InternalError,
    InvalidMessageError,
    Message,
    SummaryRequest,
    ToolCall,
)
from ctxledger.actors import steps as steps_module
from ctxledger.actors import writes as writes_module
from ctxledger.actors.history import HistoryActor
from ctxledger.actors.messages import SummaryDone
from ctxledger.replay import verify
from guards import GUARD, call_in_thread, deep_list
from log_capture import capture_logs

UNSTORABLE_METADATA = {
    "an object": {"x": object()},
    "an int key": {1: "one"},
    "a lone surrogate": {"x": "\ud800"},
    "100k-deep nesting": {"x": deep_list(100_000)},
    "None": None,
    "an empty list": [],
}


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    with Host.open(tmp_path / "db") as opened:
        yield opened


@pytest.mark.parametrize("kind", list(UNSTORABLE_METADATA))
def test_unstorable_metadata_fails_its_append_and_the_session_goes_on(
    host: Host, kind: str
) -> None:
    """The log refuses the batch at once: the caller gets InvalidMessageError, nothing is
    written, and the session's next calls are served (the writing mark did not stay)."""
    session = host.session("s")
    session.append(Message.user("before"))
    bad = Message(role="user", content="bad", metadata=UNSTORABLE_METADATA[kind])
    with pytest.raises(InvalidMessageError):
        call_in_thread(lambda: session.append(bad))
    assert call_in_thread(lambda: session.append(Message.user("after"))) == 2
    assert [m.content for m in call_in_thread(session.history)] == ["before", "after"]


@pytest.mark.parametrize("config", [{"context_window": 1000}, "notaconfig", 5])
def test_a_config_that_is_not_a_config_fails_its_call_and_kills_nothing(
    tmp_path: Path, config: object
) -> None:
    """``host.session(id, config=<not a Config>)`` raises ConfigError for a new and for an
    existing session; nothing is written, and every session of the host keeps working."""
    with Host.open(tmp_path / "db", options=HostOptions(history_actors=1)) as host:
        sessions = [host.session(f"s{n}") for n in range(4)]
        for session in sessions:
            session.append(Message.user("one"))
        with pytest.raises(ConfigError) as refused:
            call_in_thread(lambda: host.session("s0", config=config))  # type: ignore[arg-type]
        assert refused.value.field == "config"
        with pytest.raises(ConfigError):
            call_in_thread(lambda: host.session("new", config=config))  # type: ignore[arg-type]
        for session in sessions:
            assert call_in_thread(lambda s=session: s.append(Message.user("two"))) == 2
        assert sorted(host.sessions()) == ["s0", "s1", "s2", "s3"]
    report = verify(tmp_path / "db")
    assert report.ok, report


class _ConfigWithAnExtra(Config, frozen=True, kw_only=True):
    """A Config that encodes a field the codec drops: it would read back as another value."""

    extra: int = 1


def _unreadable_config(kind: str) -> Config:
    if kind == "subclass":
        return _ConfigWithAnExtra()
    try:  # a tuple field holding a string (Config itself may refuse it by now)
        return msgspec.structs.replace(Config(), micro_preserve_tools="bash")
    except CtxLedgerError:
        pytest.skip("Config refuses the value itself")


@pytest.mark.parametrize("kind", ["subclass", "string for a tuple"])
def test_a_config_that_would_not_read_back_is_refused_before_it_is_written(
    tmp_path: Path, kind: str
) -> None:
    """A Config that would not decode as itself is refused by the round-trip check, for an
    existing session, a new one and the host's default; the log stays readable."""
    bad = _unreadable_config(kind)
    with pytest.raises(ConfigError, match="cannot be recorded"):
        Host.open(tmp_path / "other", config=bad)
    assert not (tmp_path / "other").exists()
    with Host.open(tmp_path / "db") as host:
        session = host.session("s")
        session.append(Message.user("one"))
        with pytest.raises(ConfigError, match="cannot be recorded"):
            host.session("s", config=bad)
        with pytest.raises(ConfigError, match="cannot be recorded"):
            host.session("fresh", config=bad)
        assert host.sessions() == ["s"]
        assert session.append(Message.user("two")) == 2
    with Host.open(tmp_path / "db") as host:
        assert [m.content for m in host.session("s").history()] == ["one", "two"]
    assert verify(tmp_path / "db").ok


def _raise_once(real: Callable[..., Any]) -> Callable[..., Any]:
    """Stand-in for a defect: the first call raises, later calls are the real function."""
    calls = [0]

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("a defect")
        return real(*args, **kwargs)

    return flaky


def test_a_defect_in_a_decision_fails_that_request_alone(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A defect raised while a request is carried out fails it with InternalError (logged at
    ERROR with its session id); the next request of the session is served."""
    session = host.session("s")
    session.append(Message.user("one"))
    monkeypatch.setattr(steps_module, "decide", _raise_once(steps_module.decide))
    with capture_logs() as logs, pytest.raises(InternalError):
        call_in_thread(session.prepare_step)
    failures = [e for e in logs if e["log_level"] == "error"]
    assert [e["event"] for e in failures] == ["request_failed"]
    assert failures[0]["session_id"] == "s"
    assert call_in_thread(session.prepare_step).through_seq == 1


def test_a_defect_after_a_commit_restarts_the_session_from_its_log(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler that raises after the journal committed a batch (its caller already has its
    answer) is contained: logged at ERROR under ctxledger.*, the session is reloaded from its
    log, and its later calls and other sessions' calls are served."""
    victim, other = host.session("victim"), host.session("other")
    victim.append(Message.user("kept"))
    other.append(Message.user("unrelated"))
    victim.history(), other.history()  # queued behind their batches: both are folded now
    monkeypatch.setattr(writes_module, "snapshot_due", _raise_once(writes_module.snapshot_due))
    with capture_logs() as logs:
        assert call_in_thread(lambda: victim.append(Message.user("durable"))) == 2
        assert call_in_thread(lambda: victim.append(Message.user("next"))) == 3
    failures = [e for e in logs if e["log_level"] == "error"]
    assert [e["event"] for e in failures] == ["request_failed"]
    assert failures[0]["session_id"] == "victim"
    assert any(e["event"] == "session_restarted" for e in logs)
    assert call_in_thread(lambda: other.append(Message.user("still fine"))) == 2
    assert [m.content for m in victim.history()] == ["kept", "durable", "next"]


def test_a_dead_history_actor_is_replaced_and_no_caller_waits_forever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If a history actor dies after all, the caller waiting on it gets a ctxledger error,
    the death is logged at ERROR under ctxledger.*, and its sessions are served again by a
    fresh actor, reloaded from the log."""

    def no_containment(self: HistoryActor, message: Any, exc: Exception) -> None:
        raise exc  # stands for a defect in the containment itself

    monkeypatch.setattr(HistoryActor, "_contain", no_containment)
    release = threading.Event()

    def summarizer(request: SummaryRequest) -> str:
        release.wait(GUARD)
        return "summary"

    config = Config(context_window=2000, compression_threshold=0.5, min_retain_rounds=1)
    with Host.open(
        tmp_path / "db",
        config=config,
        summarizer=summarizer,
        options=HostOptions(history_actors=1),
    ) as host:
        busy, idle = host.session("busy"), host.session("idle")
        for n in range(6):
            call = ToolCall(f"c{n}", "bash", "{}")
            busy.append_many(
                [
                    Message.user(f"round {n} " + "u" * 300),
                    Message.assistant("", [call]),
                    Message.tool("x" * 300, call.id, "bash"),
                    Message.assistant("done " + "a" * 300),
                ]
            )
        idle.append(Message.user("one"))
        outcome: dict[str, BaseException] = {}

        def compact() -> None:
            try:
                busy.compact()
            except BaseException as exc:
                outcome["error"] = exc

        waiting = threading.Thread(target=compact, daemon=True)
        waiting.start()
        dead = host._owner("busy")
        with capture_logs() as logs:
            # Wait until the compaction is in progress, then break the actor.
            while not any(
                type(e).__name__ == "CompactionStarted" for e in _events(host, "busy")
            ):
                waiting.join(0.01)
            dead.tell(SummaryDone("busy", None, None, "", 0.0))  # type: ignore[arg-type]
            waiting.join(GUARD)
            assert not waiting.is_alive(), "the caller of the dead actor hangs"
        release.set()
        assert isinstance(outcome["error"], InternalError)
        assert any(e["event"] == "history_actor_failed" for e in logs)
        assert all(e["log_level"] == "error" for e in logs if "failed" in e["event"])
        assert call_in_thread(lambda: idle.append(Message.user("two"))) == 2
        assert call_in_thread(lambda: busy.append(Message.user("after"))) == 25
        assert host._owner("busy") is not dead
    report = verify(tmp_path / "db")
    assert report.ok, report


def test_close_fails_every_waiting_caller(tmp_path: Path) -> None:
    """Callers queued behind a compaction that waits for a hung summariser get
    HostClosedError from close(); none of them waits forever."""
    release = threading.Event()

    def summarizer(request: SummaryRequest) -> str:
        release.wait(GUARD)
        return "summary"

    config = Config(context_window=2000, compression_threshold=0.5, min_retain_rounds=1)
    host = Host.open(tmp_path / "db", config=config, summarizer=summarizer)
    try:
        session = host.session("s")
        for n in range(6):
            session.append(Message.user(f"round {n} " + "u" * 400))
            session.append(Message.assistant("a" * 400))
        errors: list[BaseException] = []

        def call(fn: Callable[[], Any]) -> None:
            try:
                fn()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=call, args=(session.compact,), daemon=True)]
        threads[0].start()
        while not any(type(e).__name__ == "CompactionStarted" for e in _events(host, "s")):
            threads[0].join(0.01)
        for n in range(3):
            thread = threading.Thread(
                target=call, args=(lambda n=n: session.append(Message.user(f"q{n}")),)
            )
            thread.start()
            threads.append(thread)
    finally:
        host.close()
        release.set()
    for thread in threads:
        thread.join(GUARD)
        assert not thread.is_alive()
    assert len(errors) == 4
    assert all(isinstance(error, HostClosedError) for error in errors), errors


def test_a_caller_of_a_closed_host_gets_host_closed(tmp_path: Path) -> None:
    """After close() every call raises HostClosedError at once (never hangs)."""
    host = Host.open(tmp_path / "db")
    session = host.session("s")
    host.close()
    with pytest.raises(HostClosedError):
        call_in_thread(lambda: session.append(Message.user("late")))
    with pytest.raises(CtxLedgerError):
        call_in_thread(lambda: host.session("t"))


def _events(host: Host, session_id: str) -> list[object]:
    return [record.event for record in host.log.read(session_id)]


def test_a_dead_budget_actor_is_logged_and_started_again_on_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The budget actor dies on its first message (a stand-in defect): the death is logged at
    ERROR under ctxledger.*, the next message starts a fresh one, and no request fails (the
    agent is compacted in the foreground instead)."""
    from ctxledger.actors.budget import BudgetActor

    monkeypatch.setattr(BudgetActor, "on_receive", _raise_once(BudgetActor.on_receive))
    config = Config(
        context_window=2000, compression_threshold=0.5, min_retain_rounds=1, prepare_threshold=0.7
    )
    with capture_logs() as logs, Host.open(tmp_path / "db", config=config) as host:
        session = host.session("s")
        compacted = False
        for n in range(40):
            session.append_many(
                [Message.user(f"q{n} " + "q" * 200), Message.assistant(f"a{n} " + "a" * 200)]
            )
            compacted = compacted or session.prepare_step().checkpoint_id is not None
        assert compacted
    events = {e["event"]: e["log_level"] for e in logs}
    assert events.get("actor_failed") == "error"
    assert events.get("actor_restarted") == "error"


def test_a_defect_in_the_budget_rationing_is_logged_and_the_actor_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rationing step that follows each budget message (starting the queued background
    summaries) raises once: it is logged as ``budget_failed``, the actor is not restarted (its
    memo of every session's pressure is kept), background summaries still start, and
    ``wait_background`` returns."""
    from ctxledger.actors.budget import BudgetActor

    monkeypatch.setattr(BudgetActor, "_start", _raise_once(BudgetActor._start))
    config = Config(
        context_window=2000, compression_threshold=0.5, min_retain_rounds=1, prepare_threshold=0.7
    )
    with capture_logs() as logs, Host.open(tmp_path / "db", config=config) as host:
        session = host.session("s")
        for n in range(40):
            session.append_many(
                [Message.user(f"q{n} " + "q" * 200), Message.assistant(f"a{n} " + "a" * 200)]
            )
            session.prepare_step()
        call_in_thread(session.wait_background)
        kinds = {type(event).__name__ for event in _events(host, "s")}
    assert "SummaryPrepared" in kinds
    events = {e["event"] for e in logs}
    assert "budget_failed" in events
    assert not events & {"actor_failed", "actor_restarted"}
