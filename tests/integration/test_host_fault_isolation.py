"""The issue's scenario through the public API: agents appending beside a misbehaving client."""

from __future__ import annotations

import threading
from pathlib import Path

from ctxledger import Host, InvalidMessageError, InvalidSessionIdError, Message


def test_agents_never_see_an_error_caused_by_another_clients_bad_sessions(
    tmp_path: Path,
) -> None:
    """16 agents append while another thread opens sessions with 600-character ids and appends
    lone surrogates: every agent append succeeds, every bad request raises its named error,
    and after a restart the log holds exactly the agents' messages."""
    agents, steps = 16, 20
    errors: list[BaseException] = []
    refused: list[BaseException] = []
    done = threading.Event()
    with Host.open(tmp_path / "db") as host:

        def agent(index: int) -> None:
            session = host.session(f"agent-{index}")
            for step in range(steps):
                try:
                    session.append(Message.user(f"step {step} of agent {index}"))
                except BaseException as exc:
                    errors.append(exc)

        def spoiler() -> None:
            count = 0
            while not done.is_set() or count < 2:
                try:
                    if count % 2:
                        host.session("agent-0").append(Message.user("bad \ud800 text"))
                    else:
                        host.session(f"{count:06d}" + "x" * 594)
                except BaseException as exc:
                    refused.append(exc)
                count += 1

        threads = [threading.Thread(target=agent, args=(index,)) for index in range(agents)]
        bad = threading.Thread(target=spoiler)
        bad.start()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        done.set()
        bad.join()
    assert errors == []
    assert refused and all(
        isinstance(exc, InvalidSessionIdError | InvalidMessageError) for exc in refused
    )
    with Host.open(tmp_path / "db") as host:
        assert sorted(host.sessions()) == sorted(f"agent-{index}" for index in range(agents))
        for index in range(agents):
            history = host.session(f"agent-{index}").history()
            assert [m.content for m in history] == [
                f"step {step} of agent {index}" for step in range(steps)
            ]
