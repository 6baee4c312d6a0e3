"""Checks of the public arguments of :class:`Host` and :class:`Session`, at the boundary.

Each runs on the caller's thread before anything is queued, so that a bad argument fails its
own call with a ``ctxledger`` error naming it, and never reaches an actor, the journal or the
log. They are cheap (an ``isinstance``; text is encoded only when it is not ASCII and is about
to be recorded).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ctxledger.actors.recordable import check_recordable
from ctxledger.config import Config
from ctxledger.domain import Tokenizer
from ctxledger.errors import (
    ConfigError,
    InvalidArgumentError,
    InvalidMessageError,
    InvalidSeqError,
)
from ctxledger.events import SessionOpened
from ctxledger.messages import Message

__all__ = [
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
]


def check_config(value: object, name: str = "config") -> Config | None:
    """Return ``value`` if it is None or a :class:`~ctxledger.Config`.

    Raises:
        ConfigError: It is anything else (a dict, a string, ...); ``field`` is ``name``.
    """
    if value is None or isinstance(value, Config):
        return value
    raise ConfigError(name, f"expected a ctxledger.Config or None, got {type(value).__name__}")


def check_text(name: str, value: object, *, optional: bool = False, utf8: bool = True) -> None:
    """Check that ``value`` is a string (or None if ``optional``) with a UTF-8 encoding.

    ``utf8=False`` skips the encoding check, for text that is measured but never recorded.

    Raises:
        InvalidArgumentError: It is not, or holds a lone surrogate.
    """
    if value is None and optional:
        return
    if not isinstance(value, str):
        expected = "a string or None" if optional else "a string"
        raise InvalidArgumentError(name, f"expected {expected}, got {type(value).__name__}")
    if utf8 and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(
                name, f"not valid UTF-8: lone surrogate {value[exc.start]!r} at index {exc.start}"
            ) from None


def check_seq(session_id: str, seq: object, *, optional: bool = False) -> None:
    """Check that ``seq`` is an int (not a bool), or None if ``optional``.

    Raises:
        InvalidSeqError: It is not.
    """
    if seq is None and optional:
        return
    if isinstance(seq, bool) or not isinstance(seq, int):
        raise InvalidSeqError(f"session {session_id!r} has no message with seq {seq!r}")


def check_count(name: str, value: object, minimum: int = 1) -> int:
    """Return ``value`` if it is an int (not a bool) of at least ``minimum``.

    Raises:
        InvalidArgumentError: It is not.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise InvalidArgumentError(name, f"must be {what}, got {value!r}")
    return value


def check_seconds(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a positive finite number of seconds.

    Raises:
        InvalidArgumentError: It is not.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value < float("inf")
    ):
        raise InvalidArgumentError(name, f"must be a positive number of seconds, got {value!r}")
    return float(value)


def check_flag(name: str, value: object, *, optional: bool = False) -> None:
    """Check that ``value`` is a bool (or None if ``optional``).

    Raises:
        InvalidArgumentError: It is not.
    """
    if not isinstance(value, bool) and not (optional and value is None):
        raise InvalidArgumentError(name, f"must be True or False, got {value!r}")


def check_callable(name: str, value: object, *, optional: bool = False) -> None:
    """Check that ``value`` can be called (or is None if ``optional``).

    Raises:
        InvalidArgumentError: It cannot.
    """
    if not callable(value) and not (optional and value is None):
        raise InvalidArgumentError(name, f"must be callable, got {type(value).__name__}")


def check_limit(limit: object) -> None:
    """Check a ``limit`` argument: None or a non-negative int.

    Raises:
        InvalidArgumentError: It is neither.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise InvalidArgumentError(
            "limit", f"must be a non-negative integer or None, got {limit!r}"
        )


def message_batch(messages: Any) -> tuple[Message, ...]:
    """Return ``messages`` (an iterable of :class:`~ctxledger.Message`) as a tuple.

    Raises:
        InvalidMessageError: It is not iterable (or is a single Message, text or a mapping), or
            an item is not a Message.
    """
    if isinstance(messages, Message | str | bytes | dict) or not isinstance(messages, Iterable):
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
