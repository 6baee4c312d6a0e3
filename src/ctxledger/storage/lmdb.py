"""The durable :class:`LmdbEventLog`: one LMDB environment per host directory, group-committed.

Layout: :mod:`ctxledger.storage._layout`. Writes: one journal thread per environment
(:mod:`ctxledger.storage.journal`). Reads: short read transactions on the caller's thread, so a
resize of the map (which needs every transaction of the process closed) waits at most one chunk.
"""

from __future__ import annotations

import os
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import lmdb
import zstandard

from ctxledger._logging import get_logger
from ctxledger.errors import CorruptRecordError, LogLockedError, StorageError
from ctxledger.events.codec import Codec, Deferred
from ctxledger.events.types import Event
from ctxledger.storage._checks import (
    RecordsCallback,
    check_append,
    check_bound,
    check_page,
    check_range,
    check_snapshot,
    recorded_batch,
    stream_events,
)
from ctxledger.storage._layout import (
    STAMP_BODY_SIZE,
    STAMP_SIZE,
    pack_pair,
    pack_u64,
    pair_fields,
    stamp_crc,
    stamp_fields,
    unpack_pair,
    unpack_stamp,
    unpack_u64,
)
from ctxledger.storage._lmdb_counters import count_bytes
from ctxledger.storage._lmdb_env import SharedEnvironment
from ctxledger.storage._lmdb_writer import (
    AppendOp,
    DictionaryOp,
    DropSnapshotsOp,
    SnapshotOp,
    last_key_before,
)
from ctxledger.storage._paths import check_folder
from ctxledger.storage.journal import Journal
from ctxledger.storage.protocol import (
    AppendCallback,
    Durability,
    RecordedEvent,
    check_durability,
)

__all__ = ["DEFAULT_MAP_SIZE", "LmdbEventLog"]

_log = get_logger(__name__)

#: Initial map size; the map doubles whenever it fills (it is address space, not disk space).
DEFAULT_MAP_SIZE = 1 << 30
_BODY_CHUNK = 2048  # the same for iter_bodies: each chunk costs a hand-off to the zstd worker
_NO_SEQ = 1 << 64  # above every seq (keys are u64): a range without an end
_MIN_SAMPLE = 64  # payloads smaller than this teach a dictionary nothing
_MAX_KEY = 511  # LMDB's largest key (MDB_MAXKEYSIZE in the default build)

_Row = TypeVar("_Row")
_REGISTRY: dict[str, SharedEnvironment] = {}
_REGISTRY_LOCK = threading.Lock()


def _settled(
    codec: Codec,
    items: list[Event | Deferred],
    places: list[int],
    deferred: list[Deferred],
    future: Future[list[Any] | None] | None,
) -> list[Event]:
    """``items`` with their ``deferred`` records (at ``places``) decompressed and decoded.

    ``future`` has the payloads from the worker; without it (or if it failed to decompress
    any) they are decompressed here.
    """
    if places:
        payloads = future.result() if future is not None else None
        for index, event in zip(places, codec.finish(deferred, payloads), strict=True):
            items[index] = event
    return items  # type: ignore[return-value]  # no Deferred left in them


#: A chunk of :meth:`LmdbEventLog.iter_bodies` waiting to be settled: the arguments of
#: :func:`_settled` after the codec.
_Chunk = tuple[list[Event | Deferred], list[int], list[Deferred], Future[list[Any] | None] | None]


