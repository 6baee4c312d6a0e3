"""Errors of the storage and of stored data: the backend failed, or a record cannot be read.

Re-exported by :mod:`ctxledger.errors`; import them from there.
"""

from __future__ import annotations

import os

from ctxledger.errors._base import CtxLedgerError

__all__ = [
    "CorruptRecordError",
    "EventDecodeError",
    "LogLockedError",
    "StorageError",
    "UnknownEventTypeError",
]


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
