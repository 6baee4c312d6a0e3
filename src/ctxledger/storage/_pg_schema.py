"""The tables of a PostgreSQL event log, and the SQL that reads and writes them (the leases'
own statements are with the lease table, :mod:`ctxledger.storage._pg_leases`).

All tables live in one schema (``ctxledger`` unless the log is opened with another), so that
several logs can share a database:

==============  =====================================================================
table           rows
==============  =====================================================================
``meta``        ``format`` (refused unless ``ctxledger-postgres/1``), ``active_dict``
``head``        one row: the last position, the number of sessions, byte counters;
                every append transaction locks and updates it (see ``postgres.py``)
``sessions``    session number (creation order), session id, creation time
``events``      (session number, seq) -> position, commit time, the codec's frame
``snapshots``   (session number, seq) -> the frame of an opaque projection snapshot
``dicts``       dictionary id -> the frame of a zstd dictionary (never deleted)
``leases``      session id -> host id, epoch, expiry (by the server's clock), holder process
==============  =====================================================================

Records are the codec's checksummed frames (:mod:`ctxledger.events.codec`), stored as they are,
so a damaged row fails its checksum exactly like a damaged LMDB value. The frames of large
events are already zstd-compressed, hence ``STORAGE EXTERNAL`` (no second compression by the
server). There are no foreign keys: one writer path keeps the tables consistent, and a check
per inserted row would cost every append.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from ctxledger.errors import ConfigError

__all__ = ["FORMAT_NAME", "Statements", "check_schema_name"]

#: Written to ``meta.format``; a schema holding another value is refused.
FORMAT_NAME = "ctxledger-postgres/1"
_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")

_DDL = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.meta (name text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.head (
    id smallint PRIMARY KEY CHECK (id = 1),
    position bigint NOT NULL,
    sessions bigint NOT NULL,
    raw_bytes bigint NOT NULL,
    stored_bytes bigint NOT NULL
);
INSERT INTO {s}.head VALUES (1, 0, 0, 0, 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS {s}.sessions (
    number bigint PRIMARY KEY,
    session_id text NOT NULL UNIQUE,
    created_at double precision NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.events (
    session bigint NOT NULL,
    seq bigint NOT NULL,
    position bigint NOT NULL UNIQUE,
    committed_at double precision NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (session, seq)
);
ALTER TABLE {s}.events ALTER COLUMN record SET STORAGE EXTERNAL;
CREATE TABLE IF NOT EXISTS {s}.snapshots (
    session bigint NOT NULL,
    seq bigint NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (session, seq)
);
CREATE TABLE IF NOT EXISTS {s}.dicts (id integer PRIMARY KEY, record bytea NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.leases (
    session_id text PRIMARY KEY,
    host_id text NOT NULL,
    epoch bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    holder jsonb
);
INSERT INTO {s}.meta VALUES ('format', '{format}') ON CONFLICT DO NOTHING;
"""

# The session number of a session id, as a scalar subquery.
_NUMBER = "(SELECT number FROM {s}.sessions WHERE session_id = %s)"


def check_schema_name(schema: str) -> str:
    """Return ``schema`` if it is a plain lower-case SQL identifier (so it needs no quoting).

    Raises:
        ConfigError: It is not (``field`` is ``"schema"``).
    """
    if not isinstance(schema, str) or not _IDENTIFIER.fullmatch(schema):
        raise ConfigError(
            "schema", f"must match {_IDENTIFIER.pattern} (a lower-case identifier), got {schema!r}"
        )
    return schema


