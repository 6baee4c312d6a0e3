"""The write side of an LMDB event log: the requests the journal applies, and their group state.

Everything here runs on the journal thread, inside its write transaction. Within a group the
state of sessions touched by earlier requests of the same group is held as *pending* and becomes
*committed* only after the transaction commits; an aborted group (map full, or a request LMDB
refused mid-write, then written again without it) leaves no trace: :meth:`LmdbWriter.begin_group`
starts every attempt from the committed state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import lmdb
import msgspec

from ctxledger.errors import (
    InvalidMessageError,
    StorageError,
    UnknownSessionError,
    VersionConflictError,
)
from ctxledger.events.codec import Codec
from ctxledger.events.types import Event
from ctxledger.storage._checks import encode_checked
from ctxledger.storage._layout import (
    pack_pair,
    pack_stamp,
    pack_u32,
    pack_u64,
    unpack_pair,
    unpack_stamp,
    unpack_u32,
    unpack_u64,
)
from ctxledger.storage._lmdb_counters import (
    COUNT_EVERY,
    COUNTED_THROUGH,
    RAW_BYTES,
    STORED_BYTES,
    count_bytes,
)
from ctxledger.storage.journal import RequestFailed

__all__ = [
    "AppendOp",
    "CountersOp",
    "Databases",
    "DictionaryOp",
    "DropSnapshotsOp",
    "LmdbWriter",
    "SnapshotOp",
    "last_key_before",
]


class Databases(NamedTuple):
    """The handles of the sub-databases of one environment (see :mod:`._layout`)."""

    sessions: Any
    session_ids: Any
    events: Any
    global_: Any
    snapshots: Any
    dicts: Any
    meta: Any


class AppendOp(msgspec.Struct):
    """Append events to a session; the journal encodes them (``records``) when it applies this.

    Encoding on the journal thread rather than the caller's keeps the callers' threads off the
    GIL while the journal writes a group: every LMDB put releases the GIL, and a put that must
    win it back from dozens of encoding callers costs more than the encoding itself. A Struct,
    built without a call into Python (one per append).
    """

    session_id: str
    expected_seq: int
    events: list[Event]
    #: The framed records and their raw payload sizes; set on first use (kept across a retry).
    records: list[tuple[bytes, int]] | None = None


class _OpFailed(Exception):
    """One op of a group cannot be applied; ``error`` goes to its caller alone."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(slots=True)
class SnapshotOp:
    """Store a framed snapshot of a session taken after event ``seq``."""

    session_id: str
    seq: int
    record: bytes


@dataclass(slots=True)
class DropSnapshotsOp:
    """Delete the snapshots of a session taken after events ``seqs``."""

    session_id: str
    seqs: tuple[int, ...]


@dataclass(slots=True)
class CountersOp:
    """Write the byte counters exactly, as a writer does when it closes (see ``_lmdb_counters``)."""


@dataclass(slots=True)
class DictionaryOp:
    """Store a framed zstd dictionary under the next id and make it the active one."""

    record: bytes


def last_key_before(cursor: lmdb.Cursor, key: bytes) -> bytes | None:
    """Put ``cursor`` on the greatest key below ``key``; return that key, or None."""
    found = cursor.prev() if cursor.set_range(key) else cursor.last()
    return bytes(cursor.key()) if found else None