class LmdbEventLog:
    """An :class:`~ctxledger.storage.EventLog` in an LMDB environment, with group commit.

    Open it with :meth:`open`. Opening a path that is already open in this process returns a new
    handle on the same environment (LMDB forbids two environments on one file in one process);
    the environment closes with its last handle.

    Durability modes:

    * ``"sync"`` (default): an append returns once its commit is flushed to disk. Appends from all
      threads are group-committed: one journal thread writes every batch that queued up while the
      previous commit was flushing in a single transaction, so one fsync serves them all.
    * ``"group"``: the same guarantee and the same mechanism (group commit is always on); kept as a
      separate name so that hosts can ask for it explicitly.
    * ``"none"``: the environment is opened without ``fsync`` (``sync=False, metasync=False``).
      Committed data survives the process being killed but NOT an OS crash or power loss. Unsafe:
      for tests and bulk imports only.

    One process writes a directory at a time, through one open handle: a second writing open
    raises :class:`~ctxledger.errors.LogLockedError` naming the writer's pid. Any number of
    ``readonly`` handles, in this process or others, read beside the writer.

    Attributes:
        path: The environment's directory.
        durability: The durability mode.
    """

    def __init__(self, shared: SharedEnvironment, *, readonly: bool) -> None:
        """Wrap a shared environment; use :meth:`open` instead."""
        self._shared = shared
        self._closed = False
        self._readonly = readonly
        self.path = Path(shared.path)
        self.durability = shared.durability

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        durability: Durability = "sync",
        map_size: int = DEFAULT_MAP_SIZE,
        readonly: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> LmdbEventLog:
        """Open (creating if needed) the event log in directory ``path``.

        One process writes a folder at a time: a writing open holds the folder's writer lock
        until it closes (the kernel releases it if the process dies). Read-only opens take no
        lock and work beside a writer, in this process or another.

        Args:
            path: The directory of the LMDB environment.
            durability: ``"sync"``, ``"group"`` or ``"none"`` (see the class docstring).
            map_size: Initial map size in bytes; the map grows by itself when full.
            readonly: Open for reading only (appends raise :class:`StorageError`).
            clock: Returns commit timestamps (unix seconds).

        Raises:
            ConfigError: ``durability`` is not a durability mode.
            InvalidArgumentError: ``path`` is empty, holds a NUL or is not valid UTF-8 (nothing
                is created then).
            LogLockedError: Opening for writing while another process, or another open handle of
                this process, writes the folder; the error names the folder and the writer's pid.
            StorageError: LMDB cannot open the environment, or the path is open in this process
                with another durability (or only read-only, when writing is asked for).
        """
        durability = check_durability(durability)
        key = os.path.realpath(check_folder(path))
        with _REGISTRY_LOCK:
            shared = _REGISTRY.get(key)
            if shared is None:
                shared = _REGISTRY[key] = SharedEnvironment(
                    key, durability, map_size, readonly, clock
                )
                return cls(shared, readonly=readonly)
            if not readonly:
                if shared.journal is not None:
                    raise LogLockedError(key, os.getpid())
                if shared.durability != durability:
                    raise StorageError(
                        f"{key!r} is already open in this process with durability="
                        f"{shared.durability!r}; close it first"
                    )
                shared.take_writer(clock)
            shared.clear_stale_readers()
            shared.refs += 1
        return cls(shared, readonly=readonly)

    def __enter__(self) -> LmdbEventLog:
        """Return this handle; :meth:`close` runs when the block ends."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close this handle."""
        self.close()

    def close(self) -> None:
        """Release this handle; the last handle on a path commits pending appends and closes it.

        Closing the writing handle stops its journal (after committing what it holds) and
        releases the folder's writer lock, even while read-only handles stay open.
        """
        with _REGISTRY_LOCK:  # held while closing, so that a re-open waits for the close
            if self._closed:
                return
            self._closed = True
            shared = self._shared
            shared.refs -= 1
            if not shared.refs:
                del _REGISTRY[shared.path]
                shared.close()
            elif not self._readonly:
                shared.release_writer()

    # --- writes -------------------------------------------------------------------------------

    def append(
        self, session_id: str, events: Sequence[Event], *, expected_seq: int
    ) -> list[RecordedEvent]:
        """Append ``events`` atomically; see :meth:`ctxledger.storage.EventLog.append`.

        The journal thread encodes the events (see :class:`._lmdb_writer.AppendOp`); the call
        returns after the group commit that includes them.
        """
        batch = check_append(session_id, events, expected_seq)
        outcome = self._journal().submit(AppendOp(session_id, expected_seq, batch))
        return recorded_batch(session_id, batch, *outcome)

    async def aappend(
        self, session_id: str, events: Sequence[Event], *, expected_seq: int
    ) -> list[RecordedEvent]:
        """:meth:`append` for a caller on an event loop: awaits the group commit.

        Many appending tasks on one loop cost the journal one wake-up per group, not one per
        task, so this is the fastest way for many concurrent agents to append. Cancelling the
        awaiting task does not withdraw the append: it may still be committed.
        """
        batch = check_append(session_id, events, expected_seq)
        outcome = await self._journal().submit_async(AppendOp(session_id, expected_seq, batch))
        return recorded_batch(session_id, batch, *outcome)

    def submit(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        callback: AppendCallback,
    ) -> None:
        """Queue an append and return at once; see :meth:`ctxledger.storage.EventLog.submit`.

        ``callback`` runs on the journal thread, with the other answers of the group commit;
        or, when no other request is outstanding, the batch is committed on this thread and
        ``callback`` called before this returns (one hand-off fewer for a lone writer).
        """
        batch = check_append(session_id, events, expected_seq)
        try:
            journal = self._journal()
        except StorageError as exc:
            callback(None, exc)
            return
        op = AppendOp(session_id, expected_seq, batch)
        journal.submit_callback(op, RecordsCallback(session_id, batch, callback))

    def save_snapshot(self, session_id: str, seq: int, data: bytes) -> None:
        """Store a checksummed snapshot taken after event ``seq`` of ``session_id``.

        Raises:
            UnknownSessionError: The session has no events.
        """
        check_snapshot(session_id, seq)
        self._journal().submit(
            SnapshotOp(session_id, seq, self._shared.meta_codec.frame(bytes(data)))
        )

    def train_dictionary(self, sample_limit: int = 4000, *, dict_size: int = 16 * 1024) -> int:
        """Train a zstd dictionary on the newest records and compress new records with it.

        The dictionary is stored in the log under a new id and never deleted, so records
        compressed with it stay readable.

        Args:
            sample_limit: At most this many of the newest events are sampled.
            dict_size: The dictionary's size in bytes.

        Returns:
            The new dictionary's id.

        Raises:
            StorageError: The log holds too few events to train from, or it is read-only.
        """
        samples: list[bytes | bytearray | memoryview] = []
        with self._reading() as txn:
            for _, value in self._global_tail(txn, sample_limit):
                payload = self._shared.codec.unframe(value[STAMP_SIZE:])
                if len(payload) >= _MIN_SAMPLE:
                    samples.append(payload)
        try:
            dictionary = zstandard.train_dictionary(dict_size, samples)
        except zstandard.ZstdError as exc:
            raise StorageError(
                f"cannot train a dictionary on {len(samples)} events: {exc}"
            ) from None
        record = self._shared.meta_codec.frame(dictionary.as_bytes())
        dict_id: int = self._journal().submit(DictionaryOp(record))
        return dict_id

    def sync(self) -> None:
        """Flush every committed append to disk now, whatever the durability mode.

        For a log opened with ``durability="none"`` to bulk-write quickly (an import, a
        salvage): one flush at the end makes everything written so far durable.

        Raises:
            StorageError: The flush failed, or the log is closed or read-only.
        """
        self._journal()  # refuses a closed or read-only log
        try:
            self._shared.env.sync(True)
        except lmdb.Error as exc:
            raise StorageError(f"cannot flush the event log at {str(self.path)!r}: {exc}") from exc

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
        return self._scan(session_id, first, last, limit, self._decode_record)

    def iter_events(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None
    ) -> Iterator[RecordedEvent]:
        """Stream the session's events, one short read transaction per chunk of 512."""
        return stream_events(self.read, session_id, from_seq, to_seq)

    def iter_bodies(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None
    ) -> Iterator[tuple[int, Event]]:
        """``(seq, event)`` of the session's events; see :meth:`EventLog.iter_bodies`.

        The replay's hot path: one short read transaction per chunk of 2048 records, each
        checked and decoded without building its :class:`RecordedEvent`, and the zstd frames of
        the next chunk decompressed on a worker thread meanwhile.
        """
        first, last = check_range(from_seq, to_seq, None)
        codec = self._shared.codec
        decode_at = codec.decode_at  # deferring zstd frames: _scan passes defer=True

        # While this thread decodes one chunk, a worker decompresses the next one's zstd
        # frames (one GIL-free call per chunk): zstd is about a third of a replay's work. Seqs
        # and events are kept apart and zipped as they are yielded, so that no (seq, event)
        # pair outlives its step of the caller's loop (thousands of live pairs per chunk would
        # be promoted through the garbage collector's generations).
        previous: tuple[list[int], _Chunk] | None = None
        while True:
            seqs: list[int] = []
            items = self._scan(session_id, first, last, _BODY_CHUNK, decode_at, seqs)
            final = len(items) < _BODY_CHUNK
            places = [index for index, item in enumerate(items) if type(item) is Deferred]
            deferred: list[Deferred] = [items[index] for index in places]  # type: ignore[misc]
            future = None
            if deferred and not final:
                future = self._decompress_ahead(deferred)
            if previous is not None:
                yield from zip(previous[0], _settled(codec, *previous[1]), strict=True)
            if final:
                yield from zip(seqs, _settled(codec, items, places, deferred, None), strict=True)
                return
            previous = seqs, (items, places, deferred, future)
            first = seqs[-1] + 1

    def _decompress_ahead(self, deferred: list[Deferred]) -> Future[list[Any] | None] | None:
        """Start decompressing ``deferred`` on the worker; None if the log is closing."""
        started = threading.Event()
        codec = self._shared.codec
        try:
            future = self._shared.unzstd().submit(codec.decompress_all, deferred, started)
        except RuntimeError:  # the pool shut down: the next read reports the closed log
            return None
        # Hand the GIL over until the worker is inside its GIL-free call: left to the
        # interpreter, the switch would wait for the next 5 ms tick.
        while not started.wait(0.05):
            if future.done():
                break
        return future

    def last_seq(self, session_id: str) -> int:
        """Return the session's last event seq, 0 if it has none."""
        with self._reading() as txn:
            number = self._number(txn, session_id)
            return 0 if number is None else self._last_of(txn, number)

    def _last_of(self, txn: lmdb.Transaction, number: int) -> int:
        key = last_key_before(txn.cursor(db=self._shared.dbs.events), pack_pair(number + 1, 0))
        if key is None:
            return 0
        key_number, seq = unpack_pair(key)
        return seq if key_number == number else 0

    def sessions(self) -> list[str]:
        """Return every session id in creation order."""
        with self._reading() as txn:
            return [
                bytes(value).decode(errors="backslashreplace")
                for value in txn.cursor(db=self._shared.dbs.session_ids).iternext(keys=False)
            ]

    def read_all(self, after_position: int = 0, *, limit: int | None = None) -> list[RecordedEvent]:
        """Return events of all sessions after ``after_position``, in commit order."""
        after_position, limit = check_page(after_position, limit)
        out: list[RecordedEvent] = []
        if limit == 0:
            return out
        dbs = self._shared.dbs
        with self._reading() as txn:
            cursor = txn.cursor(db=dbs.global_)
            if not cursor.set_range(pack_u64(after_position + 1)):
                return out
            names: dict[int, str] = {}
            for key, value in cursor:
                position = unpack_u64(key)
                number, seq = unpack_pair(value)
                session_id = names.get(number)
                if session_id is None:
                    session_id = names[number] = self._session_id(txn, number, position)
                record = txn.get(pack_pair(number, seq), db=dbs.events)
                if record is None:
                    raise CorruptRecordError(
                        f"position {position} names a missing event", session_id=session_id, seq=seq
                    )
                recorded = self._decode(session_id, seq, record)
                if recorded.position != position:
                    raise CorruptRecordError(
                        f"position {position} names an event stored at {recorded.position}",
                        session_id=session_id,
                        seq=seq,
                    )
                out.append(recorded)
                if len(out) == limit:
                    break
        return out

    def last_position(self) -> int:
        """Return the position of the last recorded event, 0 for an empty log."""
        with self._reading() as txn:
            cursor = txn.cursor(db=self._shared.dbs.global_)
            return unpack_u64(cursor.key()) if cursor.last() else 0

    def snapshot_seqs(self, session_id: str) -> list[int]:
        """Return the seqs of the session's stored snapshots, ascending."""
        with self._reading() as txn:
            number = self._number(txn, session_id)
            if number is None:
                return []
            cursor = txn.cursor(db=self._shared.dbs.snapshots)
            seqs: list[int] = []
            if not cursor.set_range(pack_pair(number, 0)):
                return seqs
            for key in cursor.iternext(values=False):
                key_number, seq = unpack_pair(key)
                if key_number != number:
                    break
                seqs.append(seq)
            return seqs

    def delete_snapshots(self, session_id: str, seqs: Sequence[int]) -> None:
        """Delete the session's snapshots taken after events ``seqs`` (one journal request)."""
        if seqs:
            self._journal().submit(DropSnapshotsOp(session_id, tuple(seqs)))

    def load_snapshot(
        self, session_id: str, at_or_before_seq: int | None = None
    ) -> tuple[int, bytes] | None:
        """Return the newest valid snapshot with seq <= the bound; damaged ones are skipped."""
        last = (
            None if at_or_before_seq is None else check_bound("at_or_before_seq", at_or_before_seq)
        )
        with self._reading() as txn:
            number = self._number(txn, session_id)
            if number is None:
                return None
            cursor = txn.cursor(db=self._shared.dbs.snapshots)
            bound = pack_pair(number + 1, 0) if last is None else pack_pair(number, last + 1)
            if last_key_before(cursor, bound) is None:
                return None
            for key, record in cursor.iterprev():
                key_number, seq = unpack_pair(key)
                if key_number != number:
                    return None
                try:
                    return seq, self._shared.meta_codec.unframe(
                        record, session_id=session_id, seq=seq
                    )
                except CorruptRecordError as exc:
                    _log.warning(
                        "skipping a damaged snapshot",
                        session_id=session_id,
                        seq=seq,
                        error=str(exc),
                    )
        return None

    def stats(self) -> dict[str, Any]:
        """Describe the log: sizes on disk and in the map, events per session, compression.

        Returns:
            A dict with ``path``, ``durability``, ``file_bytes``, ``map_size``, ``map_used``,
            ``sessions``, ``events``, ``events_per_session``, ``raw_bytes`` (msgpack payloads),
            ``stored_bytes`` (framed records), ``compression_ratio``, ``dictionaries`` and
            ``active_dictionary``.
        """
        shared = self._shared
        with self._reading() as txn:
            # By session number, so that a session whose own entry is damaged is still counted.
            per_session = {
                bytes(name).decode(errors="backslashreplace"): self._last_of(
                    txn, unpack_u64(number)
                )
                for number, name in txn.cursor(db=shared.dbs.session_ids)
            }
            raw, stored, _ = count_bytes(txn, shared.dbs)
            info = shared.env.info()
            page_size = shared.env.stat()["psize"]
        data_file = self.path / "data.mdb"
        return {
            "path": str(self.path),
            "durability": self.durability,
            "file_bytes": data_file.stat().st_size if data_file.exists() else 0,
            "map_size": info["map_size"],
            "map_used": (info["last_pgno"] + 1) * page_size,
            "sessions": len(per_session),
            "events": sum(per_session.values()),
            "events_per_session": per_session,
            "raw_bytes": raw,
            "stored_bytes": stored,
            "compression_ratio": raw / stored if stored else 1.0,
            "dictionaries": shared.codec.dictionary_ids(),
            "active_dictionary": shared.codec.active_dictionary,
        }

    # --- helpers ------------------------------------------------------------------------------

    def _journal(self) -> Journal:
        if self._closed:
            raise StorageError("the event log is closed")
        journal = self._shared.journal
        if journal is None or self._readonly:
            raise StorageError(f"the event log at {str(self.path)!r} is open read-only")
        return journal

    @contextmanager
    def _reading(self) -> Iterator[lmdb.Transaction]:
        if self._closed:
            raise StorageError("the event log is closed")
        with self._shared.reading() as txn:
            yield txn

    def _number(self, txn: lmdb.Transaction, session_id: str) -> int | None:
        try:
            key = session_id.encode()
        except UnicodeEncodeError:  # no append accepts such an id: no session has it
            return None
        if not key or len(key) > _MAX_KEY:  # LMDB could not have stored it
            return None
        stamp = txn.get(key, db=self._shared.dbs.sessions)
        return None if stamp is None else unpack_stamp(stamp, session_id=session_id)[0]

    def _session_id(self, txn: lmdb.Transaction, number: int, position: int) -> str:
        name = txn.get(pack_u64(number), db=self._shared.dbs.session_ids)
        if name is None:
            raise CorruptRecordError(f"position {position} names unknown session number {number}")
        return bytes(name).decode()

    def _scan(
        self,
        session_id: str,
        first: int,
        last: int | None,
        limit: int | None,
        decode: Callable[[bytes | memoryview, int, str, int, bool], _Row],
        seqs: list[int] | None = None,
    ) -> list[_Row]:
        """``decode(value, STAMP_SIZE, session_id, seq, defer)`` of each record of a range.

        ``decode`` has the signature of :meth:`Codec.decode_at`; ``defer`` is True when
        ``seqs`` is given (the caller then finishes the :class:`Deferred` records). One read
        transaction; each record's stamp is checked here, and its seq appended to ``seqs`` if
        given. The values point into the map: they must be decoded before the transaction ends.
        """
        rows: list[_Row] = []
        with self._reading() as txn:
            number = self._number(txn, session_id)
            if number is None:
                return rows
            cursor = txn.cursor(db=self._shared.dbs.events)
            if not cursor.set_range(pack_pair(number, first)):
                return rows
            unpack, append, crc32 = pair_fields, rows.append, zlib.crc32
            defer = seqs is not None
            add_seq = seqs.append if seqs is not None else None
            stop = _NO_SEQ if last is None else last
            for key, value in cursor:
                key_number, seq = unpack(key)
                if key_number != number or seq > stop:
                    break
                try:
                    (crc,) = stamp_crc(value)
                except struct.error:
                    crc = None
                if crc is None or crc32(value[:STAMP_BODY_SIZE]) != crc:
                    unpack_stamp(value, session_id=session_id, seq=seq)  # raises, naming it
                append(decode(value, STAMP_SIZE, session_id, seq, defer))
                if add_seq is not None:
                    add_seq(seq)
                if len(rows) == limit:
                    break
        return rows

    def _decode_record(
        self,
        value: bytes | memoryview,
        offset: int,
        session_id: str,
        seq: int,
        defer: bool,
    ) -> RecordedEvent:
        # ``defer`` is always False here (read() takes no seqs); the stamp was checked by _scan.
        position, timestamp, _ = stamp_fields(value)
        return RecordedEvent(
            session_id=session_id,
            seq=seq,
            position=position,
            timestamp=timestamp,
            event=self._shared.codec.decode_at(value, offset, session_id, seq),
        )

    def _decode(self, session_id: str, seq: int, value: bytes | memoryview) -> RecordedEvent:
        position, timestamp = unpack_stamp(value, session_id=session_id, seq=seq)
        event = self._shared.codec.decode(value[STAMP_SIZE:], session_id=session_id, seq=seq)
        return RecordedEvent(
            session_id=session_id, seq=seq, position=position, timestamp=timestamp, event=event
        )

    def _global_tail(
        self, txn: lmdb.Transaction, count: int
    ) -> Iterator[tuple[int, bytes | memoryview]]:
        dbs = self._shared.dbs
        cursor = txn.cursor(db=dbs.global_)
        if not cursor.last():
            return
        for index, (_, value) in enumerate(cursor.iterprev()):
            if index >= count:
                return
            record = txn.get(bytes(value), db=dbs.events)
            if record is not None:
                yield index, record
