"""Errors of concurrent writers: a stale expected seq, a lease held or lost.

Re-exported by :mod:`ctxledger.errors`; import them from there.
"""

from __future__ import annotations

from ctxledger.errors._base import CtxLedgerError

__all__ = ["LeaseHeldError", "LeaseLostError", "VersionConflictError"]


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
