"""Checks of public arguments shared by every layer that takes them (the host and its
sessions, the testing kit, the offline replay functions), so that the same mistake raises the
same ``ctxledger`` error everywhere.

They are cheap (an ``isinstance``; text is encoded only when it is not ASCII and is about to
be recorded).
"""

from __future__ import annotations

from ctxledger.config import Config
from ctxledger.errors import ConfigError, InvalidArgumentError, InvalidSeqError

__all__ = [
    "check_callable",
    "check_config",
    "check_count",
    "check_flag",
    "check_limit",
    "check_seconds",
    "check_seq",
    "check_text",
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
        expected = "True, False or None" if optional else "True or False"
        raise InvalidArgumentError(name, f"must be {expected}, got {value!r}")


def check_callable(name: str, value: object, *, optional: bool = False) -> None:
    """Check that ``value`` can be called (or is None if ``optional``).

    Raises:
        InvalidArgumentError: It cannot.
    """
    if not callable(value) and not (optional and value is None):
        expected = "callable or None" if optional else "callable"
        raise InvalidArgumentError(name, f"must be {expected}, got {type(value).__name__}")


def check_limit(limit: object) -> None:
    """Check a ``limit`` argument: None or a non-negative int.

    Raises:
        InvalidArgumentError: It is neither.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise InvalidArgumentError(
            "limit", f"must be a non-negative integer or None, got {limit!r}"
        )
