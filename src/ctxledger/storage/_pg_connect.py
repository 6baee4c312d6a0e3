"""Connections of a PostgreSQL event log: opening them, naming the server, waking tail readers."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg
import psycopg_pool
from psycopg.conninfo import conninfo_to_dict

from ctxledger._logging import get_logger
from ctxledger.errors import StorageError

__all__ = ["Listener", "Reader", "connect", "describe_dsn", "is_request_error", "is_server_error"]

_log = get_logger(__name__)

_RETRY = 0.5  # seconds between attempts of the listener to reconnect
_T = TypeVar("_T")


def describe_dsn(dsn: str) -> str:
    """``dsn`` without its password, for messages: ``postgresql://user@host:port/dbname``."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "postgresql://<unparsable DSN>"
    user = f"{params['user']}@" if params.get("user") else ""
    host = str(params.get("host", ""))
    port = f":{params['port']}" if params.get("port") else ""
    return f"postgresql://{user}{host}{port}/{params.get('dbname', '')}"


def connect(
    dsn: str, *, timeout: float, autocommit: bool, **settings: str
) -> psycopg.Connection[Any]:
    """Open a connection and apply session ``settings`` (``SET name = value``).

    Raises:
        StorageError: The server cannot be reached or refused the connection.
    """
    try:
        conn = psycopg.connect(
            dsn,
            autocommit=autocommit,
            connect_timeout=max(2, round(timeout)),
            application_name="ctxledger",
        )
    except psycopg.Error as exc:
        raise StorageError(f"cannot connect to PostgreSQL at {describe_dsn(dsn)}: {exc}") from exc
    try:
        for name, value in settings.items():
            conn.execute(f"SET {name} = {value}")  # our own names and values, never user input
        if not autocommit:
            conn.commit()
    except psycopg.Error as exc:
        conn.close()
        raise StorageError(f"cannot set up a PostgreSQL connection: {exc}") from exc
    return conn


class Listener:
    """A thread that ``LISTEN``s on a channel and wakes the waiters on every notification.

    Notifications are only a hint that the log grew: waiters re-read the log by position, and
    wait at most a short poll interval, so a notification lost while the listener reconnects
    delays them by at most that interval.

    Args:
        dsn: The server.
        channel: The channel (the log's writers ``NOTIFY`` it when they commit).
        timeout: Connection timeout in seconds.
    """

    def __init__(self, dsn: str, channel: str, *, timeout: float) -> None:
        self._dsn = dsn
        self._channel = channel
        self._timeout = timeout
        self._cond = threading.Condition()
        self._generation = 0
        self._stopped = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self._thread = threading.Thread(target=self._run, name=f"ctxledger-listen:{channel}")
        self._thread.daemon = True
        self._thread.start()

    @property
    def generation(self) -> int:
        """A counter of the notifications received so far."""
        return self._generation

    def wait(self, generation: int, timeout: float) -> None:
        """Wait until a notification newer than ``generation`` arrives, or ``timeout`` passes."""
        with self._cond:
            self._cond.wait_for(lambda: self._generation != generation, timeout)

    def close(self) -> None:
        """Stop the thread (it notices within a second)."""
        self._stopped.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                conn = connect(self._dsn, timeout=self._timeout, autocommit=True)
            except StorageError as exc:
                _log.debug("listener cannot connect", error=str(exc))
                self._stopped.wait(_RETRY)
                continue
            try:
                with conn:
                    conn.execute(f'LISTEN "{self._channel}"')
                    self._bump()  # anything committed while disconnected: re-read
                    while not self._stopped.is_set():
                        if any(True for _ in conn.notifies(timeout=1.0)):
                            self._bump()
            except psycopg.Error as exc:
                _log.debug("listener connection lost", error=str(exc))
                self._bump()
                self._stopped.wait(_RETRY)

    def _bump(self) -> None:
        with self._cond:
            self._generation += 1
            self._cond.notify_all()


