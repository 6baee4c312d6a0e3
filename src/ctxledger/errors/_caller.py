"""Errors caused by the caller: bad input, a closed host, a cap or a window reached.

Re-exported by :mod:`ctxledger.errors`; import them from there.
"""

from __future__ import annotations

import os
from pathlib import Path

from ctxledger.errors._base import CtxLedgerError

__all__ = [
    "BudgetExceededError",
    "ConfigError",
    "ContextOverflowError",
    "HostClosedError",
    "InternalError",
    "InvalidArgumentError",
    "InvalidCheckpointError",
    "InvalidMessageError",
    "InvalidQueryError",
    "InvalidSeqError",
    "InvalidSessionIdError",
    "InvalidToolCallError",
    "InvalidUsageError",
    "SessionExistsError",
    "SystemPromptMismatchError",
    "TraceFormatError",
    "UnknownSessionError",
]


class InvalidMessageError(CtxLedgerError, ValueError):
    """Raised when a message (or another event) is malformed or does not fit the session's history.

    Examples: an unknown role, a tool message without ``tool_call_id``, tool-call arguments that
    are not a JSON object string, text that is not valid UTF-8 (a lone surrogate), metadata that
    cannot be encoded, a tool result answering no open tool call, or an event the log refuses to
    store. Nothing is written, and no other caller's append fails because of it.

    Attributes:
        field: The offending field when one is to blame (``"content"``,
            ``"tool_calls[0].id"``, ``"metadata"``, ...), else None.
        limit: The rule it breaks (``"valid UTF-8"``, ``"encodable as msgpack"``, ...), else
            None.
    """

    def __init__(self, message: str, *, field: str | None = None, limit: str | None = None):
        super().__init__(message)
        self.field = field
        self.limit = limit


class InvalidSessionIdError(CtxLedgerError, ValueError):
    """Raised when a session id cannot be stored, before anything is queued or written.

    A session id is a non-empty string of at most
    :data:`~ctxledger.storage.MAX_SESSION_ID_BYTES` bytes of UTF-8, without a NUL character and
    without a lone surrogate (see :func:`~ctxledger.storage.check_session_id`).

    Attributes:
        field: Always ``"session_id"``.
        limit: The rule the id breaks, e.g. ``"at most 255 bytes of UTF-8"``.
    """

    def __init__(self, message: str, *, limit: str | None = None) -> None:
        super().__init__(message)
        self.field = "session_id"
        self.limit = limit


class InvalidArgumentError(CtxLedgerError, TypeError, ValueError):
    """Raised when an argument of a public call has the wrong type or value and no more specific
    error applies (say ``compact(focus=123)``, or text with a lone surrogate); nothing is written.

    It is both a ``TypeError`` and a ``ValueError``, so code that caught either keeps working.

    Attributes:
        argument: The name of the offending parameter (``"focus"``, ``"pending"``, ...).
    """

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(f"{argument}: {message}")
        self.argument = argument

    def __reduce__(self) -> tuple[type[InvalidArgumentError], tuple[str, str]]:
        # The constructor differs from ``args``; keep the error picklable.
        return (type(self), (self.argument, str(self).removeprefix(f"{self.argument}: ")))


class InvalidSeqError(CtxLedgerError, ValueError):
    """Raised when a seq names no message of the session (for example ``pin`` or ``view_at``)."""


class InvalidCheckpointError(CtxLedgerError, ValueError):
    """Raised when a checkpoint id names no checkpoint of the session, or one cannot be reverted.

    A revert undoes the active checkpoint once: reverting a checkpoint that is not the active
    one, the checkpoint a revert made active again, or the session's first checkpoint (there is
    none before it) raises this. Nothing is written.
    """


class InvalidQueryError(CtxLedgerError, ValueError):
    """Raised when a recall query is not text or its ``limit`` is out of range."""


class InvalidToolCallError(CtxLedgerError, ValueError):
    """Raised when a tool call names no ctxledger tool or its arguments are not valid for it.

    ``Session.call_tool`` raises it; a host answers the model's call with ``str(error)`` as the
    tool result, so the model can correct its call.
    """


