"""The ``leases`` table of a PostgreSQL event log: session leases judged by the server's clock.

Epochs only grow: a takeover bumps the epoch, a release only expires the lease (``expires_at =
-infinity``), so a lease granted long ago can never become valid again. The fence check of an
append is in the writer's transaction (:mod:`ctxledger.storage._pg_writer`), not here.

Each lease also records the process that took it (``holder``, see
:mod:`ctxledger.storage._holder`), so that a host restarted on the same machine takes over the
leases of its dead predecessor at once: the take-over names the exact host id and epoch it
found, so it changes nothing if anyone renewed or took the lease in between.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from ctxledger._logging import get_logger
from ctxledger.errors import LeaseHeldError, LeaseLostError
from ctxledger.storage._holder import (
    LeaseHolder,
    decode_holder,
    holder_is_dead,
    this_process,
)
from ctxledger.storage._pg_connect import Reader
from ctxledger.storage._pg_schema import Statements
from ctxledger.storage.leases import Lease

__all__ = ["LeaseTable"]

_log = get_logger(__name__)
_POLL = 0.25  # seconds between attempts to take a lease another host holds
LOCK_WAIT = "2s"  # longest wait for a row lock before looking for a stalled writer

# Take a lease that is free, expired or already the host's; bumps the epoch.
_ACQUIRE = (
    "INSERT INTO {s}.leases AS l (session_id, host_id, epoch, expires_at, holder) "
    "VALUES (%s, %s, 1, clock_timestamp() + make_interval(secs => %s::float8), %s) "
    "ON CONFLICT (session_id) DO UPDATE SET host_id = excluded.host_id, "
    "epoch = l.epoch + 1, expires_at = excluded.expires_at, holder = excluded.holder "
    "WHERE l.expires_at <= clock_timestamp() OR l.host_id = excluded.host_id "
    "RETURNING epoch, extract(epoch FROM expires_at)::float8"
)
# Take over the lease of a holder proven dead, exactly as it was found (host id and epoch).
_TAKE_OVER = (
    "UPDATE {s}.leases SET host_id = %s, epoch = epoch + 1, "
    "expires_at = clock_timestamp() + make_interval(secs => %s::float8), holder = %s "
    "WHERE session_id = %s AND host_id = %s AND epoch = %s "
    "RETURNING epoch, extract(epoch FROM expires_at)::float8"
)
# Holder, epoch, seconds left (server clock; -Infinity once released) and holder process.
_HELD = (
    "SELECT host_id, epoch, "
    "(extract(epoch FROM expires_at) - extract(epoch FROM clock_timestamp()))::float8, holder "
    "FROM {s}.leases WHERE session_id = %s"
)
# Extend a lease that is still the host's, at its epoch.
_RENEW = (
    "UPDATE {s}.leases "
    "SET expires_at = clock_timestamp() + make_interval(secs => %s::float8) "
    "WHERE session_id = %s AND host_id = %s AND epoch = %s "
    "RETURNING extract(epoch FROM expires_at)::float8"
)
# Extend the leases named by arrays of (session id, host id, epoch) that are still those hosts',
# in one statement; returns the renewed ones.
_RENEW_MANY = (
    "UPDATE {s}.leases AS l "
    "SET expires_at = clock_timestamp() + make_interval(secs => %s::float8) "
    "FROM unnest(%s::text[], %s::text[], %s::bigint[]) AS t(s, h, e) "
    "WHERE l.session_id = t.s AND l.host_id = t.h AND l.epoch = t.e "
    "RETURNING l.session_id, extract(epoch FROM l.expires_at)::float8"
)
# Expire a lease that is still the host's (the epoch is kept).
_RELEASE = (
    "UPDATE {s}.leases SET expires_at = '-infinity' "
    "WHERE session_id = %s AND host_id = %s AND epoch = %s"
)
# A session's lease: holder, epoch, expiry and seconds left (server clock).
_CURRENT = (
    "SELECT host_id, epoch, extract(epoch FROM expires_at)::float8, "
    # Not (expires_at - now): a released lease expires at -infinity, which the
    # timestamp arithmetic refuses; float8 arithmetic gives -Infinity.
    "(extract(epoch FROM expires_at) - extract(epoch FROM clock_timestamp()))::float8 "
    "FROM {s}.leases WHERE session_id = %s"
)
# Logs created before leases recorded their holder lack the column; the first acquire adds it.
_HAS_HOLDER = (
    "SELECT 1 FROM information_schema.columns "
    "WHERE table_schema = %s AND table_name = 'leases' AND column_name = 'holder'"
)
_ADD_HOLDER = "ALTER TABLE {s}.leases ADD COLUMN IF NOT EXISTS holder jsonb"


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
        schema = statements.schema
        self._acquire_sql = _ACQUIRE.replace("{s}", schema)
        self._take_over_sql = _TAKE_OVER.replace("{s}", schema)
        self._held_sql = _HELD.replace("{s}", schema)
        self._renew_sql = _RENEW.replace("{s}", schema)
        self._renew_many_sql = _RENEW_MANY.replace("{s}", schema)
        self._release_sql = _RELEASE.replace("{s}", schema)
        self._current_sql = _CURRENT.replace("{s}", schema)
        self._has_holder = False

    def acquire(self, session_id: str, host_id: str, ttl: float, wait: float) -> Lease:
        """Take the lease if it is free, expired or the host's, or if its holder is proven dead
        on this machine; else wait up to ``wait`` s.

        Raises:
            LeaseHeldError: Another host still holds it after ``wait`` seconds.
        """
        self._ensure_holder_column()
        me = this_process()
        holder = Jsonb(_as_dict(me)) if me is not None else None
        deadline = time.monotonic() + wait
        acquire = [session_id, host_id, float(ttl), holder]
        while True:
            rows = self._run(self._acquire_sql, acquire)
            if rows is None:
                # The lease row stayed locked: by a host paused inside a group transaction,
                # if the wait was not just contention. End such transactions and try again.
                self._reap()
                if time.monotonic() < deadline:
                    continue
                rows = []
            if rows:
                return _lease(session_id, host_id, rows[0])
            held = self._reader.rows(self._held_sql, [session_id])
            if not held:
                continue  # released and removed in between: try again
            holder_id, epoch, left, process = held[0]
            found = decode_holder(process)
            if holder_is_dead(found):
                take = [host_id, float(ttl), holder, session_id, holder_id, epoch]
                rows = self._run(self._take_over_sql, take)
                if rows:
                    assert found is not None
                    _log.info(
                        "lease_taken_from_dead_holder",
                        session_id=session_id,
                        holder=holder_id,
                        pid=found.pid,
                        epoch=rows[0][0],
                    )
                    return _lease(session_id, host_id, rows[0])
                continue  # renewed, released or taken meanwhile: look again
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LeaseHeldError(session_id, holder_id, epoch, left, process=_where(found))
            time.sleep(max(0.001, min(left, remaining, _POLL)))

    def _run(self, sql: str, params: Sequence[Any]) -> list[Any] | None:
        """Run a statement that takes a lease row, waiting at most :data:`LOCK_WAIT` for the
        row; None if the wait ran out."""

        def work(cur: psycopg.Cursor[Any]) -> list[Any] | None:
            try:
                with cur.connection.transaction():
                    cur.execute(self._sql.lock_wait, [LOCK_WAIT])
                    return cur.execute(sql, params).fetchall()
            except psycopg.errors.LockNotAvailable:
                return None

        return self._reader.run(work)

    def _ensure_holder_column(self) -> None:
        if self._has_holder:
            return
        if not self._reader.rows(_HAS_HOLDER, [self._sql.schema]):
            self._reader.run(lambda cur: cur.execute(_ADD_HOLDER.replace("{s}", self._sql.schema)))
        self._has_holder = True

    def renew(self, lease: Lease, ttl: float) -> Lease:
        """Extend ``lease`` to ``ttl`` seconds from now, at its epoch.

        Raises:
            LeaseLostError: Another host took the session over.
        """
        rows = self._reader.rows(
            self._renew_sql, [float(ttl), lease.session_id, lease.host_id, lease.epoch]
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
            self._renew_many_sql,
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
                self._release_sql, [lease.session_id, lease.host_id, lease.epoch]
            )
        )

    def current(self, session_id: str) -> Lease | None:
        """The session's lease as recorded now, or None."""
        rows = self._reader.rows(self._current_sql, [session_id])
        if not rows:
            return None
        holder, epoch, expires_at, _ = rows[0]
        return Lease(session_id=session_id, host_id=holder, epoch=epoch, expires_at=expires_at)


def _lease(session_id: str, host_id: str, row: Sequence[Any]) -> Lease:
    epoch, expires_at = row
    return Lease(session_id=session_id, host_id=host_id, epoch=epoch, expires_at=expires_at)


def _as_dict(holder: LeaseHolder) -> dict[str, Any]:
    return {field: getattr(holder, field) for field in holder.__struct_fields__}


def _where(holder: LeaseHolder | None) -> str | None:
    return None if holder is None else f"pid {holder.pid} on {holder.host}"
