"""The on-disk layout of an LMDB event log: sub-databases, keys and small values.

Sub-databases (all integers big-endian, so that LMDB's byte order is numeric order):

================  =============================  ==============================================
name              key                            value
================  =============================  ==============================================
``sessions``      session id (UTF-8)             stamp(session number, created at)
``session_ids``   session number (u64)           session id (UTF-8)
``events``        session number, seq (u64 u64)  stamp(position, commit time) + event frame
``global``        position (u64)                 session number, seq (u64 u64)
``snapshots``     session number, seq (u64 u64)  frame of the snapshot bytes
``dicts``         dictionary id (u32)            frame of the zstd dictionary
``meta``          name (ASCII)                   format name, active dictionary, byte counters
================  =============================  ==============================================

A *stamp* is ``u64, f64, CRC-32 of those 16 bytes``: the checksum of the record's envelope, while
the frame (:mod:`ctxledger.events.codec`) carries its own.
"""

from __future__ import annotations

import struct
import zlib

from ctxledger.errors import CorruptRecordError

__all__ = [
    "DB_NAMES",
    "FORMAT_NAME",
    "STAMP_BODY_SIZE",
    "STAMP_SIZE",
    "pack_pair",
    "pack_stamp",
    "pack_u32",
    "pack_u64",
    "pair_fields",
    "stamp_crc",
    "stamp_fields",
    "unpack_pair",
    "unpack_stamp",
    "unpack_u32",
    "unpack_u64",
]

#: Written to ``meta[b"format"]``; a log with another value is refused.
FORMAT_NAME = b"ctxledger-lmdb/1"
DB_NAMES = ("sessions", "session_ids", "events", "global", "snapshots", "dicts", "meta")

_PAIR = struct.Struct(">QQ")
_U64 = struct.Struct(">Q")
_STAMP = struct.Struct(">QdI")
_STAMP_BODY = struct.Struct(">Qd")
STAMP_SIZE = _STAMP.size
#: Bytes of a stamp its CRC covers.
STAMP_BODY_SIZE = _STAMP_BODY.size
#: ``stamp_fields(data) -> (number, when, crc)``: the raw fields of the stamp at the start of
#: ``data``, unchecked (``struct.error`` if too short); :func:`unpack_stamp` checks them.
stamp_fields = _STAMP.unpack_from
#: ``pair_fields(data) -> (first, second)``: :func:`unpack_pair` without the call around it.
pair_fields = _PAIR.unpack
#: ``stamp_crc(data) -> (crc,)``: only the checksum field of the stamp at the start of ``data``.
stamp_crc = struct.Struct(">16xI").unpack_from

_U32 = struct.Struct(">I")

pack_pair = _PAIR.pack
pack_u64 = _U64.pack
pack_u32 = _U32.pack


def unpack_pair(data: bytes | memoryview) -> tuple[int, int]:
    """Unpack a ``(u64, u64)`` key or value."""
    first, second = _PAIR.unpack(data)
    return first, second


def unpack_u64(data: bytes | memoryview) -> int:
    """Unpack a ``u64``."""
    (value,) = _U64.unpack(data)
    return int(value)


def unpack_u32(data: bytes | memoryview) -> int:
    """Unpack a ``u32``."""
    (value,) = _U32.unpack(data)
    return int(value)


def pack_stamp(number: int, when: float) -> bytes:
    """Pack a checksummed ``(u64, f64)`` envelope."""
    body = _STAMP_BODY.pack(number, when)
    return body + zlib.crc32(body).to_bytes(4, "big")


def unpack_stamp(
    data: bytes | memoryview, *, session_id: str | None = None, seq: int | None = None
) -> tuple[int, float]:
    """Verify and unpack the envelope at the start of ``data``.

    Raises:
        CorruptRecordError: ``data`` is too short or the envelope fails its checksum.
    """
    if len(data) < STAMP_SIZE:
        raise CorruptRecordError("record shorter than its envelope", session_id=session_id, seq=seq)
    number, when, crc = _STAMP.unpack_from(data)
    if zlib.crc32(memoryview(data)[: _STAMP_BODY.size]) != crc:
        raise CorruptRecordError("envelope checksum mismatch", session_id=session_id, seq=seq)
    return int(number), float(when)
