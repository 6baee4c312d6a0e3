"""Checks of the arguments of the public replay functions, run before anything is opened.

A wrong argument fails its own call with a ``ctxledger`` error naming it and the bad value, and
never reaches the log (an ``AttributeError`` deep in a fold), nor opens or creates a folder.
The errors are those ``Host`` and ``Session`` raise for the same mistake (their checks live in
the actors, above replay). Session ids are only type-checked: a stored id an older version
accepted (longer than today's limit, say) must stay readable, and a string no session has is an
:class:`~ctxledger.errors.UnknownSessionError` when the log is read.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable

from ctxledger.config import Config
from ctxledger.domain import Pricing, Tokenizer
from ctxledger.errors import (
    ConfigError,
    InvalidArgumentError,
    InvalidSessionIdError,
)
from ctxledger.storage._paths import check_folder as folder_checked

__all__ = [
    "check_config",
    "check_event_seq",
    "check_folder",
    "check_log",
    "check_pricing",
    "check_read",
    "check_seconds",
    "check_session_id",
    "check_session_ids",
    "check_source",
    "check_tokenizer",
]

# What every event log answers (an EventLog, or a wrapper forwarding to one); duck-typed, since
# a wrapper that forwards through ``__getattr__`` is not an instance of the Protocol on 3.12+.
_LOG_METHODS = ("read", "iter_events", "last_seq")


def _shown(value: object) -> str:
    """``value`` for a message: its type, and its repr cut to a line."""
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'…' if len(text) > 60 else ''}"


def check_read(
    source: object, session_id: object, *, tokenizer: object = None, optional_id: bool = False
) -> None:
    """Check the arguments every offline read takes: where, which session, and how to count.

    Raises:
        InvalidArgumentError: ``source`` is not a folder, a URI or an open event log, or
            ``tokenizer`` is not None or a Tokenizer.
        InvalidSessionIdError: ``session_id`` is not a string (or None, if ``optional_id``).
    """
    check_source(source)
    check_session_id(session_id, optional=optional_id)
    check_tokenizer(tokenizer)


def check_source(source: object) -> None:
    """Check that ``source`` is a folder or URI (see :func:`check_folder`) or an open event log.

    Raises:
        InvalidArgumentError: It is neither.
    """
    if isinstance(source, str | os.PathLike):
        check_folder(source, "source")
    else:
        check_log(source, "source", "a folder, a postgresql:// URI or an open EventLog")


def check_log(log: object, name: str = "log", expected: str = "an open EventLog") -> None:
    """Check that ``log`` is an open event log (it has the methods of one).

    Raises:
        InvalidArgumentError: It is not.
    """
    if not all(callable(getattr(log, method, None)) for method in _LOG_METHODS):
        raise InvalidArgumentError(name, f"expected {expected}, got {_shown(log)}")


def check_folder(path: object, name: str) -> None:
    """Check that ``path`` can name a log's folder (:func:`ctxledger.storage._paths.check_folder`);
    the error names ``name``, the caller's argument.

    Raises:
        InvalidArgumentError: It is another type, empty, or holds a NUL character or a lone
            surrogate (not valid UTF-8).
    """
    folder_checked(path, name)


def check_session_id(session_id: object, *, optional: bool = False) -> None:
    """Check that ``session_id`` is a string (or None if ``optional``).

    Raises:
        InvalidSessionIdError: It is not.
    """
    if isinstance(session_id, str) or (optional and session_id is None):
        return
    expected = "a string or None" if optional else "a string"
    raise InvalidSessionIdError(
        f"session_id must be {expected}, got {_shown(session_id)}", limit="a string"
    )


def check_session_ids(session_ids: object) -> list[str] | None:
    """Return ``session_ids`` (None, or an iterable of session ids) as a list.

    Raises:
        InvalidArgumentError: It is a single string, or not iterable.
        InvalidSessionIdError: An item is not a string.
    """
    if session_ids is None:
        return None
    if isinstance(session_ids, str | bytes) or not isinstance(session_ids, Iterable):
        raise InvalidArgumentError(
            "session_ids", f"expected an iterable of session ids or None, got {_shown(session_ids)}"
        )
    found = list(session_ids)
    for session_id in found:
        check_session_id(session_id)
    return found


def check_config(config: object) -> Config:
    """Return ``config`` if it is a :class:`~ctxledger.Config`.

    Raises:
        ConfigError: It is anything else (None, a dict, ...); ``field`` is ``"config"``.
    """
    if not isinstance(config, Config):
        raise ConfigError("config", f"expected a ctxledger.Config, got {_shown(config)}")
    return config


def check_pricing(pricing: object) -> None:
    """Check that ``pricing`` is a :class:`~ctxledger.domain.Pricing`.

    Raises:
        InvalidArgumentError: It is not.
    """
    if not isinstance(pricing, Pricing):
        raise InvalidArgumentError(
            "pricing", f"expected a ctxledger Pricing, got {_shown(pricing)}"
        )


def check_tokenizer(tokenizer: object) -> None:
    """Check that ``tokenizer`` is None or a :class:`~ctxledger.domain.Tokenizer`.

    Raises:
        InvalidArgumentError: It is neither.
    """
    if tokenizer is not None and not isinstance(tokenizer, Tokenizer):
        raise InvalidArgumentError(
            "tokenizer", f"expected a ctxledger Tokenizer or None, got {_shown(tokenizer)}"
        )


def check_seconds(name: str, value: object) -> None:
    """Check that ``value`` is None or a finite number of seconds, 0 or more.

    Raises:
        InvalidArgumentError: It is not (a bool, a string, negative, NaN or infinite).
    """
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and not math.isfinite(value))
        or value < 0
    ):
        raise InvalidArgumentError(
            name, f"must be a finite number of seconds >= 0 or None, got {_shown(value)}"
        )


def check_event_seq(name: str, value: object) -> None:
    """Check that ``value`` is None or an event seq bound: an int (not a bool), 0 or more.

    Raises:
        InvalidArgumentError: It is not.
    """
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise InvalidArgumentError(
            name, f"must be an integer >= 0 (an event seq) or None, got {_shown(value)}"
        )