@dataclass(frozen=True)
class Statements:
    """Every statement of the log, with the schema filled in."""

    schema: str

    def _q(self, text: str) -> str:
        return text.replace("{number}", _NUMBER).replace("{s}", self.schema)

    @cached_property
    def ddl(self) -> str:
        """Create the schema and its tables if missing (idempotent)."""
        return _DDL.replace("{format}", FORMAT_NAME).replace("{s}", self.schema)

    @cached_property
    def format(self) -> str:
        """The stored format name; fails if the schema holds no log."""
        return self._q("SELECT value FROM {s}.meta WHERE name = 'format'")

    @cached_property
    def schema_exists(self) -> str:
        """Whether the schema's ``meta`` table exists."""
        return "SELECT to_regclass(%s) IS NOT NULL"

    @cached_property
    def lock_head(self) -> str:
        """Lock the head row for the rest of the transaction and read it."""
        return self._q("SELECT position, sessions FROM {s}.head WHERE id = 1 FOR UPDATE")

    @cached_property
    def update_head(self) -> str:
        """Lock and advance the head, if it still is where the writer expects it.

        Parameters: the expected position and session count, the new ones, and the bytes the
        group adds. A head that moved makes ``position`` NULL, which its ``NOT NULL`` refuses
        (SQLSTATE 23502): the transaction aborts before anything of it is committed.
        """
        return self._q(
            "UPDATE {s}.head SET "
            "position = CASE WHEN position = %b AND sessions = %b THEN %b::bigint END, "
            "sessions = %b, raw_bytes = raw_bytes + %b, stored_bytes = stored_bytes + %b "
            "WHERE id = 1"
        )

    @cached_property
    def touch_head(self) -> str:
        """Rewrite the head row unchanged, with a synchronous commit (a WAL flush barrier)."""
        return self._q(
            "BEGIN; SET LOCAL synchronous_commit = on; "
            "UPDATE {s}.head SET position = position WHERE id = 1; COMMIT"
        )

    @cached_property
    def check_fences(self) -> str:
        """Lock (shared) the leases named by arrays of (session id, host id, epoch); fail
        with a division by zero (SQLSTATE 22012) unless all of a given number match."""
        return self._q(
            "WITH f AS (SELECT 1 FROM {s}.leases l JOIN unnest(%b::text[], %b::text[], "
            "%b::bigint[]) AS t(i, h, e) ON l.session_id = t.i AND l.host_id = t.h "
            "AND l.epoch = t.e FOR SHARE OF l) "
            "SELECT 1 / ((SELECT count(*) FROM f) = %b)::int"
        )

    @cached_property
    def lookup_sessions(self) -> str:
        """Number and last seq of each of an array of session ids that exists."""
        return self._q(
            "SELECT s.session_id, s.number, "
            "coalesce((SELECT max(e.seq) FROM {s}.events e WHERE e.session = s.number), 0) "
            "FROM {s}.sessions s WHERE s.session_id = ANY(%b)"
        )

    @cached_property
    def fences(self) -> str:
        """Lock (shared) and read the leases of an array of session ids."""
        return self._q(
            "SELECT session_id, host_id, epoch FROM {s}.leases WHERE session_id = ANY(%b) FOR SHARE"
        )

    @cached_property
    def insert_sessions(self) -> str:
        """Insert sessions from arrays of numbers and ids, all created at one time."""
        return self._q(
            "INSERT INTO {s}.sessions (number, session_id, created_at) "
            "SELECT n, i, %b FROM unnest(%b::bigint[], %b::text[]) AS t(n, i)"
        )

    @cached_property
    def insert_events(self) -> str:
        """Insert events from arrays of session numbers, seqs, positions and records."""
        return self._q(
            "INSERT INTO {s}.events (session, seq, position, committed_at, record) "
            "SELECT n, q, p, %b, r FROM unnest(%b::bigint[], %b::bigint[], %b::bigint[], "
            "%b::bytea[]) AS t(n, q, p, r)"
        )

    @cached_property
    def notify(self) -> str:
        """Wake the tailing readers (a hint; delivered on commit)."""
        return "SELECT pg_notify(%s, %s)"

    @cached_property
    def group_rows(self) -> str:
        """Session number, seq and record of the events at positions in a range."""
        return self._q(
            "SELECT session, seq, position, record FROM {s}.events "
            "WHERE position BETWEEN %s AND %s ORDER BY position"
        )

    @cached_property
    def read(self) -> str:
        """A session's events in a seq range, at most a number of them."""
        return self._q(
            "SELECT seq, position, committed_at, record FROM {s}.events "
            "WHERE session = {number} AND seq BETWEEN %s AND %s ORDER BY seq LIMIT %s"
        )

    @cached_property
    def read_bodies(self) -> str:
        """Seq and record of a session's events in a seq range, at most a number of them."""
        return self._q(
            "SELECT seq, record FROM {s}.events "
            "WHERE session = {number} AND seq BETWEEN %s AND %s ORDER BY seq LIMIT %s"
        )

    @cached_property
    def read_all(self) -> str:
        """Events of all sessions after a position, in position order."""
        return self._q(
            "SELECT s.session_id, e.seq, e.position, e.committed_at, e.record "
            "FROM {s}.events e JOIN {s}.sessions s ON s.number = e.session "
            "WHERE e.position > %s ORDER BY e.position LIMIT %s"
        )

    @cached_property
    def newest_records(self) -> str:
        """The records of the newest events (dictionary training)."""
        return self._q("SELECT record FROM {s}.events ORDER BY position DESC LIMIT %s")

    @cached_property
    def last_seq(self) -> str:
        """A session's last seq (NULL when it has none)."""
        return self._q("SELECT max(seq) FROM {s}.events WHERE session = {number}")

    @cached_property
    def sessions(self) -> str:
        """Every session id in creation order."""
        return self._q("SELECT session_id FROM {s}.sessions ORDER BY number")

    @cached_property
    def last_position(self) -> str:
        """The last committed position."""
        return self._q("SELECT position FROM {s}.head WHERE id = 1")

    @cached_property
    def save_snapshot(self) -> str:
        """Insert or replace a snapshot; no row when the session does not exist."""
        return self._q(
            "INSERT INTO {s}.snapshots (session, seq, record) "
            "SELECT number, %s, %s FROM {s}.sessions WHERE session_id = %s "
            "ON CONFLICT (session, seq) DO UPDATE SET record = excluded.record"
        )

    @cached_property
    def snapshot_seqs(self) -> str:
        """The seqs of a session's snapshots, ascending."""
        return self._q("SELECT seq FROM {s}.snapshots WHERE session = {number} ORDER BY seq")

    @cached_property
    def delete_snapshots(self) -> str:
        """Delete a session's snapshots at an array of seqs."""
        return self._q("DELETE FROM {s}.snapshots WHERE session = {number} AND seq = ANY(%s)")

    @cached_property
    def load_snapshots(self) -> str:
        """A session's snapshots at or before a seq, newest first."""
        return self._q(
            "SELECT seq, record FROM {s}.snapshots "
            "WHERE session = {number} AND seq <= %s ORDER BY seq DESC"
        )

    @cached_property
    def dictionaries(self) -> str:
        """Every stored dictionary and, in each row, the active one's id."""
        return self._q(
            "SELECT d.id, d.record, (SELECT value FROM {s}.meta WHERE name = 'active_dict') "
            "FROM {s}.dicts d ORDER BY d.id"
        )

    @cached_property
    def lock_dicts(self) -> str:
        """Serialise dictionary writers (readers are not blocked)."""
        return self._q("LOCK TABLE {s}.dicts IN SHARE ROW EXCLUSIVE MODE")

    @cached_property
    def next_dict_id(self) -> str:
        """The id the next dictionary gets."""
        return self._q("SELECT coalesce(max(id), 0) + 1 FROM {s}.dicts")

    @cached_property
    def insert_dict(self) -> str:
        """Store a dictionary."""
        return self._q("INSERT INTO {s}.dicts (id, record) VALUES (%s, %s)")

    @cached_property
    def activate_dict(self) -> str:
        """Make a dictionary the one new records use."""
        return self._q(
            "INSERT INTO {s}.meta VALUES ('active_dict', %s) "
            "ON CONFLICT (name) DO UPDATE SET value = excluded.value"
        )

    @cached_property
    def reap_stalled(self) -> str:
        """End the backends of our connections (by application name) stalled in a pipeline.

        A client paused between the statements of a pipeline leaves its backend waiting for the
        rest (``active``, waiting on ``ClientRead``) inside the transaction, holding its locks;
        ``idle_in_transaction_session_timeout`` does not apply there (PostgreSQL 17's
        ``transaction_timeout`` would). Only a pipeline leaves a backend ``active`` and waiting
        for its client inside a transaction: our readers run single statements. Returns how
        many were ended.
        """
        return (
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid() "
            "AND datname = current_database() AND state = 'active' "
            "AND wait_event = 'ClientRead' AND xact_start IS NOT NULL "
            "AND state_change < clock_timestamp() - make_interval(secs => %s::float8)"
        )

    @cached_property
    def lock_wait(self) -> str:
        """Bound the lock waits of the current transaction (``lock_timeout``)."""
        return "SELECT set_config('lock_timeout', %s, true)"

    @property
    def commit(self) -> str:
        """End the group's transaction (sent inside the writer's pipeline)."""
        return "COMMIT"

    @cached_property
    def sizes(self) -> str:
        """Bytes on disk of the log's tables, indexes and TOAST included."""
        return self._q(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r'"
        )

    @cached_property
    def head(self) -> str:
        """The head row, unlocked (stats)."""
        return self._q("SELECT position, sessions, raw_bytes, stored_bytes FROM {s}.head")

    @cached_property
    def events_per_session(self) -> str:
        """Every session id with its last seq, in creation order."""
        return self._q(
            "SELECT s.session_id, coalesce((SELECT max(e.seq) FROM {s}.events e "
            "WHERE e.session = s.number), 0) FROM {s}.sessions s ORDER BY s.number"
        )