class InvalidUsageError(CtxLedgerError, ValueError):
    """Raised when a usage figure given to ``record_usage`` is not a usage report.

    A count is negative, not an integer, or the object has none of the fields of an OpenAI or
    an Anthropic usage object. Nothing is recorded.
    """


class TraceFormatError(InvalidMessageError):
    """Raised when a line of a trace file (the ../shared/traces JSONL format) is malformed.

    ``path`` and ``line`` (1-based) name the offending line, ``reason`` says what is wrong; the
    message reads ``"<path>:<line>: <reason>"`` so editors and terminals can jump to it.
    """

    def __init__(self, path: str | os.PathLike[str], line: int, reason: str) -> None:
        super().__init__(f"{os.fspath(path)}:{line}: {reason}")
        self.path = Path(path)
        self.line = line
        self.reason = reason

    def __reduce__(self) -> tuple[type[TraceFormatError], tuple[Path, int, str]]:
        # The keyword-free constructor differs from ``args``; keep the error picklable.
        return (type(self), (self.path, self.line, self.reason))


class ConfigError(CtxLedgerError, ValueError):
    """Raised when a configuration value is invalid; ``field`` names the offending setting."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"invalid config value for {field!r}: {message}")
        self.field = field


class UnknownSessionError(CtxLedgerError, KeyError):
    """Raised when a session id is not present in the log."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the plain message
        return str(self.args[0]) if self.args else "unknown session"


class SessionExistsError(CtxLedgerError, ValueError):
    """Raised when creating a session (for example a fork) whose id is already taken."""


class HostClosedError(CtxLedgerError, RuntimeError):
    """Raised when a closed host or one of its sessions is used."""


class InternalError(CtxLedgerError, RuntimeError):
    """Raised when ctxledger itself failed while carrying out a request: a defect, logged at
    ERROR under ``ctxledger.*`` with its traceback (please report it).

    The request fails alone, as if it had never been made: other requests, of this session and
    of every other, go on, and the session's state is reloaded from its log before its next
    request. ``__cause__`` is the original exception.
    """


class ContextOverflowError(CtxLedgerError, RuntimeError):
    """Raised when reactive compaction cannot shrink the view after ``max_reactive_retries``,
    or when the part of the view no compaction can shrink is larger than the window."""


class SystemPromptMismatchError(CtxLedgerError, ValueError):
    """Raised when ``Host.session(id, system=...)`` names a system prompt other than the one
    the session's conversation began with (or it began without one); nothing is written.

    Attributes:
        session_id: The session.
        recorded: The system prompt the conversation began with, or None.
        given: The system prompt that was passed.
    """

    def __init__(self, session_id: str, recorded: str | None, given: str) -> None:
        began = (
            f"began with another system prompt ({_clip(recorded)!r})"
            if recorded is not None
            else "began without a system prompt"
        )
        super().__init__(
            f"session {session_id!r} {began}, not {_clip(given)!r}: a session keeps the system "
            "prompt it was created with; use a new session id for a new prompt"
        )
        self.session_id = session_id
        self.recorded = recorded
        self.given = given


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class BudgetExceededError(CtxLedgerError, RuntimeError):
    """Raised when a session's cumulative tokens reached ``Config.max_total_tokens``.

    ``prepare_step`` raises it instead of serving a view; a new Config with a higher cap (or 0)
    lets the session go on.

    Attributes:
        session_id: The session.
        cap: The cap in force (``Config.max_total_tokens``).
        total: The session's cumulative tokens (input and output) when it was reached.
    """

    def __init__(self, session_id: str, cap: int, total: int) -> None:
        super().__init__(
            f"session {session_id!r} has used {total:,} tokens, which reaches its cap "
            f"max_total_tokens={cap:,}; record a Config with a higher cap to go on"
        )
        self.session_id = session_id
        self.cap = cap
        self.total = total
