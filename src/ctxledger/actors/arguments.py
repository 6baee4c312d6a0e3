"""Checks of the public arguments of :class:`Host` and :class:`Session`, at the boundary.

Each runs on the caller's thread before anything is queued, so that a bad argument fails its
own call with a ``ctxledger`` error naming it, and never reaches an actor, the journal or the
log. The generic ones (text, seq, count, seconds, flag, callable, limit, config) are
:mod:`ctxledger._arguments`, shared with the replay functions, and re-exported here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ctxledger._arguments import (
    check_callable,
    check_config,
    check_count,
    check_flag,
    check_limit,
    check_seconds,
    check_seq,
    check_text,
)
from ctxledger.actors.recordable import check_recordable
from ctxledger.domain import ReportedUsage, Tokenizer
from ctxledger.domain.commands import AppendMessages, usage_of
from ctxledger.errors import (
    InvalidArgumentError,
    InvalidMessageError,
)
from ctxledger.events import SessionOpened
from ctxledger.messages import Message

__all__ = [
    "append_command",
    "check_callable",
    "check_config",
    "check_count",
    "check_flag",
    "check_host_objects",
    "check_limit",
    "check_seconds",
    "check_seq",
    "check_text",
    "message_batch",
    "usage_report",
]


#: What an iterable of messages must not be: one message, text, or a mapping.
_NOT_A_BATCH = (Message, str, bytes, dict)


def message_batch(messages: Any) -> tuple[Message, ...]:
    """Return ``messages`` (an iterable of :class:`~ctxledger.Message`) as a tuple.

    Raises:
        InvalidMessageError: It is not iterable (or is a single Message, text or a mapping), or
            an item is not a Message.
    """
    if type(messages) is tuple:  # Session.append's own, and a caller's tuple: nothing to copy
        batch = messages
    else:
        if isinstance(messages, _NOT_A_BATCH) or not isinstance(messages, Iterable):
            raise InvalidMessageError(
                f"expected a sequence of Messages, got {type(messages).__name__}"
            )
        try:
            batch = tuple(messages)
        except TypeError as exc:
            raise InvalidMessageError(f"the messages cannot be iterated: {exc}") from None
    for message in batch:
        if not isinstance(message, Message):
            raise InvalidMessageError(f"expected a Message, got {type(message).__name__}")
    return batch


def check_host_objects(objects: dict[str, Any]) -> None:
    """Check the objects ``Host`` and ``Host.open`` are given (before a log is opened).

    The host-level settings are a :class:`~ctxledger.HostOptions`, checked when it is built.

    Raises:
        ConfigError: ``config`` is not None or a Config, or one that cannot be recorded.
        InvalidArgumentError: Another argument has the wrong type.
    """
    config = check_config(objects.get("config"))
    if config is not None:
        check_recordable([SessionOpened(session_id="-", config=config)])
    check_callable("summarizer", objects.get("summarizer"), optional=True)
    tokenizer = objects.get("tokenizer")
    if tokenizer is not None and not isinstance(tokenizer, Tokenizer):
        raise InvalidArgumentError(
            "tokenizer", f"expected a ctxledger Tokenizer, got {type(tokenizer).__name__}"
        )
    check_callable("clock", objects.get("clock"))
    check_callable("id_factory", objects.get("id_factory"), optional=True)


def usage_report(usage: object) -> ReportedUsage | None:
    """``usage=`` of ``append_many`` and ``step`` checked: None, or what ``record_usage(usage)``
    records (from a usage object, a dict of one, a ``ReportedUsage``, or prompt tokens).

    Raises:
        InvalidUsageError: It is no usage report, or a count is invalid.
    """
    return None if usage is None else usage_of(usage).usage


def append_command(batch: tuple[Message, ...], usage: object) -> AppendMessages:
    """The command of ``append_many(batch, usage=usage)`` (the host's and ``DomainSession``'s).

    Raises:
        InvalidUsageError: ``usage`` is no usage report, or a count is invalid.
    """
    return AppendMessages(messages=batch, usage=usage_report(usage))
