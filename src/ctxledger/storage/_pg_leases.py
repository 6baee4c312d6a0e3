"""The ``leases`` table of a PostgreSQL event log: session leases judged by the server's clock.

Epochs only grow: a takeover bumps the epoch, a release only expires the lease (``expires_at =
-infinity``), so a lease granted long ago can never become valid again. The fence check of an
append is in the writer's transaction (:mod:`ctxledger.storage._pg_writer`), not here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from ctxledger.errors import LeaseHeldError, LeaseLostError
from ctxledger.storage._pg_connect import Reader
from ctxledger.storage._pg_schema import Statements
from ctxledger.storage.leases import Lease

__all__ = ["LeaseTable"]

_POLL = 0.25  # seconds between attempts to take a lease another host holds
LOCK_WAIT = "2s"  # longest wait for a row lock before looking for a stalled writer


class LeaseTable:
    """Grants, renews and releases leases; see :class:`~ctxledger.storage.LeaseStore`.

    Args:
        reader: The log's connections (each statement commits on its own).
        statements: The log's SQL.
        reap: Ends the transactions of writers stalled inside a pipeline (which hold the lease
            rows of their sessions); called when taking a lease waited :data:`LOCK_WAIT` for a
            row lock.
    """

    def __init__(
        self, reader: Reader, statements: Statements, reap: Callable[[], int] = lambda: 0
    ) -> None:
        self._reader = reader
        self._sql = statements
        self._reap = reap

    def acquire(self, session_id: str, host_id: str, ttl: float, wait: float) -> Lease:
        """Take the lease if it is free, expired or the host's; else wait up to ``wait`` s.

        Raises:
            LeaseHeldError: Another host still holds it after ``wait`` seconds.
        """
        deadline = time.monotonic() + wait
        while True:
            rows = self._reader.run(lambda cur: self._try_acquire(cur, session_id, host_id, ttl))
            if rows is None:
                # The lease row stayed locked: by a host paused inside a group transaction,
                # if the wait was not just contention. End such transactions and try again.
                self._reap()
                if time.monotonic() < deadline:
                    continue
                rows = []
            if rows:
                epoch, expires_at = rows[0]
                return Lease(
                    session_id=session_id, host_id=host_id, epoch=epoch, expires_at=expires_at
                )
            held = self._reader.rows(self._sql.current_lease, [session_id])
            if not held:
                continue  # released and removed in between: try again
            holder, epoch, _, left = held[0]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LeaseHeldError(session_id, holder, epoch, left)
            time.sleep(max(0.001, min(left, remaining, _POLL)))

    def _try_acquire(
        self, cur: psycopg.Cursor[Any], session_id: str, host_id: str, ttl: float
    ) -> list[Any] | None:
        """Run the take-over statement, waiting at most :data:`LOCK_WAIT` for the row; None if
        the wait ran out."""
        try:
            with cur.connection.transaction():
                cur.execute(self._sql.lock_wait, [LOCK_WAIT])
                return cur.execute(
                    self._sql.acquire_lease, [session_id, host_id, float(ttl)]
                ).fetchall()
        except psycopg.errors.LockNotAvailable:
            return None

    def renew(self, lease: Lease, ttl: float) -> Lease:
        """Extend ``lease`` to ``ttl`` seconds from now, at its epoch.

        Raises:
            LeaseLostError: Another host took the session over.
        """
        rows = self._reader.rows(
            self._sql.renew_lease, [float(ttl), lease.session_id, lease.host_id, lease.epoch]
        )
        if not rows:
            now = self.current(lease.session_id)
            holder, epoch = (now.host_id, now.epoch) if now is not None else (None, 0)
            raise LeaseLostError(lease.session_id, lease.host_id, lease.epoch, holder, epoch)
        return Lease(
            session_id=lease.session_id,
            host_id=lease.host_id,
            epoch=lease.epoch,
            expires_at=rows[0][0],
        )

    def renew_many(self, leases: Sequence[Lease], ttl: float) -> list[Lease | None]:
        """Renew ``leases`` in one statement; None in place of each one taken over."""
        if not leases:
            return []
        rows = self._reader.rows(
            self._sql.renew_leases,
            [
                float(ttl),
                [lease.session_id for lease in leases],
                [lease.host_id for lease in leases],
                [lease.epoch for lease in leases],
            ],
        )
        renewed = dict(rows)
        return [
            Lease(
                session_id=lease.session_id,
                host_id=lease.host_id,
                epoch=lease.epoch,
                expires_at=renewed[lease.session_id],
            )
            if lease.session_id in renewed
            else None
            for lease in leases
        ]

    def release(self, lease: Lease) -> None:
        """Expire ``lease`` if it is still the session's."""
        self._reader.run(
            lambda cur: cur.execute(
                self._sql.release_lease, [lease.session_id, lease.host_id, lease.epoch]
            )
        )

    def current(self, session_id: str) -> Lease | None:
        """The session's lease as recorded now, or None."""
        rows = self._reader.rows(self._sql.current_lease, [session_id])
        if not rows:
            return None
        holder, epoch, expires_at, _ = rows[0]
        return Lease(session_id=session_id, host_id=holder, epoch=epoch, expires_at=expires_at)