class LmdbWriter:
    """Applies groups of requests to one environment; the journal's :class:`GroupWriter`.

    The committed caches (session numbers, last seqs, last position, byte counters) are only a
    shortcut: each group first checks that the log's last position is the one it expects, and
    reloads from disk when another process has written in between.

    Args:
        dbs: The sub-databases.
        codec: Encodes the events of each append (with the log's active dictionary).
        clock: Returns the commit timestamp.
        on_dictionary: Called after the commit of a new dictionary with its id and frame.
    """

    def __init__(
        self,
        dbs: Databases,
        *,
        codec: Codec,
        clock: Callable[[], float],
        on_dictionary: Callable[[int, bytes], None],
    ) -> None:
        self._dbs = dbs
        self._codec = codec
        self._clock = clock
        self._on_dictionary = on_dictionary
        self._numbers: dict[str, int] = {}
        self._last: dict[int, int] = {}
        self._position = -1  # unknown until the first group reads it
        self._next_number = 1
        self._counters = [0, 0]  # raw payload bytes, stored frame bytes
        # Where the counters stored in meta stop (None: they count every event), and the groups
        # committed since they were last written (see _lmdb_counters).
        self._counted: int | None = None
        self._uncounted_groups = 0
        self._pending_numbers: dict[str, int] = {}
        self._pending_last: dict[int, int] = {}
        self._pending_position = 0
        self._pending_counters = [0, 0]
        self._pending_counted: int | None = None
        self._pending_uncounted = 0
        self._pending_exact = False  # a CountersOp is in the group
        self._pending_dictionary: tuple[int, bytes] | None = None
        self._now = 0.0  # the commit timestamp of the open group

    def begin_group(self, txn: lmdb.Transaction) -> None:
        """Start a group: check the caches against the disk and reset the pending state."""
        self._sync_with_disk(txn)
        self._pending_position = self._position
        self._pending_counters = list(self._counters)
        self._pending_counted = self._counted
        self._pending_uncounted = self._uncounted_groups
        self._pending_exact = False
        self._now = self._clock()

    def apply(self, txn: lmdb.Transaction, op: Any) -> tuple[Any, BaseException | None]:
        """Apply ``op``; a request failing for a reason of its own fails alone.

        A conflict or an event that cannot be encoded is found before anything is written. A
        key or value LMDB refuses (``MDB_BAD_VALSIZE``) is found by a put, after the request may
        have written part of itself: :class:`RequestFailed` has the journal write the group
        again without it.

        Raises:
            RequestFailed: LMDB refused one of the op's keys or values.
        """
        try:
            if isinstance(op, AppendOp):
                return self._append(txn, op, self._now), None
            if isinstance(op, SnapshotOp):
                self._snapshot(txn, op)
                return None, None
            if isinstance(op, DropSnapshotsOp):
                self._drop_snapshots(txn, op)
                return None, None
            if isinstance(op, CountersOp):
                self._pending_exact = True
                return None, None
            return self._dictionary(txn, op), None
        except (VersionConflictError, UnknownSessionError) as exc:
            return None, exc
        except _OpFailed as failed:
            return None, failed.error
        except lmdb.BadValsizeError as exc:
            session = getattr(op, "session_id", None)
            where = ""
            if session is not None:
                where = f"session {session[:40]!r}{'…' if len(session) > 40 else ''}: "
            error = InvalidMessageError(
                f"{where}the event log refused to store this request: {exc}",
                limit="a key or value LMDB can store",
            )
            error.__cause__ = exc
            raise RequestFailed(error) from exc

    def finish_group(self, txn: lmdb.Transaction) -> None:
        """Write the byte counters when they are due (see :mod:`._lmdb_counters`).

        Every :data:`COUNT_EVERY` groups that stored events, with the position they count
        through; exactly (without that position) when a :class:`CountersOp` asks. Between two
        writes the stored counters lag: the first group that lets them lag records where.
        """
        meta = self._dbs.meta
        changed = self._pending_counters != self._counters
        if self._pending_exact and (changed or self._counted is not None):
            self._write_counters(txn)
            txn.delete(COUNTED_THROUGH, db=meta)
            self._pending_counted, self._pending_uncounted = None, 0
        elif not changed:
            return
        elif self._pending_uncounted + 1 >= COUNT_EVERY:
            self._write_counters(txn)
            txn.put(COUNTED_THROUGH, pack_u64(self._pending_position), db=meta)
            self._pending_counted, self._pending_uncounted = self._pending_position, 0
        else:
            if self._counted is None:  # stored counters counted every event until this group
                txn.put(COUNTED_THROUGH, pack_u64(self._position), db=meta)
                self._pending_counted = self._position
            self._pending_uncounted += 1

    def _write_counters(self, txn: lmdb.Transaction) -> None:
        raw, stored = self._pending_counters
        txn.put(RAW_BYTES, pack_u64(raw), db=self._dbs.meta)
        txn.put(STORED_BYTES, pack_u64(stored), db=self._dbs.meta)

    def group_committed(self) -> None:
        """Make the pending state of the committed group the committed state."""
        self._numbers.update(self._pending_numbers)
        self._next_number += len(self._pending_numbers)
        self._last.update(self._pending_last)
        self._position = self._pending_position
        self._counters = self._pending_counters
        self._counted = self._pending_counted
        self._uncounted_groups = self._pending_uncounted
        dictionary = self._pending_dictionary
        self._clear_pending()
        if dictionary is not None:
            self._on_dictionary(*dictionary)

    def group_aborted(self) -> None:
        """Drop the pending state of the aborted group."""
        self._clear_pending()

    def _clear_pending(self) -> None:
        self._pending_numbers = {}
        self._pending_last = {}
        self._pending_dictionary = None

    def _sync_with_disk(self, txn: lmdb.Transaction) -> None:
        cursor = txn.cursor(db=self._dbs.global_)
        position = unpack_u64(cursor.key()) if cursor.last() else 0
        if position == self._position:
            return
        # First group, or another process wrote: rebuild the caches from the transaction.
        self._position = position
        self._numbers.clear()
        self._last.clear()
        cursor = txn.cursor(db=self._dbs.session_ids)
        self._next_number = unpack_u64(cursor.key()) + 1 if cursor.last() else 1
        raw, stored, self._counted = count_bytes(txn, self._dbs)
        self._counters = [raw, stored]
        self._uncounted_groups = 0

    def _number(self, txn: lmdb.Transaction, session_id: str) -> int | None:
        number = self._pending_numbers.get(session_id) or self._numbers.get(session_id)
        if number is None:
            stamp = txn.get(session_id.encode(), db=self._dbs.sessions)
            if stamp is None:
                return None
            number, _ = unpack_stamp(stamp, session_id=session_id)
            self._numbers[session_id] = number
        return number

    def _last_seq(self, txn: lmdb.Transaction, number: int) -> int:
        last = self._pending_last.get(number)
        if last is None:
            last = self._last.get(number)
        if last is None:
            key = last_key_before(txn.cursor(db=self._dbs.events), pack_pair(number + 1, 0))
            last = 0
            if key is not None:
                key_number, seq = unpack_pair(key)
                last = seq if key_number == number else 0
            self._last[number] = last
        return last

    def _append(self, txn: lmdb.Transaction, op: AppendOp, now: float) -> tuple[int, int, float]:
        number = self._number(txn, op.session_id)
        actual = 0 if number is None else self._last_seq(txn, number)
        if actual != op.expected_seq:
            raise VersionConflictError(op.session_id, op.expected_seq, actual)
        position = self._pending_position
        if not op.events:
            return op.expected_seq + 1, position + 1, now
        records = op.records
        if records is None:
            records = op.records = self._encode(op.session_id, op.events)
        dbs = self._dbs
        if number is None:
            number = self._next_number + len(self._pending_numbers)
            txn.put(op.session_id.encode(), pack_stamp(number, now), db=dbs.sessions)
            txn.put(pack_u64(number), op.session_id.encode(), db=dbs.session_ids)
            self._pending_numbers[op.session_id] = number
        seq = op.expected_seq
        raw = stored = 0
        for record, raw_size in records:
            seq += 1
            position += 1
            if not txn.put(
                pack_pair(number, seq),
                pack_stamp(position, now) + record,
                overwrite=False,
                db=dbs.events,
            ) or not txn.put(
                pack_u64(position), pack_pair(number, seq), append=True, db=dbs.global_
            ):
                # The caches disagree with the disk: refuse rather than overwrite history, and
                # have the next group reload them from the disk.
                self._position = -1
                raise StorageError(
                    f"session {op.session_id!r} seq {seq} or position {position} exists"
                )
            raw += raw_size
            stored += len(record)
        self._pending_last[number] = seq
        self._pending_position = position
        self._pending_counters[0] += raw
        self._pending_counters[1] += stored
        return op.expected_seq + 1, position - len(records) + 1, now

    def _encode(self, session_id: str, events: list[Event]) -> list[tuple[bytes, int]]:
        try:
            payloads = encode_checked(session_id, events)
        except InvalidMessageError as exc:  # before any write: this append alone fails
            raise _OpFailed(exc) from exc
        frame = self._codec.frame
        records = []
        for payload in payloads:  # a loop: a comprehension makes a function and a cell a call
            records.append((frame(payload), len(payload)))
        return records

    def _snapshot(self, txn: lmdb.Transaction, op: SnapshotOp) -> None:
        number = self._number(txn, op.session_id)
        if number is None:
            raise UnknownSessionError(f"no session {op.session_id!r}")
        txn.put(pack_pair(number, op.seq), op.record, db=self._dbs.snapshots)

    def _drop_snapshots(self, txn: lmdb.Transaction, op: DropSnapshotsOp) -> None:
        number = self._number(txn, op.session_id)
        if number is None:
            return
        for seq in op.seqs:
            txn.delete(pack_pair(number, seq), db=self._dbs.snapshots)

    def _dictionary(self, txn: lmdb.Transaction, op: DictionaryOp) -> int:
        cursor = txn.cursor(db=self._dbs.dicts)
        dict_id = unpack_u32(cursor.key()) + 1 if cursor.last() else 1
        txn.put(pack_u32(dict_id), op.record, db=self._dbs.dicts)
        txn.put(b"active_dict", pack_u32(dict_id), db=self._dbs.meta)
        self._pending_dictionary = (dict_id, op.record)
        return dict_id
