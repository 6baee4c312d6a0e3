"""The LMDB environment behind every :class:`~ctxledger.storage.LmdbEventLog` handle on a path.

One :class:`SharedEnvironment` per directory and process: the ``lmdb.Environment``, its
sub-databases, the codec with the log's dictionaries, the journal that owns its writes (with the
folder's writer lock, :mod:`._lmdb_lock`, while it has one), and the
:class:`~ctxledger.storage.journal.Gate` that lets reads and map resizes exclude each other.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import lmdb
import zstandard

from ctxledger._logging import get_logger
from ctxledger.errors import CorruptRecordError, LogLockedError, StorageError
from ctxledger.events.codec import Codec
from ctxledger.storage._layout import DB_NAMES, FORMAT_NAME, unpack_u32
from ctxledger.storage._lmdb_lock import WriterLock
from ctxledger.storage._lmdb_writer import CountersOp, Databases, LmdbWriter
from ctxledger.storage.journal import Gate, Journal
from ctxledger.storage.protocol import Durability

__all__ = ["SharedEnvironment"]

_log = get_logger(__name__)

_MAX_READERS = 1024  # every thread reading at once needs a slot (py-lmdb uses MDB_NOTLS)
#: Free space below which a failed commit is blamed on a full disk: LMDB reports a write cut
#: short by ENOSPC as EIO, and what the cut-short write allocated leaves next to nothing free.
_LOW_SPACE = 1 << 20


class SharedEnvironment:
    """One open LMDB environment shared by every handle on its path in this process.

    Args:
        path: The environment's directory (already resolved to a real path).
        durability: ``"sync"`` and ``"group"`` flush every commit; ``"none"`` does not.
        map_size: Initial map size in bytes.
        readonly: Open read-only, without a journal (and without the writer lock).
        clock: Returns commit timestamps.

    Raises:
        LogLockedError: A writer was asked for and another process writes the folder.
        StorageError: LMDB cannot open the environment, or it holds another format.
    """

    def __init__(
        self,
        path: str,
        durability: Durability,
        map_size: int,
        readonly: bool,
        clock: Callable[[], float],
    ) -> None:
        self.path = path
        self.durability = durability
        self.readonly = readonly
        self.refs = 1
        self.gate = Gate()
        self.journal: Journal | None = None
        self._clock = clock
        self._lock: WriterLock | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        flush = durability != "none"
        try:
            if not readonly:
                os.makedirs(path, exist_ok=True)
                # Before LMDB opens it: opening a new environment writes its format record.
                self._lock = WriterLock.acquire(path)
            self.env = lmdb.open(
                path,
                map_size=map_size,
                max_dbs=len(DB_NAMES),
                max_readers=_MAX_READERS,
                sync=flush,
                metasync=flush,
                readonly=readonly,
                lock=True,
                create=not readonly,
            )
        except (lmdb.Error, OSError) as exc:
            self._release_lock()
            if isinstance(exc, StorageError):
                raise
            raise StorageError(f"cannot open the event log at {path!r}: {exc}") from exc
        try:
            self.clear_stale_readers()
            self.dbs = Databases(
                *(self.env.open_db(name.encode(), create=not readonly) for name in DB_NAMES)
            )
            self.codec = Codec()
            self.meta_codec = Codec()  # dictionaries and snapshots never use a dictionary
            self._check_format()
            self._load_dictionaries()
        except BaseException as exc:
            self.env.close()
            self._release_lock()
            if isinstance(exc, lmdb.Error):
                raise StorageError(f"cannot open the event log at {path!r}: {exc}") from exc
            raise
        if not readonly:
            self._start_journal()

    def take_writer(self, clock: Callable[[], float]) -> None:
        """Make this process the folder's writer again (after :meth:`release_writer`).

        Args:
            clock: Returns the new writer's commit timestamps.

        Raises:
            LogLockedError: A handle of this process writes it already, or another process does.
            StorageError: The environment was opened read-only in this process.
        """
        if self.journal is not None:
            raise LogLockedError(self.path, os.getpid())
        if self.readonly:
            raise StorageError(
                f"{self.path!r} is open read-only in this process; close every read-only "
                "handle on it before opening it for writing"
            )
        self._lock = WriterLock.acquire(self.path)
        self._clock = clock
        self._start_journal()

    def release_writer(self) -> None:
        """Commit what the journal holds, stop it, and let another process write the folder.

        The environment stays open for the read-only handles still on it.
        """
        journal, self.journal = self.journal, None
        if journal is not None:
            _close_journal(journal, self.path, flushed=self.durability != "none")
        self._release_lock()

    def _start_journal(self) -> None:
        # A new writer reads its caches from the disk: another process may have written since.
        writer = LmdbWriter(
            self.dbs, codec=self.codec, clock=self._clock, on_dictionary=self._dictionary_committed
        )
        self.journal = Journal(
            self.env,
            writer,
            grow=self.grow,
            explain=self.explain,
            name=f"ctxledger-journal:{self.path}",
        )

    def _release_lock(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    def clear_stale_readers(self) -> None:
        """Free the reader slots of dead processes (killed inside a read transaction)."""
        try:
            stale = self.env.reader_check()
        except lmdb.Error as exc:
            raise StorageError(f"cannot check the readers of {self.path!r}: {exc}") from exc
        if stale:
            _log.info("cleared stale reader slots", path=self.path, slots=stale)

    def _check_format(self) -> None:
        with self.env.begin(write=not self.readonly) as txn:
            found = txn.get(b"format", db=self.dbs.meta)
            if found is None and not self.readonly:
                txn.put(b"format", FORMAT_NAME, db=self.dbs.meta)
            elif found not in (None, FORMAT_NAME):
                raise StorageError(
                    f"{self.path!r} holds format {bytes(found)!r}, not {FORMAT_NAME!r}"
                )

    def _load_dictionaries(self) -> None:
        with self.env.begin() as txn:
            for key, record in txn.cursor(db=self.dbs.dicts):
                dict_id = unpack_u32(key)
                try:
                    self.codec.add_dictionary(dict_id, self.meta_codec.unframe(record))
                except (CorruptRecordError, zstandard.ZstdError) as exc:
                    _log.error(
                        "zstd dictionary is damaged",
                        path=self.path,
                        dict_id=dict_id,
                        error=str(exc),
                    )
            active = txn.get(b"active_dict", db=self.dbs.meta)
        if active is not None and unpack_u32(active) in self.codec.dictionary_ids():
            self.codec.activate(unpack_u32(active))

    def _dictionary_committed(self, dict_id: int, record: bytes) -> None:
        self.codec.add_dictionary(dict_id, self.meta_codec.unframe(record))
        self.codec.activate(dict_id)

    def explain(self, failure: BaseException) -> str:
        """Describe a failed write for the callers, naming a full disk when the disk is full."""
        text = str(failure)
        try:
            stat = os.statvfs(self.path)
        except OSError:
            return text
        free = stat.f_bavail * stat.f_frsize
        if isinstance(failure, lmdb.DiskError):
            return f"disk full: {free:,} bytes free on the filesystem of {self.path!r} ({text})"
        if isinstance(failure, lmdb.Error) and free < _LOW_SPACE:
            return (
                f"disk full or nearly: {free:,} bytes free on the filesystem of {self.path!r} "
                f"({text})"
            )
        return text

    def grow(self) -> None:
        """Double the map (on the journal thread, between transactions)."""
        with self.gate.exclusive():
            size = self.env.info()["map_size"] * 2
            self.env.set_mapsize(size)
        _log.info("grew the LMDB map", path=self.path, map_size=size)

    @contextmanager
    def reading(self) -> Iterator[lmdb.Transaction]:
        """Open a short read transaction, translating ``lmdb.Error`` to :class:`StorageError`."""
        try:
            with self.gate.shared():
                try:
                    txn = self.env.begin(buffers=True)
                except lmdb.MapResizedError:
                    txn = None
                if txn is not None:
                    with txn:
                        yield txn
                    return
            with self.gate.exclusive():  # another process grew the map: adopt its size
                self.env.set_mapsize(0)
            with self.gate.shared(), self.env.begin(buffers=True) as txn:
                yield txn
        except lmdb.Error as exc:
            raise StorageError(f"LMDB read failed: {exc}") from exc

    def unzstd(self) -> ThreadPoolExecutor:
        """The thread that decompresses ahead of a replay (started on first use)."""
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="ctxledger-unzstd")
            return self._pool

    def close(self) -> None:
        """Commit what the journal holds, stop it, close the environment, release the lock."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if self.journal is not None:
            _close_journal(self.journal, self.path, flushed=self.durability != "none")
            self.journal = None
        with self.gate.exclusive():
            self.env.close()
        self._release_lock()


def _close_journal(journal: Journal, path: str, *, flushed: bool) -> None:
    """Write the byte counters exactly (see ``_lmdb_counters``), then stop the journal.

    Only where commits are flushed (``flushed``): a log written with ``durability="none"`` is
    made durable by an explicit ``sync()`` before it closes, and a commit after that flush would
    be exposed to a power loss again. Its counters stay where they were; ``count_bytes`` adds
    what they lag.
    """
    if flushed:
        try:
            journal.submit(CountersOp())
        except StorageError as exc:  # only the figures lag; count_bytes still adds them up
            _log.warning("byte counters not written at close", path=path, error=str(exc))
    journal.close()
