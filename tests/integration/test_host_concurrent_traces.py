"""32 sessions replaying real traces at once, with windows small enough to compact often."""

from __future__ import annotations

import threading
from pathlib import Path

import msgspec
import pytest

from ctxledger import Config, ContextOverflowError, Host, Message
from ctxledger.testing import check_floor_refusal, check_view_invariants

CONFIG = Config(context_window=8000, compression_threshold=0.7, min_retain_rounds=2, micro_batch=4)


def agent_steps(messages: list[Message]) -> list[list[Message]]:
    """Split a trace where an agent would call the model: right before each assistant message."""
    steps: list[list[Message]] = [[]]
    for message in messages:
        if message.role == "assistant" and steps[-1]:
            steps.append([])
        steps[-1].append(message)
    return [step for step in steps if step]


def unseq(message: Message) -> Message:
    return msgspec.structs.replace(message, seq=None)


@pytest.mark.slow
def test_32_sessions_replay_traces_concurrently(
    tmp_path: Path, traces: dict[str, list[Message]]
) -> None:
    """Every session's history equals its trace and every served view keeps the invariants."""
    names = sorted(traces)[:32]
    failures: list[BaseException] = []
    compactions: dict[str, int] = {}

    def drive(host: Host, name: str) -> None:
        try:
            session = host.session(name)
            for step in agent_steps(traces[name]):
                session.append_many(step)
                try:
                    view = session.prepare_step()
                except ContextOverflowError as error:
                    # A task statement larger than the 8k window: refused, and it had to be.
                    check_floor_refusal(session._live_state(), error)
                    continue
                check_view_invariants(session.history(), view, CONFIG)
            compactions[name] = len(session.checkpoints())
        except BaseException as exc:  # collected and re-raised in the main thread
            failures.append(exc)

    with Host.open(tmp_path / "db", config=CONFIG) as host:
        threads = [threading.Thread(target=drive, args=(host, name)) for name in names]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            raise failures[0]
        for name in names:
            history = host.session(name).history()
            assert [unseq(m) for m in history] == traces[name], name
            assert [m.seq for m in history] == list(range(1, len(history) + 1))
    assert sum(compactions.values()) > 32, "windows this small must compact often"
