"""Every exception ctxledger raises, split by who is at fault.

All of them derive from :class:`CtxLedgerError`. Errors caused by the caller's input co-inherit
``ValueError``; errors of the storage layer co-inherit ``OSError`` only where the meaning fits.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "BudgetExceededError",
    "ConfigError",
    "ContextOverflowError",
    "CorruptRecordError",
    "CtxLedgerError",
    "EventDecodeError",
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
    "LeaseHeldError",
    "LeaseLostError",
    "LogLockedError",
    "SessionExistsError",
    "StorageError",
    "TraceFormatError",
    "UnknownEventTypeError",
    "UnknownSessionError",
    "VersionConflictError",
]


class CtxLedgerError(Exception):
    """Raised for every failure that ctxledger itself detects; the base of all its errors."""


# --- the caller's input -------------------------------------------------------------------------


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


# --- concurrency --------------------------------------------------------------------------------


class VersionConflictError(CtxLedgerError):
    """Raised when an append's expected last seq differs from the session's; nothing is written."""

    def __init__(self, session_id: str, expected: int, actual: int) -> None:
        super().__init__(
            f"session {session_id!r}: expected last seq {expected}, but the log is at {actual}"
        )
        self.session_id = session_id
        self.expected = expected
        self.actual = actual


class LeaseHeldError(CtxLedgerError):
    """Raised when a session's lease is held by another host and was not released in time.

    ``holder`` names the host that holds it, ``epoch`` its epoch, ``expires_in`` the seconds
    left before it expires (by the database's clock) unless its holder renews it, and
    ``process`` the process that took it (``"pid 4242 on build-7"``) when the lease records one.
    """

    def __init__(
        self,
        session_id: str,
        holder: str,
        epoch: int,
        expires_in: float,
        *,
        process: str | None = None,
    ) -> None:
        by = f", {process}" if process else ""
        super().__init__(
            f"session {session_id!r} is served by host {holder!r}{by} (lease epoch {epoch}, "
            f"expires in {max(expires_in, 0.0):.1f} s unless renewed)"
        )
        self.session_id = session_id
        self.holder = holder
        self.epoch = epoch
        self.expires_in = expires_in
        self.process = process


class LeaseLostError(CtxLedgerError):
    """Raised when a host uses a lease that another host has taken over since; nothing is written.

    A host whose lease expired (it was paused, partitioned or too slow to renew) and was taken
    over can no longer append to, renew or release that session: its epoch is stale (fencing).
    ``holder`` and ``epoch`` describe the lease as the log now records it (``holder`` is None if
    the session has no lease).
    """

    def __init__(
        self, session_id: str, host_id: str, epoch: int, holder: str | None, current: int
    ) -> None:
        now = f"host {holder!r} holds epoch {current}" if holder is not None else "no lease"
        super().__init__(
            f"session {session_id!r}: host {host_id!r} lost its lease (epoch {epoch}); "
            f"the log now records {now}"
        )
        self.session_id = session_id
        self.host_id = host_id
        self.epoch = epoch
        self.holder = holder
        self.current = current


# --- storage and stored data --------------------------------------------------------------------


class StorageError(CtxLedgerError, OSError):
    """Raised when the storage backend fails (an ``lmdb.Error`` translated at the boundary)."""


class LogLockedError(StorageError):
    """Raised when a folder's event log is opened for writing while another writer holds it.

    One process writes an LMDB folder at a time (a host is the single writer of its sessions).
    ``path`` names the folder and ``pid`` the process that writes it (``None`` if it could not
    be read); when that is this very process, another open log or ``Host`` on the folder is
    still open. Read-only opens are never refused. The lock is the kernel's: it is released when
    its holder closes the log or dies, so a crashed writer never leaves it behind.
    """

    def __init__(self, path: str, pid: int | None) -> None:
        if pid is None:
            holder = "another process"
        elif pid == os.getpid():
            holder = f"this process (pid {pid}): another open log or Host on it is not closed"
        else:
            holder = f"process {pid}"
        super().__init__(
            f"the event log at {path!r} is being written by {holder}; one process writes a "
            "folder at a time: close that writer first, or open the log read-only"
        )
        self.path = path
        self.pid = pid

    def __reduce__(self) -> tuple[object, tuple[str, int | None]]:
        # The constructor's arguments differ from ``args``; keep the error picklable.
        return (type(self), (self.path, self.pid))


class EventDecodeError(CtxLedgerError, ValueError):
    """Raised when stored bytes cannot be decoded into an event."""


class CorruptRecordError(EventDecodeError):
    """Raised when a stored record fails its checksum or cannot be decoded.

    ``session_id`` and ``seq`` name the position of the damaged record (either may be ``None``
    when the position is unknown, for example when decoding loose bytes, or when the damage is in
    the session's own entry rather than in one of its events); ``seq`` is an *event* seq.
    ``after_message_seq``, where the reader knows it, is the seq of the last message of the
    session that could be read before the damaged record (0: none), so that the damage can be
    placed among the messages that ``ctxledger show`` numbers. ``reason`` is what is wrong.
    """

    def __init__(
        self,
        message: str,
        *,
        session_id: str | None = None,
        seq: int | None = None,
        after_message_seq: int | None = None,
    ):
        where = ""
        if session_id is not None:
            where = f"session {session_id!r}"
            if seq is not None:
                where += f" event seq {seq}"
            if after_message_seq is not None:
                where += f" (after message {after_message_seq})"
            where += ": "
        super().__init__(f"corrupt record: {where}{message}")
        self.session_id = session_id
        self.seq = seq
        self.after_message_seq = after_message_seq
        self.reason = message

    def after_message(self, message_seq: int) -> CorruptRecordError:
        """The same error, placed after message ``message_seq`` (chained to this one)."""
        error = CorruptRecordError(
            self.reason,
            session_id=self.session_id,
            seq=self.seq,
            after_message_seq=message_seq,
        )
        error.__cause__ = self
        return error

    def __reduce__(
        self,
    ) -> tuple[object, tuple[str, str | None, int | None, int | None]]:
        # The keyword-only constructor differs from ``args``; keep the error picklable.
        return (
            _corrupt_record,
            (self.reason, self.session_id, self.seq, self.after_message_seq),
        )


def _corrupt_record(
    reason: str, session_id: str | None, seq: int | None, after_message_seq: int | None = None
) -> CorruptRecordError:
    return CorruptRecordError(
        reason, session_id=session_id, seq=seq, after_message_seq=after_message_seq
    )


class UnknownEventTypeError(EventDecodeError):
    """Raised when a stored event carries a tag that no event type or upcaster knows."""

    def __init__(self, tag: object) -> None:
        super().__init__(
            f"unknown event type tag {tag!r}: "
            "written by a newer ctxledger, or an upcaster is missing"
        )
        self.tag = tag