class Reader:
    """The connections a log reads through: a pool, and a connection of its own in an outage.

    Args:
        dsn: The server.
        name: Names the pool (and the log in messages).
        readonly: Make every connection read-only.
        size: At most this many connections at once.
        timeout: Seconds to wait for a connection.
    """

    def __init__(self, dsn: str, *, name: str, readonly: bool, size: int, timeout: float) -> None:
        self._dsn = dsn
        self._name = name
        self._settings = {"default_transaction_read_only": "on"} if readonly else {}
        self._timeout = timeout
        self._pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            dsn,
            min_size=1,
            max_size=size,
            timeout=timeout,
            kwargs={
                "autocommit": True,
                "connect_timeout": max(2, round(timeout)),
                "application_name": "ctxledger",
                "options": "-c default_transaction_read_only=on" if readonly else "",
            },
            name=name,
            num_workers=1,
            open=False,
        )
        # Wait for the first connection: connecting in the background would also draw from
        # the global ``random`` (the pool jitters each connection's lifetime) at a moment the
        # application does not control, which breaks seeded runs such as Hypothesis's.
        try:
            self._pool.open(wait=True, timeout=timeout)
        except psycopg_pool.PoolTimeout as exc:
            self._pool.close()
            raise StorageError(f"cannot connect to PostgreSQL at {name}: {exc}") from exc

    def run(self, work: Callable[[psycopg.Cursor[Any]], _T]) -> _T:
        """Run ``work`` on a pooled connection (binary results), replacing dead ones.

        When the pool has no live connection left (the server went away), ``work`` runs on a
        connection of its own instead of waiting for the pool's reconnection schedule: it
        fails at once while the server is down and succeeds as soon as it is back.

        Raises:
            StorageError: The server failed or cannot be reached.
        """
        for attempt in (1, 2):
            try:
                if not self._pool.get_stats().get("pool_size", 0):
                    return self._run_alone(work)
                with self._pool.connection() as conn, conn.cursor(binary=True) as cur:
                    return work(cur)
            except psycopg_pool.PoolTimeout:
                return self._run_alone(work)
            except psycopg.Error as exc:
                if attempt == 1 and is_server_error(exc):
                    self._pool.check()  # the server restarted: replace the dead connections
                    continue
                raise StorageError(f"PostgreSQL failed at {self._name}: {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def rows(self, query: str, params: Sequence[Any]) -> list[Any]:
        """The rows of one query."""
        return self.run(lambda cur: cur.execute(query, params).fetchall())

    def close(self) -> None:
        """Close every connection."""
        self._pool.close()

    def _run_alone(self, work: Callable[[psycopg.Cursor[Any]], _T]) -> _T:
        with (
            connect(self._dsn, timeout=self._timeout, autocommit=True, **self._settings) as conn,
            conn.cursor(binary=True) as cur,
        ):
            try:
                return work(cur)
            except psycopg.Error as exc:
                raise StorageError(f"PostgreSQL failed at {self._name}: {exc}") from exc


def is_server_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure of the server or the connection, not of the statement.

    A lost connection (no SQLSTATE), connection exceptions (class 08), insufficient resources
    such as a full disk (53), operator intervention such as a shutdown (57), system errors
    (58) and internal errors (XX) are.
    """
    if not isinstance(exc, psycopg.Error):
        return False
    if exc.sqlstate is None:
        return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
    return exc.sqlstate[:2] in ("08", "53", "57", "58", "XX")


def is_request_error(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a statement, is the fault of the data it was given.

    Values the server refuses (SQLSTATE classes 22, data exception, and 54, program limit
    exceeded) or that the driver cannot send (NUL in text, a lone surrogate) are.
    """
    if isinstance(exc, psycopg.Error):
        if exc.sqlstate is None:
            return isinstance(exc, psycopg.DataError | psycopg.ProgrammingError)
        return exc.sqlstate[:2] in ("22", "54")
    return isinstance(exc, UnicodeError | TypeError | ValueError | OverflowError)
