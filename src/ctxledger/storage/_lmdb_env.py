"""The LMDB environment behind every :class:`~ctxledger.storage.LmdbEventLog` handle on a path.

One :class:`SharedEnvironment` per directory and process: the ``lmdb.Environment``, its
sub-databases, the codec with the log's dictionaries, the journal that owns its writes, and the
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
from ctxledger.errors import CorruptRecordError, StorageError
from ctxledger.events.codec import Codec
from ctxledger.storage._layout import DB_NAMES, FORMAT_NAME, unpack_u32
from ctxledger.storage._lmdb_writer import Databases, LmdbWriter
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
        readonly: Open read-only, without a journal.
        clock: Returns commit timestamps.

    Raises:
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
        flush = durability != "none"
        try:
            if not readonly:
                os.makedirs(path, exist_ok=True)
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
        except lmdb.Error as exc:
            self.env.close()
            raise StorageError(f"cannot open the event log at {path!r}: {exc}") from exc
        except BaseException:
            self.env.close()
            raise
        self.journal: Journal | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        if not readonly:
            writer = LmdbWriter(
                self.dbs, codec=self.codec, clock=clock, on_dictionary=self._dictionary_committed
            )
            self.journal = Journal(
                self.env,
                writer,
                grow=self.grow,
                explain=self.explain,
                name=f"ctxledger-journal:{path}",
            )

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
        """Commit what the journal holds, stop it, then close the environment."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if self.journal is not None:
            self.journal.close()
        with self.gate.exclusive():
            self.env.close()
