"""The middleware's conversion of views: each view converts only what is new, and gives
exactly what converting it afresh gives, across compactions (where a view stops beginning with
the last one) and system messages late in a view."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ctxledger import Config, Host, Message
from ctxledger.integrations import langchain as lc
from ctxledger.tooling.workload import iter_agent_steps

CONFIG = Config(context_window=6000, compression_threshold=0.8, min_retain_rounds=2)


def _dumped(messages: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(type(m).__name__, m.model_dump()) for m in messages]


def test_consecutive_views_convert_what_is_new_and_equal_a_fresh_conversion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    converted: list[int | None] = []
    real = lc.from_message

    def counted(message: Message) -> Any:
        converted.append(message.seq)
        return real(message)

    monkeypatch.setattr(lc, "from_message", counted)
    with Host.open(tmp_path / "db", config=CONFIG) as host:
        session = host.session("s")
        ledger = lc._Ledger(session)
        checkpoints: set[str | None] = set()
        late_system = False
        extended = 0
        previous: Any = None
        for index, step in enumerate(iter_agent_steps(3, steps=60)):
            if index == 30:
                step = [*step, Message.system("From now on, answer in French.")]
            view = session.step(step)
            checkpoints.add(view.checkpoint_id)
            before = len(converted)
            got = ledger.convert(session, view.messages)
            made = len(converted) - before
            if previous is not None and view.messages[: len(previous.messages)] == (
                previous.messages
            ):
                # Only the messages the last view did not have were converted (a late system
                # message is sent as a user message, without from_message).
                new = view.messages[len(previous.messages) :]
                assert made == sum(m.role != "system" for m in new)
                extended += 1
            fresh = lc._Ledger(session).convert(session, view.messages)
            assert _dumped(got) == _dumped(fresh)
            late_system = late_system or any(
                m.role == "system" and type(c).__name__ == "HumanMessage"
                for m, c in zip(view.messages, got, strict=True)
            )
            previous = view
    assert len(checkpoints) >= 3  # the views were compacted more than once
    assert extended >= 20  # most views began with the whole of the last one
    assert late_system  # a system message after the conversation began was sent as a user one
