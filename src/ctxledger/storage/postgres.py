"""The :class:`PostgresEventLog`: an event log in a PostgreSQL database, shared by many hosts.

Needs the ``postgres`` extra (``pip install 'ctxledger[postgres]'``: psycopg 3 and its pool).

**Writes.** Appends from every thread and event loop of a process are group-committed by one
thread, one transaction per group (:mod:`ctxledger.storage._pg_writer`), on its own connection.
An append returns after ``COMMIT`` with ``synchronous_commit=on`` (durability ``"sync"`` and
``"group"``): the commit is flushed to the server's WAL. ``"none"`` turns ``synchronous_commit``
off for bulk imports: a server crash may lose the last commits (never a part of one).

**The global position.** Every event gets a position that counts all events of the log, dense
and in commit order, also when several processes or hosts write. A sequence would not do: its
values are taken before the commit, so concurrent transactions commit them out of order (a
reader tailing by position would see 7 before 6 and skip 6 for good) and rolled-back
transactions leave gaps. Instead each group transaction locks the one ``head`` row (``SELECT ...
FOR UPDATE``), numbers its events from the position stored there, and stores the new last
position before it commits. The row lock serialises the writers of the whole database: the next
writer reads the head only after this one committed, and PostgreSQL makes a commit visible
before it releases the transaction's locks, so positions become visible exactly in order and a
rolled-back group gives its positions back. The price is that commits of one database do not
overlap; group commit is what makes that cheap (one commit per group, not per event).

**Reads** run on a connection pool (``psycopg_pool``), each query in its own snapshot; a range is
streamed in chunks (keyset pagination on seq). Every stored record is the codec's checksummed
frame (:mod:`ctxledger.events.codec`), so a damaged row raises
:class:`~ctxledger.errors.CorruptRecordError` naming its session and seq, as in LMDB.

**Tailing.** ``read_all(after_position, limit=n)`` pages through the global order. To follow the
log, :meth:`PostgresEventLog.wait_for_position` blocks until it grows past a position: writers
``NOTIFY`` when they commit and a listener wakes the waiters, but a notification is only a hint
(waiters always re-read by position, and poll twice a second if notifications stop).
:func:`ctxledger.storage.tail` combines the two into an iterator.

**Several hosts.** Session leases with fencing (:mod:`ctxledger.storage.leases`): an append that
carries ``fence=lease`` commits only while that lease is the session's, checked inside its group
transaction with the lease row locked (shared) until the commit.

**Outages.** When the server goes away, appends and reads fail at once with
:class:`~ctxledger.errors.StorageError` (a read waits up to ``timeout`` seconds for a
connection); the log reconnects by itself when the server is back, without being reopened.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, TypeVar

try:
    import psycopg
    import psycopg_pool  # noqa: F401  (used by _pg_connect; checked here to name the extra)
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the PostgreSQL event log needs psycopg and psycopg_pool: pip install 'ctxledger[postgres]'"
    ) from exc
import zstandard

from ctxledger._logging import get_logger
from ctxledger.errors import (
    CorruptRecordError,
    StorageError,
    UnknownSessionError,
)
from ctxledger.events.codec import Codec
from ctxledger.events.types import Event
from ctxledger.storage._checks import (
    RecordsCallback,
    check_append,
    check_bound,
    check_limit,
    check_page,
    check_range,
    check_snapshot,
    recorded_batch,
    stream_events,
)
from ctxledger.storage._group_commit import GroupCommitter
from ctxledger.storage._pg_connect import Listener, Reader, connect, describe_dsn
from ctxledger.storage._pg_leases import LOCK_WAIT, LeaseTable
from ctxledger.storage._pg_schema import FORMAT_NAME, Statements, check_schema_name
from ctxledger.storage._pg_writer import AppendOp, PgWriter
from ctxledger.storage.leases import DEFAULT_LEASE_TTL, Lease, check_lease_request
from ctxledger.storage.protocol import (
    AppendCallback,
    Durability,
    RecordedEvent,
    check_durability,
)

__all__ = ["DEFAULT_SCHEMA", "PostgresEventLog"]

_log = get_logger(__name__)
# psycopg logs (at WARNING) every failed reconnection of the pool; a library stays quiet unless
# the application configures logging, so keep Python's last-resort handler off them.
logging.getLogger("psycopg").addHandler(logging.NullHandler())

#: The schema a log lives in unless opened with another.
DEFAULT_SCHEMA = "ctxledger"
_BODY_CHUNK = 2048  # the same for iter_bodies
_NO_SEQ = (1 << 63) - 1  # above every seq: a range without an end
_MIN_SAMPLE = 64  # payloads smaller than this teach a dictionary nothing
_POLL = 0.5  # seconds a waiter sleeps at most between re-reads of the last position
_IDLE_IN_TRANSACTION = 5000  # ms a writer may stay silent inside a group transaction
_APPLICATION = "ctxledger"  # application_name of every connection (see _pg_connect.connect)
_STALLED_AFTER = 2.0  # s a writer may stay silent inside a pipeline before it is ended

_T = TypeVar("_T")


class PostgresEventLog:
    """An :class:`~ctxledger.storage.EventLog` in a PostgreSQL schema; also a
    :class:`~ctxledger.storage.LeaseStore`.

    Open it with :meth:`open`. Any number of handles, in any number of processes and hosts, may
    write the same schema at once; see the module docstring for how.

    Attributes:
        dsn: The connection string (pass the password through ``PGPASSWORD`` or ``~/.pgpass``
            rather than in the URI: messages quote the DSN without it, but it is kept here).
        schema: The schema holding the log's tables.
        durability: The durability mode.
    """

    def __init__(
        self,
        dsn: str,
        schema: str,
        durability: Durability,
        readonly: bool,
        clock: Callable[[], float],
        pool_size: int,
        timeout: float,
    ) -> None:
        """Connect; use :meth:`open` instead."""
        self.dsn = dsn
        self.schema = schema
        self.durability = durability
        self._readonly = readonly
        self._timeout = timeout
        self._sql = Statements(schema)
        self._channel = f"ctxledger_{schema}"[:63]
        self._codec = Codec()
        self._meta_codec = Codec()  # dictionaries and snapshots never use a dictionary
        self._closed = False
        self._listener: Listener | None = None
        conn = self._connect_writer()
        try:
            self._prepare_schema(conn)
            self._load_dictionaries(conn, activate=True)
            conn.commit()  # an idle writer must hold no transaction (nor its locks)
        except BaseException:
            conn.close()
            raise
        if readonly:
            conn.close()
        self._reader = Reader(
            dsn, name=self.where, readonly=readonly, size=pool_size, timeout=timeout
        )
        self._leases = LeaseTable(self._reader, self._sql, reap=self._reap_stalled)
        self._writer: PgWriter | None = None
        self._committer: GroupCommitter | None = None
        if not readonly:
            self._writer = PgWriter(
                self._connect_writer,
                self._sql,
                codec=self._codec,
                clock=clock,
                channel=self._channel,
                connection=conn,
                reap=self._reap_stalled,
            )
            # The server writes a group, not this process's GIL: wake its callers at once so
            # that they join the next group.
            self._committer = GroupCommitter(
                self._writer.commit_group, name=f"ctxledger-journal:{schema}", wake_at_once=True
            )

    @classmethod
    def open(
        cls,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        durability: Durability = "sync",
        readonly: bool = False,
        clock: Callable[[], float] = time.time,
        pool_size: int = 8,
        timeout: float = 5.0,
    ) -> PostgresEventLog:
        """Open (creating its tables if needed) the event log in ``schema`` of a database.

        Args:
            dsn: A libpq connection string or ``postgresql://`` URI.
            schema: The schema of the log's tables; several logs can share a database.
            durability: ``"sync"`` or ``"group"`` (an append returns after a flushed commit),
                or ``"none"`` (``synchronous_commit=off``: for bulk imports).
            readonly: Never write (appends raise :class:`StorageError`, the connections are
                read-only) and never create the schema.
            clock: Returns commit timestamps (unix seconds).
            pool_size: At most this many connections serve reads at once.
            timeout: Seconds to wait for a connection before an operation fails.

        Raises:
            ConfigError: ``durability`` or ``schema`` is invalid.
            StorageError: The server cannot be reached, the schema holds another format, or
                (``readonly``) it holds no event log.
        """
        return cls(
            dsn,
            check_schema_name(schema),
            check_durability(durability),
            readonly,
            clock,
            pool_size,
            timeout,
        )

    @property
    def where(self) -> str:
        """The server and schema, without the password, for messages."""
        return f"{describe_dsn(self.dsn)} (schema {self.schema})"

    def __enter__(self) -> PostgresEventLog:
        """Return this handle; :meth:`close` runs when the block ends."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the log."""
        self.close()

    def close(self) -> None:
        """Commit the appends already submitted, then close every connection."""
        if self._closed:
            return
        self._closed = True
        if self._committer is not None:
            self._committer.close()
        if self._writer is not None:
            self._writer.close()
        if self._listener is not None:
            self._listener.close()
        self._reader.close()

    # --- writes -------------------------------------------------------------------------------

    def append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        fence: Lease | None = None,
    ) -> list[RecordedEvent]:
        """Append ``events`` atomically; see :meth:`ctxledger.storage.EventLog.append`.

        Args:
            session_id: The session.
            events: The batch; all of it is recorded, or none of it.
            expected_seq: The session's last event seq as the caller saw it.
            fence: Commit only while this lease is the session's (see
                :mod:`ctxledger.storage.leases`).

        Raises:
            VersionConflictError: The session's last seq is not ``expected_seq``.
            LeaseLostError: ``fence`` is no longer the session's lease.
            StorageError: The server failed or the log is closed.
        """
        op = self._append_op(session_id, events, expected_seq, fence)
        outcome = self._submitter().submit(op)
        return recorded_batch(session_id, op.events, *outcome)

    async def aappend(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        fence: Lease | None = None,
    ) -> list[RecordedEvent]:
        """:meth:`append` for a caller on an event loop: awaits the group commit.

        Cancelling the awaiting task does not withdraw the append: it may still be committed.
        """
        op = self._append_op(session_id, events, expected_seq, fence)
        outcome = await self._submitter().submit_async(op)
        return recorded_batch(session_id, op.events, *outcome)

    def submit(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        callback: AppendCallback,
        fence: Lease | None = None,
    ) -> None:
        """Queue an append and return at once; see :meth:`ctxledger.storage.EventLog.submit`.

        ``callback`` runs on the writer's thread, with the other answers of the group commit.
        """
        op = self._append_op(session_id, events, expected_seq, fence)
        try:
            committer = self._submitter()
        except StorageError as exc:
            callback(None, exc)
            return
        committer.submit_callback(op, RecordsCallback(session_id, op.events, callback))

    def save_snapshot(self, session_id: str, seq: int, data: bytes) -> None:
        """Store a checksummed snapshot taken after event ``seq`` of ``session_id``.

        Raises:
            UnknownSessionError: The session has no events.
        """
        check_snapshot(session_id, seq)
        self._submitter()  # refuses a read-only or closed log
        record = self._meta_codec.frame(bytes(data))
        written = self._run(
            lambda cur: cur.execute(self._sql.save_snapshot, [seq, record, session_id]).rowcount
        )
        if not written:
            raise UnknownSessionError(f"no session {session_id!r}")

    def train_dictionary(self, sample_limit: int = 4000, *, dict_size: int = 16 * 1024) -> int:
        """Train a zstd dictionary on the newest records and compress new records with it.

        The dictionary is stored under a new id and never deleted. Other handles on the log
        keep compressing with their dictionary until reopened, and read records compressed
        with the new one (they load it when they first meet it).

        Returns:
            The new dictionary's id.

        Raises:
            StorageError: The log holds too few events to train from, or it is read-only.
        """
        self._submitter()
        rows = self._rows(self._sql.newest_records, [sample_limit])
        samples: list[bytes | bytearray | memoryview] = []
        for (record,) in rows:
            payload = self._codec.unframe(record)
            if len(payload) >= _MIN_SAMPLE:
                samples.append(payload)
        try:
            dictionary = zstandard.train_dictionary(dict_size, samples)
        except zstandard.ZstdError as exc:
            raise StorageError(
                f"cannot train a dictionary on {len(samples)} events: {exc}"
            ) from None
        record = self._meta_codec.frame(dictionary.as_bytes())

        def store(cur: psycopg.Cursor[Any]) -> int:
            with cur.connection.transaction():
                cur.execute(self._sql.lock_dicts)
                row = cur.execute(self._sql.next_dict_id).fetchone()
                assert row is not None
                cur.execute(self._sql.insert_dict, [row[0], record])
                cur.execute(self._sql.activate_dict, [str(row[0])])
            return int(row[0])

        dict_id = self._run(store)
        self._codec.add_dictionary(dict_id, dictionary.as_bytes())
        self._codec.activate(dict_id)
        return dict_id

    # --- reads --------------------------------------------------------------------------------

    def read(
        self,
        session_id: str,
        from_seq: int = 1,
        to_seq: int | None = None,
        *,
        limit: int | None = None,
    ) -> list[RecordedEvent]:
        """Return a range of the session's events; see :meth:`ctxledger.storage.EventLog.read`."""
        first, last = check_range(from_seq, to_seq, limit)
        if limit == 0:
            return []
        stop = _NO_SEQ if last is None else last
        rows = self._rows(self._sql.read, [session_id, first, stop, check_limit(limit)])
        decode = self._decode
        return [
            RecordedEvent(
                session_id=session_id,
                seq=seq,
                position=position,
                timestamp=when,
                event=decode(record, session_id, seq),
            )
            for seq, position, when, record in rows
        ]

    def iter_events(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None
    ) -> Iterator[RecordedEvent]:
        """Stream the session's events, one query per chunk of 512."""
        return stream_events(self.read, session_id, from_seq, to_seq)

    def iter_bodies(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None
    ) -> Iterator[tuple[int, Event]]:
        """``(seq, event)`` of the session's events, one query per chunk of 2048."""
        first, last = check_range(from_seq, to_seq, None)
        stop = _NO_SEQ if last is None else last
        decode = self._decode
        while True:
            rows = self._rows(self._sql.read_bodies, [session_id, first, stop, _BODY_CHUNK])
            for seq, record in rows:
                yield seq, decode(record, session_id, seq)
            if len(rows) < _BODY_CHUNK:
                return
            first = rows[-1][0] + 1

    def last_seq(self, session_id: str) -> int:
        """Return the session's last event seq, 0 if it has none."""
        rows = self._rows(self._sql.last_seq, [session_id])
        return int(rows[0][0] or 0)

    def sessions(self) -> list[str]:
        """Return every session id in creation order."""
        return [session_id for (session_id,) in self._rows(self._sql.sessions, [])]

    def read_all(self, after_position: int = 0, *, limit: int | None = None) -> list[RecordedEvent]:
        """Return events of all sessions after ``after_position``, in commit order."""
        after_position, limit = check_page(after_position, limit)
        if limit == 0:
            return []
        rows = self._rows(self._sql.read_all, [after_position, limit])
        decode = self._decode
        return [
            RecordedEvent(
                session_id=session_id,
                seq=seq,
                position=position,
                timestamp=when,
                event=decode(record, session_id, seq),
            )
            for session_id, seq, position, when, record in rows
        ]

    def last_position(self) -> int:
        """Return the position of the last recorded event, 0 for an empty log."""
        return int(self._rows(self._sql.last_position, [])[0][0])

    def wait_for_position(self, after_position: int, timeout: float) -> int:
        """Block until the log holds an event past ``after_position``, or ``timeout`` seconds.

        Woken by the writers' ``NOTIFY`` (of any process), but always re-reading the last
        position, so a missed notification costs at most half a second.

        Returns:
            The last position (greater than ``after_position`` unless the time ran out).
        """
        deadline = time.monotonic() + timeout
        listener = self._listening()
        while True:
            generation = listener.generation
            last = self.last_position()
            left = deadline - time.monotonic()
            if last > after_position or left <= 0:
                return last
            listener.wait(generation, min(left, _POLL))

    def snapshot_seqs(self, session_id: str) -> list[int]:
        """Return the seqs of the session's stored snapshots, ascending."""
        return [int(seq) for (seq,) in self._rows(self._sql.snapshot_seqs, [session_id])]

    def delete_snapshots(self, session_id: str, seqs: Sequence[int]) -> None:
        """Delete the session's snapshots taken after events ``seqs`` (missing ones ignored)."""
        if seqs:
            self._submitter()  # refuses a read-only or closed log
            wanted = [int(seq) for seq in seqs]
            self._run(lambda cur: cur.execute(self._sql.delete_snapshots, [session_id, wanted]))

    def load_snapshot(
        self, session_id: str, at_or_before_seq: int | None = None
    ) -> tuple[int, bytes] | None:
        """Return the newest valid snapshot with seq <= the bound; damaged ones are skipped."""
        bound = (
            _NO_SEQ
            if at_or_before_seq is None
            else check_bound("at_or_before_seq", at_or_before_seq)
        )
        for seq, record in self._rows(self._sql.load_snapshots, [session_id, bound]):
            try:
                return seq, self._meta_codec.unframe(record, session_id=session_id, seq=seq)
            except CorruptRecordError as exc:
                _log.warning(
                    "skipping a damaged snapshot", session_id=session_id, seq=seq, error=str(exc)
                )
        return None

    def sync(self) -> None:
        """Make every commit durable, also those made with durability ``"none"``.

        One synchronous commit that writes to the WAL: the server flushes the WAL up to it,
        and so every earlier commit with it.

        Raises:
            StorageError: The server failed or the log is closed or read-only.
        """
        self._submitter()
        self._run(lambda cur: cur.connection.execute(self._sql.touch_head))  # several statements

    def stats(self) -> dict[str, Any]:
        """Describe the log: bytes on the server, events per session, compression.

        Returns:
            A dict with ``path`` (server and schema), ``durability``, ``file_bytes`` (the
            tables, indexes and TOAST of the schema), ``sessions``, ``events``,
            ``events_per_session``, ``raw_bytes``, ``stored_bytes``, ``compression_ratio``,
            ``dictionaries`` and ``active_dictionary``.
        """
        per_session = {sid: int(last) for sid, last in self._rows(self._sql.events_per_session, [])}
        _, _, raw, stored = self._rows(self._sql.head, [])[0]
        (size,) = self._rows(self._sql.sizes, [self.schema])[0]
        return {
            "path": self.where,
            "durability": self.durability,
            "file_bytes": int(size),
            "sessions": len(per_session),
            "events": sum(per_session.values()),
            "events_per_session": per_session,
            "raw_bytes": int(raw),
            "stored_bytes": int(stored),
            "compression_ratio": raw / stored if stored else 1.0,
            "dictionaries": self._codec.dictionary_ids(),
            "active_dictionary": self._codec.active_dictionary,
        }

    # --- leases -------------------------------------------------------------------------------

    def acquire_lease(
        self,
        session_id: str,
        host_id: str,
        ttl: float = DEFAULT_LEASE_TTL,
        *,
        wait: float = 0.0,
    ) -> Lease:
        """Take the session's lease for ``host_id``; see :meth:`LeaseStore.acquire_lease`.

        Expiry is judged by the server's clock.

        Raises:
            LeaseHeldError: Another host still holds it after ``wait`` seconds.
        """
        check_lease_request(session_id, host_id, ttl)
        self._submitter()
        return self._leases.acquire(session_id, host_id, ttl, wait)

    def renew_lease(self, lease: Lease, ttl: float = DEFAULT_LEASE_TTL) -> Lease:
        """Extend ``lease`` to ``ttl`` seconds from now; see :meth:`LeaseStore.renew_lease`.

        Raises:
            LeaseLostError: Another host took the session over.
        """
        check_lease_request(lease.session_id, lease.host_id, ttl)
        self._submitter()
        return self._leases.renew(lease, ttl)

    def renew_leases(
        self, leases: Sequence[Lease], ttl: float = DEFAULT_LEASE_TTL
    ) -> list[Lease | None]:
        """Renew many leases in one statement; see :meth:`LeaseStore.renew_leases`."""
        leases = list(leases)
        for lease in leases:
            check_lease_request(lease.session_id, lease.host_id, ttl)
        if len({lease.session_id for lease in leases}) != len(leases):
            raise ValueError("renew_leases: one lease per session")
        self._submitter()
        return self._leases.renew_many(leases, ttl)

    def release_lease(self, lease: Lease) -> None:
        """Give ``lease`` up; nothing happens if it was taken over already."""
        self._submitter()
        self._leases.release(lease)

    def current_lease(self, session_id: str) -> Lease | None:
        """Return the session's lease as recorded now (possibly expired), or None."""
        self._check_open()
        return self._leases.current(session_id)

    # --- helpers ------------------------------------------------------------------------------

    def _append_op(
        self, session_id: str, events: Sequence[Event], expected_seq: int, fence: Lease | None
    ) -> AppendOp:
        batch = check_append(session_id, events, expected_seq)
        if fence is not None:
            if not isinstance(fence, Lease):
                raise TypeError(f"fence must be a Lease, got {type(fence).__name__}")
            if fence.session_id != session_id:
                raise ValueError(
                    f"the fence is a lease on session {fence.session_id!r}, not {session_id!r}"
                )
        return AppendOp(session_id, expected_seq, batch, fence)

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("the event log is closed")

    def _submitter(self) -> GroupCommitter:
        self._check_open()
        if self._committer is None:
            raise StorageError(f"the event log at {self.where} is open read-only")
        return self._committer

    def _connect_writer(self) -> psycopg.Connection[Any]:
        synchronous = "off" if self.durability == "none" else "on"
        # A writer paused inside a group transaction (SIGSTOP, a stalled VM) would hold the
        # head row, and with it every host's writes: the server ends such a transaction after
        # _IDLE_IN_TRANSACTION ms of silence (the group is rolled back and written again, under
        # its fences, when the writer wakes up).
        return connect(
            self.dsn,
            timeout=self._timeout,
            autocommit=False,
            synchronous_commit=synchronous,
            idle_in_transaction_session_timeout=str(_IDLE_IN_TRANSACTION),
            # Between the statements of a pipeline no server timeout applies: a writer that
            # waits longer than this for a lock looks for such a stalled writer and ends it.
            lock_timeout=f"'{LOCK_WAIT}'",
        )

    def _reap_stalled(self) -> int:
        """End the transactions of writers paused inside a pipeline for ``_STALLED_AFTER`` s.

        A host paused (SIGSTOP, a frozen VM) between the statements of its group's pipeline
        holds the head row, and the lease rows of its fenced sessions, with no server timeout
        to end it. The writers and lease takers that waited ``LOCK_WAIT`` for a lock call this;
        the paused host's group is rolled back and, if it ever wakes, written again under its
        fences (which another host may have taken over meanwhile).
        """
        try:
            rows = self._reader.rows(self._sql.reap_stalled, [_APPLICATION, _STALLED_AFTER])
        except StorageError as exc:
            _log.warning("cannot look for stalled writers", error=str(exc))
            return 0
        ended = int(rows[0][0]) if rows else 0
        if ended:
            _log.warning("ended writers stalled inside a group transaction", count=ended)
        return ended

    def _listening(self) -> Listener:
        self._check_open()
        if self._listener is None:
            self._listener = Listener(self.dsn, self._channel, timeout=self._timeout)
        return self._listener

    def _run(self, work: Callable[[psycopg.Cursor[Any]], _T]) -> _T:
        self._check_open()
        return self._reader.run(work)

    def _rows(self, query: str, params: Sequence[Any]) -> list[Any]:
        self._check_open()
        return self._reader.rows(query, params)

    def _decode(self, record: bytes, session_id: str, seq: int) -> Event:
        try:
            return self._codec.decode_at(record, 0, session_id, seq)
        except CorruptRecordError:
            # A record compressed with a dictionary another handle trained since we loaded ours.
            if self._refresh_dictionaries():
                return self._codec.decode_at(record, 0, session_id, seq)
            raise

    def _prepare_schema(self, conn: psycopg.Connection[Any]) -> None:
        sql = self._sql
        try:
            (exists,) = conn.execute(sql.schema_exists, [f"{self.schema}.meta"]).fetchone() or (0,)
            if not exists:
                if self._readonly:
                    raise StorageError(f"no ctxledger event log at {self.where}")
                # One creator at a time: concurrent CREATE ... IF NOT EXISTS can still collide.
                conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtext(%s))", [f"ctxledger:{self.schema}"]
                )
                conn.execute(sql.ddl)
            row = conn.execute(sql.format).fetchone()
            conn.commit()
        except psycopg.Error as exc:
            raise StorageError(f"cannot open the event log at {self.where}: {exc}") from exc
        if row is None or row[0] != FORMAT_NAME:
            found = row[0] if row is not None else None
            raise StorageError(f"{self.where} holds format {found!r}, not {FORMAT_NAME!r}")

    def _load_dictionaries(self, conn: psycopg.Connection[Any], *, activate: bool) -> bool:
        known = set(self._codec.dictionary_ids())
        added = False
        active = 0
        for dict_id, record, active_text in conn.execute(self._sql.dictionaries).fetchall():
            active = int(active_text or 0)
            if dict_id in known:
                continue
            try:
                self._codec.add_dictionary(dict_id, self._meta_codec.unframe(record))
                added = True
            except (CorruptRecordError, zstandard.ZstdError) as exc:
                _log.error("zstd dictionary is damaged", dict_id=dict_id, error=str(exc))
        if activate and active in self._codec.dictionary_ids():
            self._codec.activate(active)
        return added

    def _refresh_dictionaries(self) -> bool:
        def load(cur: psycopg.Cursor[Any]) -> bool:
            return self._load_dictionaries(cur.connection, activate=False)

        return self._run(load)
