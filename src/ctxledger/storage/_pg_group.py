"""One group of appends as the PostgreSQL writer plans it: its rows and each append's outcome.

Both paths of :class:`~ctxledger.storage._pg_writer.PgWriter` plan a group the same way: each
append is checked alone (its fence against the leases the group must match, its expected seq
against the session's last), its events are encoded, and its rows are given their seqs and
positions after those of the appends before it; an append that fails its checks is left out
and fails alone. The rows are then inserted with one statement per table, over arrays; with
``isolated`` (the slow path's second try), each append's rows are inserted at once under a
savepoint, so that a value the server refuses fails only that append.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg

from ctxledger.errors import InvalidMessageError, LeaseLostError, VersionConflictError
from ctxledger.events.codec import Codec, encode_payload
from ctxledger.events.types import Event
from ctxledger.storage._group_commit import Outcome
from ctxledger.storage._pg_connect import is_request_error
from ctxledger.storage._pg_schema import Statements
from ctxledger.storage.leases import Lease

__all__ = ["AppendOp", "Group", "Known", "encode", "insert", "plan"]

Known = tuple[int | None, int]  # a session's number (None: not created yet) and last seq


@dataclass(slots=True)
class AppendOp:
    """Append events to a session, fenced by a lease if ``fence`` is set.

    The writer encodes the events (``records``) on its own thread, as the LMDB journal does, so
    that callers hold the GIL only to queue.
    """

    session_id: str
    expected_seq: int
    events: list[Event]
    fence: Lease | None = None
    #: The framed records and their raw payload sizes; set on first use (kept across a retry).
    records: list[tuple[bytes, int]] | None = None


@dataclass(slots=True)
class Group:
    """One group's plan: the head before and after, its rows, and each append's outcome."""

    base_position: int
    base_sessions: int
    now: float
    position: int = 0
    sessions: int = 0
    raw: int = 0  # payload bytes the group adds
    stored: int = 0  # frame bytes the group adds
    known: dict[str, Known] = field(default_factory=dict)
    leases: dict[str, tuple[str, int]] = field(default_factory=dict)
    new_numbers: list[int] = field(default_factory=list)
    new_ids: list[str] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    records: list[bytes] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.position, self.sessions = self.base_position, self.base_sessions

    def add(self, op: AppendOp, records: list[tuple[bytes, int]], number: int | None) -> None:
        """Give the append's rows their seqs and positions (and its session a number if new)."""
        if number is None:
            self.sessions += 1
            number = self.sessions
            self.new_numbers.append(number)
            self.new_ids.append(op.session_id)
        seq = op.expected_seq
        for record, raw_size in records:
            seq += 1
            self.position += 1
            self.numbers.append(number)
            self.seqs.append(seq)
            self.positions.append(self.position)
            self.records.append(record)
            self.raw += raw_size
            self.stored += len(record)
        self.known[op.session_id] = (number, seq)

    def head_params(self) -> list[int]:
        """The parameters of ``Statements.update_head``: the head expected, the new one."""
        return [
            self.base_position,
            self.base_sessions,
            self.position,
            self.sessions,
            self.raw,
            self.stored,
        ]


def plan(
    op: AppendOp,
    group: Group,
    cached: dict[str, Known],
    codec: Codec,
    sql: Statements,
    isolated: psycopg.Cursor[Any] | None = None,
) -> Outcome:
    """Check one append and add its rows to the group; its outcome (an error: it alone).

    ``group.leases`` holds the leases the fenced appends must match (read from the table
    on the slow path; assumed, and checked by a guard, on the fast one). A session the group
    does not know yet is looked up in ``cached`` (what the writer committed last). With
    ``isolated``, the append's rows are inserted at once, under a savepoint.
    """
    session_id = op.session_id
    number, last = group.known.get(session_id) or cached[session_id]
    fence = op.fence
    if fence is not None and group.leases.get(session_id) != (fence.host_id, fence.epoch):
        holder, epoch = group.leases.get(session_id, (None, 0))
        return None, LeaseLostError(session_id, fence.host_id, fence.epoch, holder, epoch)
    if last != op.expected_seq:
        return None, VersionConflictError(session_id, op.expected_seq, last)
    if not op.events:
        return (op.expected_seq + 1, group.position + 1, group.now), None
    records = op.records
    if records is None:
        try:
            records = op.records = encode(codec, op.events)
        except Exception as exc:  # e.g. metadata msgpack cannot encode: this append alone
            return None, InvalidMessageError(f"cannot encode an event of {session_id!r}: {exc}")
    if isolated is not None:
        return _plan_isolated(op, records, group, number, sql, isolated)
    group.add(op, records, number)
    return (op.expected_seq + 1, group.position - len(records) + 1, group.now), None


def _plan_isolated(
    op: AppendOp,
    records: list[tuple[bytes, int]],
    group: Group,
    number: int | None,
    sql: Statements,
    cur: psycopg.Cursor[Any],
) -> Outcome:
    """Insert one append under a savepoint; a value the server refuses fails it alone."""
    alone = Group(group.position, group.sessions, group.now)
    alone.known = group.known
    alone.add(op, records, number)
    cur.execute("SAVEPOINT ctxledger_append")
    try:
        insert(cur, sql, alone)
    except Exception as exc:
        if not is_request_error(exc):
            raise
        cur.execute("ROLLBACK TO SAVEPOINT ctxledger_append")
        group.known[op.session_id] = (number, op.expected_seq)
        return None, InvalidMessageError(
            f"PostgreSQL refused the append to session {op.session_id!r}: {exc}"
        )
    cur.execute("RELEASE SAVEPOINT ctxledger_append")
    for name in ("numbers", "seqs", "positions", "records"):  # kept for the lost-commit check
        getattr(group, name).extend(getattr(alone, name))
    group.position, group.sessions = alone.position, alone.sessions
    group.raw += alone.raw
    group.stored += alone.stored
    return (op.expected_seq + 1, alone.position - len(records) + 1, group.now), None


def insert(cur: psycopg.Cursor[Any], sql: Statements, group: Group) -> None:
    """Insert the group's new sessions and events (isolated groups: once per append)."""
    if group.new_numbers:
        cur.execute(sql.insert_sessions, [group.now, group.new_numbers, group.new_ids])
    if group.positions:
        cur.execute(
            sql.insert_events,
            [group.now, group.numbers, group.seqs, group.positions, group.records],
        )


def encode(codec: Codec, events: list[Event]) -> list[tuple[bytes, int]]:
    """Frame each event with ``codec``; each record with its raw payload size."""
    frame = codec.frame
    records = []
    for event in events:
        payload = encode_payload(event)
        records.append((frame(payload), len(payload)))
    return records
