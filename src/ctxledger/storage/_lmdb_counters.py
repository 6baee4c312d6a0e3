"""The byte counters of an LMDB log: raw msgpack bytes and stored frame bytes, for ``stats()``.

They live in the ``meta`` sub-database. Writing them at every commit dirtied one more page per
commit (the ``meta`` leaf), on the append's critical path: about a tenth of a sequential
append's fsync'd write. So the writer keeps them in memory and writes them every
:data:`COUNT_EVERY` groups, together with :data:`COUNTED_THROUGH`, the global position they
count through; :func:`count_bytes` adds the events after that position, so the figures stay
exact after a crash. A writer that closes cleanly writes them exactly and removes
:data:`COUNTED_THROUGH`: a log without it (every log written before this scheme, and every
cleanly closed one) holds counters that count every event, which is what older versions expect.
"""

from __future__ import annotations

from typing import Any

import lmdb

from ctxledger.events.codec import payload_size
from ctxledger.storage._layout import STAMP_SIZE, pack_u64, unpack_u64

__all__ = ["COUNTED_THROUGH", "COUNT_EVERY", "RAW_BYTES", "STORED_BYTES", "count_bytes"]

#: Groups committed between two writes of the counters.
COUNT_EVERY = 64
RAW_BYTES = b"raw_bytes"
STORED_BYTES = b"stored_bytes"
#: The position the stored counters count through; absent: they count every event.
COUNTED_THROUGH = b"counted_through"
_ZERO = b"\0" * 8


def count_bytes(txn: lmdb.Transaction, dbs: Any) -> tuple[int, int, int | None]:
    """The raw and stored bytes of every event of the log, and where the stored counters stop.

    Args:
        txn: A transaction on the log's environment.
        dbs: The log's sub-databases (:class:`~ctxledger.storage._lmdb_writer.Databases`).

    Returns:
        ``(raw, stored, counted_through)``: the counters stored in ``meta`` plus the events
        after ``counted_through`` (None when the stored counters count every event).
    """
    raw = unpack_u64(txn.get(RAW_BYTES, _ZERO, db=dbs.meta))
    stored = unpack_u64(txn.get(STORED_BYTES, _ZERO, db=dbs.meta))
    mark = txn.get(COUNTED_THROUGH, db=dbs.meta)
    if mark is None:
        return raw, stored, None
    counted = unpack_u64(mark)
    cursor = txn.cursor(db=dbs.global_)
    if cursor.set_range(pack_u64(counted + 1)):
        for key in cursor.iternext(keys=False):
            record = txn.get(bytes(key), db=dbs.events)
            if record is None:  # a damaged index; verify reports it, the figures skip it
                continue
            frame = memoryview(record)[STAMP_SIZE:]
            stored += len(frame)
            raw += max(payload_size(frame), 0)
    return raw, stored, counted
