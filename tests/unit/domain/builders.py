"""Builders shared by the domain unit tests."""

from __future__ import annotations

from typing import Any

import msgspec

from ctxledger import Checkpoint, Config, Message, ToolCall
from ctxledger.config import upcast_config
from ctxledger.testing import DomainSession


def session(*messages: Message, summarizer: Any = None, **config: Any) -> DomainSession:
    """A DomainSession with ``config`` holding ``messages``."""
    built = DomainSession(Config(**config), summarizer=summarizer)
    built.extend(messages)
    return built


def recorded(**fields: Any) -> Config:
    """A Config as a release before the two marks recorded it: schema 3, one mark, the floor
    guard and the gain rule as given (the fields it lacks take the values it meant)."""
    fields.pop("compaction_target", None)
    return msgspec.convert(upcast_config(fields), Config)


def recorded_session(*messages: Message, summarizer: Any = None, **config: Any) -> DomainSession:
    """A DomainSession under :func:`recorded` ``(**config)`` holding ``messages``."""
    built = DomainSession(recorded(**config), summarizer=summarizer)
    built.extend(messages)
    return built


def call(call_id: str, name: str = "bash", arguments: str = '{"command": "ls"}') -> ToolCall:
    """A tool call."""
    return ToolCall(call_id, name, arguments)


def step(call_id: str, output: str, *, name: str = "bash", text: str = "") -> list[Message]:
    """An assistant message with one tool call, then its result."""
    return [Message.assistant(text, [call(call_id, name)]), Message.tool(output, call_id, name)]


def rounds(count: int, *, user: str = "u", reply: str = "a") -> list[Message]:
    """``count`` rounds of one user message and one assistant reply each."""
    out: list[Message] = []
    for index in range(count):
        out += [Message.user(f"{user}{index}"), Message.assistant(f"{reply}{index}")]
    return out


def checkpoint(
    retain_from: int, summary: str = "SUMMARY", *, reason: str = "manual", cid: str = "cp1"
) -> Checkpoint:
    """A checkpoint retaining from ``retain_from`` and covering everything before it."""
    return Checkpoint(
        id=cid,
        summary=summary,
        retain_from_seq=retain_from,
        covers_through_seq=retain_from - 1,
        reason=reason,  # type: ignore[arg-type]  # a CheckpointReason
    )
