"""Views served one after another by a compacting session, for the tests of the framework
drop-ins' conversions (each converts only what a view adds to the last one)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxledger import Config, Host, Message, ModelView, Session
from ctxledger.tooling.workload import iter_agent_steps

CONFIG = Config(context_window=6000, compression_threshold=0.8, min_retain_rounds=2)
LATE_SYSTEM = "From now on, answer in French."


def counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int | None]:
    """Replace ``module.name`` (a function of one message) by one that notes each message's
    seq in the list returned."""
    seen: list[int | None] = []
    real = getattr(module, name)

    def counted(message: Message) -> Any:
        seen.append(message.seq)
        return real(message)

    monkeypatch.setattr(module, name, counted)
    return seen


def views(tmp_path: Path, seed: int, steps: int = 60) -> Iterator[tuple[Session, ModelView]]:
    """One view per agent step of a session that compacts several times, with a system
    message late in the conversation (after step 30)."""
    with Host.open(tmp_path / "db", config=CONFIG) as host:
        session = host.session("s")
        for index, step in enumerate(iter_agent_steps(seed, steps=steps)):
            if index == 30:
                step = [*step, Message.system(LATE_SYSTEM)]
            yield session, session.step(step)


def new_part(view: ModelView, previous: ModelView | None) -> tuple[Message, ...] | None:
    """What ``view`` adds to ``previous`` when it begins with the whole of it, else None."""
    if previous is None or view.messages[: len(previous.messages)] != previous.messages:
        return None
    return view.messages[len(previous.messages) :]
