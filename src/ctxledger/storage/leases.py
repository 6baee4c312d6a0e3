"""Session leases with fencing: which host serves a session, checked by the log on every append.

Several hosts may share one database (:class:`~ctxledger.storage.PostgresEventLog`); each session
is served by one host at a time. A host takes a session's lease with :meth:`LeaseStore.
acquire_lease`, keeps it alive with :meth:`~LeaseStore.renew_lease` well within its ``ttl``, and
gives it up with :meth:`~LeaseStore.release_lease`. Every successful acquisition bumps the
session's *epoch* (epochs of a session only ever grow, a release keeps them), and an append that
passes its lease as ``fence=`` commits only if that lease's host and epoch are still the
session's, checked inside the append's own transaction: a host that was paused or cut off until
another host took over fails its next append with :class:`~ctxledger.errors.LeaseLostError` and
writes nothing, even if it never noticed that its lease expired.

A lease expires ``ttl`` seconds after it was last acquired or renewed, by the clock of the store
(the database server's clock for PostgreSQL, so hosts' clocks need not agree). An expired lease
that nobody took over is still valid for fencing: the epoch, not the clock, decides. Appends
without ``fence`` are not checked; a host on a shared database passes its lease on every append.

Leases are an optional capability, a protocol of their own rather than part of
:class:`~ctxledger.storage.EventLog`: the PostgreSQL log and the in-memory reference implement
it; the LMDB log does not (a folder is served by the one host whose disk holds it, so there is
no other host to fail over to).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import msgspec

from ctxledger.errors import InvalidArgumentError
from ctxledger.events.types import Event
from ctxledger.storage.protocol import AppendCallback, EventLog, RecordedEvent

__all__ = ["DEFAULT_LEASE_TTL", "Lease", "LeaseStore", "check_lease_request"]

#: Seconds a lease lasts unless renewed (the runtime renews it in the background).
DEFAULT_LEASE_TTL = 10.0


class Lease(msgspec.Struct, frozen=True, kw_only=True):
    """A host's lease on a session, as the store granted or last renewed it.

    Attributes:
        session_id: The session.
        host_id: The host that holds it.
        epoch: The fencing token: 1 for the session's first lease, one more on every takeover.
        expires_at: Unix time, by the store's clock, at which the lease expires unless renewed.
    """

    session_id: str
    host_id: str
    epoch: int
    expires_at: float


def check_lease_request(session_id: str, host_id: str, ttl: float) -> None:
    """Validate the arguments of :meth:`LeaseStore.acquire_lease` and ``renew_lease``.

    Raises:
        InvalidArgumentError: An argument has the wrong type, an id is empty, or ``ttl`` is not
            a finite number of seconds above 0; ``argument`` names it (a ``TypeError`` and a
            ``ValueError``, as before).
    """
    for name, value in (("session_id", session_id), ("host_id", host_id)):
        if not isinstance(value, str):
            raise InvalidArgumentError(name, f"must be a string, got {type(value).__name__}")
        if not value:
            raise InvalidArgumentError(name, "must not be empty")
    if isinstance(ttl, bool) or not isinstance(ttl, int | float):
        raise InvalidArgumentError("ttl", f"must be a number of seconds, got {ttl!r}")
    if not 0 < ttl < math.inf:
        raise InvalidArgumentError("ttl", f"must be a finite number of seconds > 0, got {ttl}")


@runtime_checkable
class LeaseStore(EventLog, Protocol):
    """An event log that grants session leases and fences appends with them (see the module
    doc)."""

    def acquire_lease(
        self,
        session_id: str,
        host_id: str,
        ttl: float = DEFAULT_LEASE_TTL,
        *,
        wait: float = 0.0,
    ) -> Lease:
        """Take the session's lease for ``host_id``, with a new epoch.

        Succeeds at once if the session has no lease, if its lease expired, or if ``host_id``
        already holds it (a host id names one running host: give each process its own).
        Otherwise waits up to ``wait`` seconds for the holder to release it or let it expire.

        Raises:
            LeaseHeldError: Another host still holds the lease after ``wait`` seconds.
            StorageError: The store failed.
        """
        ...

    def renew_lease(self, lease: Lease, ttl: float = DEFAULT_LEASE_TTL) -> Lease:
        """Extend ``lease`` to ``ttl`` seconds from now; its epoch stays.

        Raises:
            LeaseLostError: Another host took the session over since ``lease`` was granted.
            StorageError: The store failed.
        """
        ...

    def renew_leases(
        self, leases: Sequence[Lease], ttl: float = DEFAULT_LEASE_TTL
    ) -> list[Lease | None]:
        """:meth:`renew_lease` for many leases at once (one round trip on PostgreSQL).

        Returns:
            For each lease, in order, the renewed lease, or None where another host took the
            session over since it was granted.

        Raises:
            ValueError: Two leases name the same session.
            StorageError: The store failed (no lease was renewed).
        """
        ...

    def release_lease(self, lease: Lease) -> None:
        """Give ``lease`` up: the next :meth:`acquire_lease` by any host succeeds at once.

        Releasing a lease that was already taken over does nothing.
        """
        ...

    def current_lease(self, session_id: str) -> Lease | None:
        """Return the session's lease as recorded now (possibly expired), or None."""
        ...

    def append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        fence: Lease | None = None,
    ) -> list[RecordedEvent]:
        """:meth:`EventLog.append`; with ``fence``, only while that lease is the session's.

        Raises:
            LeaseLostError: ``fence`` is no longer the session's lease; nothing is written.
            ValueError: ``fence`` names another session.
        """
        ...

    async def aappend(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        fence: Lease | None = None,
    ) -> list[RecordedEvent]:
        """:meth:`append` for a caller on an event loop."""
        ...

    def submit(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        callback: AppendCallback,
        fence: Lease | None = None,
    ) -> None:
        """:meth:`EventLog.submit`; with ``fence``, only while that lease is the session's."""
        ...
