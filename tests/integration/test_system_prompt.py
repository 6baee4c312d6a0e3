"""``Host.session(id, system=...)``: the system prompt is stated once, set-up is idempotent."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ctxledger import (
    Config,
    Host,
    InvalidMessageError,
    Message,
    SystemPromptMismatchError,
)
from ctxledger.events import ConfigChanged, MessageAppended
from ctxledger.storage import LmdbEventLog

PROMPT = "You are a careful coding agent."


def test_the_prompt_is_appended_to_a_new_session_only(tmp_path: Path) -> None:
    """Running the same set-up twice (two processes' worth of hosts) leaves one system message
    at the head of the conversation."""
    for task in ("Fix the failing test", "Add a regression test"):
        with Host.open(tmp_path / "db") as host:
            session = host.session("agent", system=PROMPT)
            session.append(Message.user(task))
            session.append(Message.assistant("done"))
            session.prepare_step()
    with Host.open(tmp_path / "db") as host:
        history = host.session("agent").history()
        view = host.session("agent", system=PROMPT).build_model_view()
    assert [m.role for m in history] == ["system", "user", "assistant", "user", "assistant"]
    assert [m.role for m in view.messages].count("system") == 1
    assert view.messages[0] == history[0] and history[0].content == PROMPT


def test_another_prompt_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    """A different prompt for a session that began with one raises, naming both."""
    with Host.open(tmp_path / "db") as host:
        host.session("agent", system=PROMPT).append(Message.user("hi"))
        before = len(_events_of(host, "agent"))
        with pytest.raises(SystemPromptMismatchError, match="careful coding agent") as refused:
            host.session("agent", system="You are a poet.")
        assert (refused.value.recorded, refused.value.given) == (PROMPT, "You are a poet.")
        assert len(_events_of(host, "agent")) == before
        assert [m.role for m in host.session("agent").history()] == ["system", "user"]


def test_a_session_that_began_without_a_prompt_refuses_one(tmp_path: Path) -> None:
    """A conversation under way without a system prompt is not given one in its middle."""
    with Host.open(tmp_path / "db") as host:
        host.session("agent").append(Message.user("hi"))
        with pytest.raises(SystemPromptMismatchError, match="began without a system prompt"):
            host.session("agent", system=PROMPT)
        assert [m.role for m in host.session("agent").history()] == ["user"]


def test_a_cleared_conversation_takes_the_prompt_again(tmp_path: Path) -> None:
    """After clear() the conversation is empty again: the prompt heads the new one."""
    with Host.open(tmp_path / "db") as host:
        session = host.session("agent", system=PROMPT)
        session.append(Message.user("hi"))
        session.clear()
        host.session("agent", system=PROMPT)
        session.append(Message.user("again"))
        view = session.build_model_view()
    assert [(m.role, m.content) for m in view.messages] == [("system", PROMPT), ("user", "again")]


def test_a_new_config_and_the_prompt_are_one_batch(tmp_path: Path) -> None:
    """With a changed Config the prompt is recorded in the same atomic batch."""
    with Host.open(tmp_path / "db") as host:
        host.session("agent")
        host.session("agent", config=Config(context_window=9_000), system=PROMPT)
    with LmdbEventLog.open(tmp_path / "db", readonly=True) as log:
        records = log.read("agent")
    changed, appended = records[-2], records[-1]
    assert isinstance(changed.event, ConfigChanged) and isinstance(appended.event, MessageAppended)
    assert changed.position + 1 == appended.position and appended.event.message.content == PROMPT


def test_asession_states_the_prompt_too(tmp_path: Path) -> None:
    """The async twin appends and checks the same way."""

    async def main(host: Host) -> None:
        await host.asession("agent", system=PROMPT)
        await host.asession("agent", system=PROMPT)
        with pytest.raises(SystemPromptMismatchError):
            await host.asession("agent", system="other")

    with Host.open(tmp_path / "db") as host:
        asyncio.run(main(host))
        assert [m.content for m in host.session("agent").history()] == [PROMPT]


def test_a_prompt_that_is_no_text_is_refused(tmp_path: Path) -> None:
    """A prompt that is not a string fails before anything is sent to the session."""
    with Host.open(tmp_path / "db") as host:
        with pytest.raises(InvalidMessageError):
            host.session("agent", system=42)  # type: ignore[arg-type]
        assert host.sessions() == []


def _events_of(host: Host, session_id: str) -> list[object]:
    return [record.event for record in host.log.read(session_id)]
