"""The write side of a PostgreSQL event log: one transaction per group of appends.

Runs on the :class:`~ctxledger.storage._group_commit.GroupCommitter` thread of one
:class:`~ctxledger.storage.PostgresEventLog`, on a connection of its own. Every group
transaction locks and advances the one ``head`` row (the last position and the number of
sessions): from that lock to the commit no other writer, in this process or any other, can
write, so the positions a group takes follow the last committed ones without a gap and become
visible in position order.

**Fast path** (one round trip). The writer caches what it committed last (the head, and the
number and last seq of each session it wrote). While that cache holds, a group is planned in
Python (expected seqs checked, events encoded, seqs and positions given) and sent as one
pipeline: advance the head *if it is still where the cache says* (else the statement fails),
check that the fences of the fenced appends are still the sessions' leases (else it fails),
insert the new sessions and the events (one statement each, over arrays), ``NOTIFY`` the
tailing readers, ``COMMIT``. An append that fails its own checks (a stale expected seq, an event
that cannot be encoded) is simply left out: it fails alone.

**Slow path.** When the cache cannot decide (first group, a session it never wrote, another
writer committed since) or the fast path's transaction failed for a reason other than the
server (a guard, or a value the server refused), the group is written again step by step: lock
the head, look the sessions up, read the fenced leases (locked, shared, until the commit), check
each append alone, insert. If an insert fails for a reason of one request, the transaction is
rolled back and the group written once more with a savepoint around each request, so the
culprit fails alone. A failure of the server itself (gone, disk full) fails the whole group,
with nothing of it visible. Both paths plan a group alike (:mod:`ctxledger.storage._pg_group`).

A connection that breaks during a group (the server restarted, the network dropped it) leaves
the group in doubt only if ``COMMIT`` may have been processed: the writer then reconnects once
and compares the rows at the group's positions with its own. If they are there, the group
succeeded; if not (or the break came before the commit), the group is written once more on the
new connection, so the first group after a server restart does not fail for nothing. If the
server cannot be reached, the group fails with a StorageError that says whether its outcome is
unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from ctxledger._logging import get_logger
from ctxledger.errors import StorageError
from ctxledger.events.codec import Codec
from ctxledger.storage._group_commit import Outcome
from ctxledger.storage._pg_connect import is_request_error, is_server_error
from ctxledger.storage._pg_group import AppendOp, Group, Known, insert, plan
from ctxledger.storage._pg_schema import Statements

__all__ = ["AppendOp", "PgWriter"]

_log = get_logger(__name__)
_UNKNOWN = psycopg.pq.TransactionStatus.UNKNOWN


class _Refused(Exception):
    """A batched insert failed for a reason of one request: isolate the requests and retry."""


class _Lost(Exception):
    """The connection broke and nothing of the group was committed: it may be tried again."""


class _Blocked(Exception):
    """A lock wait ran out (``lock_timeout``); nothing was committed: reap, then try again."""


class PgWriter:
    """Writes groups of appends; the ``commit`` function of a group committer.

    Args:
        connect: Opens the writer's connection (autocommit off, durability set).
        statements: The log's SQL.
        codec: Frames the events (with the log's active dictionary).
        clock: Returns the commit timestamp.
        channel: The ``NOTIFY`` channel of the log's tailing readers.
        connection: A connection made by ``connect`` to start with, if there is one.
        reap: Ends the transactions of writers stalled inside a pipeline; called when a lock
            wait of this writer ran out (its connection sets ``lock_timeout``).
    """

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]],
        statements: Statements,
        *,
        codec: Codec,
        clock: Callable[[], float],
        channel: str,
        connection: psycopg.Connection[Any] | None = None,
        reap: Callable[[], int] = lambda: 0,
    ) -> None:
        self._connect = connect
        self._reap = reap
        self._sql = statements
        self._codec = codec
        self._clock = clock
        self._channel = channel
        self._conn = connection
        self._position = -1  # the head this writer last committed; -1: unknown
        self._sessions = 0
        self._known: dict[str, Known] = {}

    def close(self) -> None:
        """Close the connection (called after the committer's thread stopped)."""
        self._drop()

    def commit_group(self, ops: list[Any], wake_previous: Callable[[], None]) -> list[Outcome]:
        """Write ``ops`` in one transaction and commit; see the module docstring.

        A group whose connection broke before anything of it was committed is written once
        more on a new connection (after a server restart, the first group finds its connection
        dead); if that fails too, or the server cannot be reached, the group fails.

        Raises:
            StorageError: The server failed; nothing of the group is visible (or, for a lost
                commit answer that could not be checked, the message says the outcome is
                unknown).
        """
        lost: _Lost | None = None
        while True:
            try:
                return self._commit_once(ops, wake_previous)
            except _Blocked as blocked:
                # A row the group needs stayed locked past lock_timeout: by a host paused
                # inside a pipeline (no server timeout ends that), or by plain contention.
                reaped = self._reap()
                _log.warning(
                    "a lock wait ran out; writing the group again",
                    reaped=reaped,
                    error=str(blocked),
                )
            except _Lost as again:
                if lost is not None:
                    message = f"PostgreSQL failed the write transaction: {again}"
                    raise StorageError(message) from again
                lost = again
                _log.info(
                    "connection lost before the commit; writing the group again", error=str(again)
                )

    def _commit_once(self, ops: list[Any], wake_previous: Callable[[], None]) -> list[Outcome]:
        """One attempt at a group; raises :class:`_Lost` when it may simply be tried again."""
        conn = self._connection()  # StorageError when the server cannot be reached
        now = self._clock()
        group = self._plan_fast(ops, now)
        if group is not None and self._send_fast(conn, group, wake_previous):
            return self._publish(group)
        try:
            try:
                group = self._write(conn, ops, now, isolate=False)
            except _Refused:
                conn.rollback()
                group = self._write(conn, ops, now, isolate=True)
        except Exception as exc:
            self._abort(conn)
            if isinstance(exc, psycopg.errors.LockNotAvailable):
                raise _Blocked(str(exc)) from exc
            if is_server_error(exc):
                raise _Lost(str(exc)) from exc  # no COMMIT was sent: nothing is committed
            raise StorageError(f"PostgreSQL failed the write transaction: {exc}") from exc
        wake_previous()  # their group is durable: let them prepare the next while this commits
        try:
            conn.commit()
        except Exception as exc:
            self._committed_anyway(group, exc)
        return self._publish(group)

    # --- the fast path ------------------------------------------------------------------------

    def _plan_fast(self, ops: list[AppendOp], now: float) -> Group | None:
        """Plan the group from the cache alone, or None if the cache cannot decide."""
        if self._position < 0:
            return None
        group = Group(self._position, self._sessions, now)
        for op in ops:
            session_id = op.session_id
            if session_id not in self._known and session_id not in group.known:
                if op.expected_seq != 0:
                    return None  # it may exist: only a lookup can tell
                group.known[session_id] = (None, 0)  # new, as far as we know: checked by insert
            fence = op.fence
            if fence is not None:
                held = group.leases.setdefault(session_id, (fence.host_id, fence.epoch))
                if held != (fence.host_id, fence.epoch):
                    return None  # two fences for one session in one group: check them for real
        group.outcomes = [plan(op, group, self._known, self._codec, self._sql) for op in ops]
        return group

    def _send_fast(
        self, conn: psycopg.Connection[Any], group: Group, wake_previous: Callable[[], None]
    ) -> bool:
        """Send the planned group in one pipeline; return whether it committed.

        Returns False (after a rollback) when a guard or a statement failed: the slow path
        decides then.

        Raises:
            StorageError: The server failed (or the commit is lost and did not happen).
        """
        sql = self._sql
        try:
            with conn.pipeline():
                cur = conn.cursor()
                cur.execute(sql.update_head, group.head_params())
                if group.leases:
                    ids = list(group.leases)
                    hosts = [group.leases[session_id][0] for session_id in ids]
                    epochs = [group.leases[session_id][1] for session_id in ids]
                    cur.execute(sql.check_fences, [ids, hosts, epochs, len(ids)])
                insert(cur, sql, group)
                if group.positions:
                    cur.execute(sql.notify, [self._channel, str(group.position)])
                # COMMIT goes out with the group, and the previous group's callers are woken
                # only then, while the server commits: between the statements of an open
                # pipeline the server waits for the rest holding the head row, and no server
                # timeout ends that wait (it is not "idle in transaction"), so a host paused
                # there (SIGSTOP, a frozen VM) would stall every host's writes until it
                # resumed. Sent back to back, that window is a few µs. Leaving the block
                # syncs and reads every result (a failed statement skips the COMMIT).
                cur.execute(sql.commit)
                wake_previous()
        except Exception as exc:
            if is_server_error(exc):
                self._committed_anyway(group, exc)  # returns only if the group is durable
                return True
            self._abort(conn)
            if isinstance(exc, psycopg.errors.LockNotAvailable):
                raise _Blocked(str(exc)) from exc
            return False
        return True

    # --- the slow path ------------------------------------------------------------------------

    def _write(
        self, conn: psycopg.Connection[Any], ops: list[AppendOp], now: float, *, isolate: bool
    ) -> Group:
        sql = self._sql
        cur = conn.cursor()
        row = cur.execute(sql.lock_head).fetchone()
        assert row is not None  # created with the schema
        group = Group(row[0], row[1], now)
        if group.position != self._position:
            self._known.clear()  # another writer committed since: the last seqs may be stale
        unknown = list({op.session_id for op in ops} - self._known.keys())
        if unknown:
            group.known = {session_id: (None, 0) for session_id in unknown}
            for session_id, number, last in cur.execute(sql.lookup_sessions, [unknown]):
                group.known[session_id] = (number, last)
        fenced = list({op.session_id for op in ops if op.fence is not None})
        if fenced:
            rows = cur.execute(sql.fences, [fenced])
            group.leases = {session_id: (host, epoch) for session_id, host, epoch in rows}
        cursor = cur if isolate else None
        group.outcomes = [
            plan(op, group, self._known, self._codec, self._sql, cursor) for op in ops
        ]
        if not isolate:
            try:
                insert(cur, sql, group)
            except Exception as exc:
                if is_request_error(exc) and conn.info.transaction_status != _UNKNOWN:
                    raise _Refused from exc
                raise
        cur.execute(sql.update_head, group.head_params())
        if group.positions:
            cur.execute(sql.notify, [self._channel, str(group.position)])
        return group

    # --- after the commit, both paths ----------------------------------------------------------

    def _publish(self, group: Group) -> list[Outcome]:
        """Make the committed group's head and sessions the cache; return its outcomes."""
        self._position, self._sessions = group.position, group.sessions
        for session_id, known in group.known.items():
            if known[0] is not None:
                self._known[session_id] = known
        return group.outcomes

    # --- connection and failures --------------------------------------------------------------

    def _connection(self) -> psycopg.Connection[Any]:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            self._drop()
            conn = self._conn = self._connect()  # raises StorageError when the server is down
            self._position = -1
        return conn

    def _abort(self, conn: psycopg.Connection[Any]) -> None:
        """Roll back after a failure; drop the connection if it is no longer usable."""
        try:
            conn.rollback()
        except Exception:  # the connection is gone: the server rolls the transaction back
            self._drop()
            return
        if conn.broken:
            self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        self._position = -1
        if conn is not None:
            try:
                conn.close()
            except Exception as exc:  # closing a dead connection: nothing left to release
                _log.debug("closing a broken connection failed", error=repr(exc))

    def _committed_anyway(self, group: Group, cause: Exception) -> None:
        """After the connection broke during a group: return if the group is durable anyway.

        Reconnects once and compares the rows at the group's positions with the group's.

        Raises:
            _Lost: The group was not committed and the server answers again.
            StorageError: The server cannot be reached (or the check failed): the outcome is
                unknown.
        """
        self._drop()
        if not group.positions:
            raise _Lost(str(cause)) from cause
        try:
            conn = self._connect()
        except StorageError as exc:
            raise StorageError(
                f"PostgreSQL is unreachable, so whether the last commit happened is unknown "
                f"(read the session again once the server is back): {cause}; {exc}"
            ) from cause
        try:
            first, last = group.positions[0], group.positions[-1]
            rows = conn.execute(self._sql.group_rows, [first, last]).fetchall()
        except Exception as exc:
            raise StorageError(
                f"the commit failed and its outcome is unknown: {cause}; checking it failed: {exc}"
            ) from cause
        finally:
            conn.close()
        ours = list(zip(group.numbers, group.seqs, group.positions, group.records, strict=True))
        if [tuple(row) for row in rows] != ours:
            raise _Lost(str(cause)) from cause
        _log.warning("commit answer lost, but the group is durable", error=repr(cause))
