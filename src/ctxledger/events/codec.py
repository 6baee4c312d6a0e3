"""The record codec: typed events to checksummed, optionally zstd-compressed bytes and back.

Every stored record (events, projection snapshots, dictionaries) is a frame::

    offset  size  field (integers big-endian)
    0       1     format version (1)
    1       1     flags: bit 0 = the payload is a zstd frame
    2       4     id of the zstd dictionary the payload was compressed with (0 = none)
    6       4     CRC-32 of bytes 0..5 followed by the payload
    10      ...   payload

An event's payload is its msgpack encoding with deterministic key order. Payloads of at least
:data:`COMPRESS_THRESHOLD` bytes (:data:`DICT_COMPRESS_THRESHOLD` when a trained dictionary is
active) are zstd-compressed when that makes them smaller; smaller events stay raw because
decompression would cost more than decoding them (a ~500 B message decodes in ~2.5 µs; zstd
without a dictionary would add ~3 µs for a ratio of ~1.3). The checksum is verified before anything
else, so a damaged record raises :class:`~ctxledger.errors.CorruptRecordError` and never decodes to
garbage. The first ten bytes keep this layout in every future format version.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Mapping
from typing import Any, Literal, overload

import msgspec
import zstandard

from ctxledger.config import upcast_config
from ctxledger.errors import CorruptRecordError, EventDecodeError
from ctxledger.events.types import EVENT_TYPES, ConfigChanged, Event, SessionOpened
from ctxledger.events.upcasters import CURRENT_TAGS, upcast
from ctxledger.messages import CHECKS

__all__ = [
    "COMPRESS_THRESHOLD",
    "DICT_COMPRESS_THRESHOLD",
    "FORMAT_VERSION",
    "HEADER_SIZE",
    "Codec",
    "Deferred",
    "decode_event",
    "decode_payload",
    "encode_event",
    "encode_payload",
    "payload_size",
]

#: The record format this version writes.
FORMAT_VERSION = 1
#: Bytes before the payload.
HEADER_SIZE = 10
#: Smallest payload compressed without a dictionary (measured on the real traces: below ~1 KiB
#: zstd level 1 gains a ratio under 1.7 and costs more to decompress than the msgpack decode).
COMPRESS_THRESHOLD = 1024
#: Smallest payload compressed with a trained dictionary (ratio ~2.6 already at 256-512 B, and
#: decompression ~1 µs).
DICT_COMPRESS_THRESHOLD = 512
#: zstd level; 1 keeps compression off the critical path (~8-20 µs for a few KB).
ZSTD_LEVEL = 1

_FLAG_ZSTD = 0x01
_KNOWN_FLAGS = _FLAG_ZSTD
_HEADER = struct.Struct(">BBII")
_PREFIX = struct.Struct(">BBI")

_encoder = msgspec.msgpack.Encoder(order="deterministic")
_decoder = msgspec.msgpack.Decoder(Event)
_raw_decoder = msgspec.msgpack.Decoder()
_EVENT_CLASSES = tuple(EVENT_TYPES)


def encode_payload(event: Event) -> bytes:
    """Encode ``event`` as deterministic msgpack, without a frame.

    Raises:
        TypeError: ``event`` is not one of the event types.
    """
    if not isinstance(event, _EVENT_CLASSES):
        raise TypeError(f"expected an event, got {type(event).__name__}")
    return _encoder.encode(event)


def payload_size(frame: bytes | memoryview) -> int:
    """The size of the msgpack payload inside a framed record, without decompressing it.

    For a zstd frame this is the content size its header records (every frame this codec
    writes records it); -1 when the header does not say. The checksum is not verified.
    """
    view = memoryview(frame)
    if len(view) < HEADER_SIZE:
        return -1
    if not view[1] & _FLAG_ZSTD:
        return len(view) - HEADER_SIZE
    size = zstandard.frame_content_size(view[HEADER_SIZE:])
    return int(size)


def decode_payload(
    payload: bytes | memoryview, *, session_id: str | None = None, seq: int | None = None
) -> Event:
    """Decode an unframed msgpack payload into an event, upcasting old tags.

    Args:
        payload: The msgpack bytes of one event.
        session_id: The session of the record, named in errors.
        seq: The seq of the record, named in errors.

    Raises:
        UnknownEventTypeError: The tag is neither current nor known to an upcaster.
        CorruptRecordError: The bytes are not msgpack or do not match the event's schema.
        EventDecodeError: An upcaster produced an invalid event.
    """
    try:
        event = _decoder.decode(payload)
    except msgspec.ValidationError as exc:
        error: msgspec.MsgspecError = exc
    except msgspec.DecodeError as exc:
        raise CorruptRecordError(
            f"payload is not msgpack: {exc}", session_id=session_id, seq=seq
        ) from None
    else:
        return _config_checked(event, payload)
    return _decode_slow(payload, error, session_id, seq)


#: Tags of the events that carry a Config (see :func:`ctxledger.config.upcast_config`).
_CONFIG_TAGS = frozenset(("session_opened", "config_changed"))


def _config_checked(event: Event, payload: bytes | memoryview) -> Event:
    """``event``, or, when it carries a Config recorded before ``Config.schema_version``
    existed, the event decoded again with that Config upcast (rare: one per session)."""
    if type(event) is not SessionOpened and type(event) is not ConfigChanged:
        return event
    raw = _raw_decoder.decode(payload)
    config = raw.get("config") if isinstance(raw, dict) else None
    if not isinstance(config, dict) or "schema_version" in config:
        return event
    raw["config"] = upcast_config(config)
    upcast_event: Event = msgspec.convert(raw, Event)
    return upcast_event


def _decode_slow(
    payload: bytes | memoryview,
    error: msgspec.MsgspecError,
    session_id: str | None,
    seq: int | None,
) -> Event:
    # The typed decoder rejected the payload: either an old tag (upcast it) or a real mismatch.
    try:
        raw = _raw_decoder.decode(payload)
    except msgspec.DecodeError:
        raw = None
    tag = raw.get("type") if isinstance(raw, dict) else None
    if not isinstance(tag, str):
        raise CorruptRecordError(
            f"payload is not an event map: {error}", session_id=session_id, seq=seq
        )
    config = raw.get("config")
    if tag in _CONFIG_TAGS and isinstance(config, dict) and "schema_version" not in config:
        # A Config recorded before the schema version: its old values may not pass the
        # current schema's checks until upcast (a retired floor guard, say).
        raw["config"] = upcast_config(config)
        try:
            recorded: Event = msgspec.convert(raw, Event)
        except msgspec.ValidationError as exc:
            raise CorruptRecordError(
                f"{tag!r} event does not match its schema: {exc}", session_id=session_id, seq=seq
            ) from None
        return recorded
    if tag in CURRENT_TAGS:
        raise CorruptRecordError(
            f"{tag!r} event does not match its schema: {error}", session_id=session_id, seq=seq
        )
    try:
        current = upcast(raw)
    except EventDecodeError as exc:
        if session_id is not None:
            exc.add_note(f"stored at session {session_id!r} seq {seq}")
        raise
    config = current.get("config")
    if current.get("type") in _CONFIG_TAGS and isinstance(config, dict):
        current["config"] = upcast_config(config)
    try:
        event: Event = msgspec.convert(current, Event)
    except msgspec.ValidationError as exc:
        where = f" (session {session_id!r} seq {seq})" if session_id is not None else ""
        raise EventDecodeError(f"the upcast of a {tag!r} event is invalid{where}: {exc}") from None
    return event


class Codec:
    """Frames payloads (checksum, optional zstd with a trained dictionary) and encodes events.

    A codec knows the dictionaries a log has stored, by id, and compresses new records with the
    active one. Compressor and decompressor contexts are per thread, so one codec serves the
    many threads that encode before appending.

    Args:
        dictionaries: Dictionary bytes by id (ids are positive).
        active: The id of the dictionary new records use, 0 for none.
        threshold: Smallest payload compressed without a dictionary.
        dict_threshold: Smallest payload compressed with the active dictionary.
        level: zstd compression level.
    """

    def __init__(
        self,
        dictionaries: Mapping[int, bytes] | None = None,
        *,
        active: int = 0,
        threshold: int = COMPRESS_THRESHOLD,
        dict_threshold: int = DICT_COMPRESS_THRESHOLD,
        level: int = ZSTD_LEVEL,
    ) -> None:
        self._dicts: dict[int, zstandard.ZstdCompressionDict] = {}
        self._active = 0
        self._threshold = threshold
        self._dict_threshold = dict_threshold
        self._level = level
        self._local = threading.local()
        for dict_id, data in (dictionaries or {}).items():
            self.add_dictionary(dict_id, data)
        self.activate(active)

    @property
    def active_dictionary(self) -> int:
        """The id of the dictionary new records are compressed with (0 for none)."""
        return self._active

    def dictionary_ids(self) -> list[int]:
        """Return the ids of the known dictionaries, ascending."""
        return sorted(self._dicts)

    def add_dictionary(self, dict_id: int, data: bytes) -> None:
        """Make dictionary ``dict_id`` available for decoding (and for :meth:`activate`).

        Raises:
            ValueError: ``dict_id`` is not in 1..2**32-1.
        """
        if not 0 < dict_id < 2**32:
            raise ValueError(f"dictionary id must be in 1..2**32-1, got {dict_id}")
        self._dicts[dict_id] = zstandard.ZstdCompressionDict(data)

    def activate(self, dict_id: int) -> None:
        """Compress new records with dictionary ``dict_id`` (0 stops using a dictionary).

        Raises:
            KeyError: ``dict_id`` is unknown.
        """
        if dict_id and dict_id not in self._dicts:
            raise KeyError(f"unknown zstd dictionary {dict_id}")
        self._active = dict_id

    def encode(self, event: Event) -> bytes:
        """Encode ``event`` into a framed record.

        Raises:
            TypeError: ``event`` is not one of the event types.
        """
        return self.frame(encode_payload(event))

    def decode(
        self, record: bytes | memoryview, *, session_id: str | None = None, seq: int | None = None
    ) -> Event:
        """Verify and decode a framed event record.

        Args:
            record: The stored bytes.
            session_id: The session of the record, named in errors.
            seq: The seq of the record, named in errors.

        Raises:
            CorruptRecordError: The checksum fails or the payload does not decode.
            UnknownEventTypeError: The tag is neither current nor known to an upcaster.
            EventDecodeError: The record needs a newer ctxledger or an upcaster failed.
        """
        return self.decode_at(memoryview(record), 0, session_id, seq)

    @overload
    def decode_at(
        self,
        buffer: bytes | memoryview,
        offset: int,
        session_id: str | None,
        seq: int | None,
        defer: Literal[False] = False,
    ) -> Event: ...

    @overload
    def decode_at(
        self,
        buffer: bytes | memoryview,
        offset: int,
        session_id: str | None,
        seq: int | None,
        defer: bool,
    ) -> Event | Deferred: ...

    def decode_at(
        self,
        buffer: bytes | memoryview,
        offset: int,
        session_id: str | None,
        seq: int | None,
        defer: bool = False,
    ) -> Event | Deferred:
        """:meth:`decode` the frame that starts ``offset`` bytes into ``buffer``.

        The hot path of a replay: no copy of an uncompressed payload, no intermediate slices
        beyond the two the checksum needs, and the messages of a record whose checksum matched
        are not validated again (see :data:`ctxledger.messages.CHECKS`).

        With ``defer``, a compressed record is checked but not decompressed: it comes back as a
        :class:`Deferred` (holding a copy of its frame) for :meth:`decompress_all` and
        :meth:`finish`, so that a reader can decompress many at once on another thread.
        """
        if len(buffer) - offset < HEADER_SIZE:
            raise CorruptRecordError(
                f"record of {len(buffer) - offset} bytes is shorter than its header",
                session_id=session_id,
                seq=seq,
            )
        version, flags, dict_id, crc = _HEADER.unpack_from(buffer, offset)
        start = offset + HEADER_SIZE
        payload: bytes | memoryview = buffer[start:]
        if zlib.crc32(payload, zlib.crc32(buffer[offset : offset + 6])) != crc:
            raise CorruptRecordError("checksum mismatch", session_id=session_id, seq=seq)
        if flags:
            if version != FORMAT_VERSION or flags & ~_KNOWN_FLAGS:
                raise EventDecodeError(
                    f"record format {version} (flags {flags:#x}) needs a newer ctxledger"
                )
            if defer:
                return Deferred(dict_id, bytes(payload), session_id, seq)
            payload = self._decompress(payload, dict_id, session_id, seq)
        elif version != FORMAT_VERSION:
            raise EventDecodeError(f"record format {version} needs a newer ctxledger")
        checks = CHECKS  # inlined _decode_checked: this runs once per record of a replay
        checks.skip = True
        try:
            return _config_checked(_decoder.decode(payload), payload)
        except msgspec.MsgspecError:
            pass
        finally:
            checks.skip = False
        return decode_payload(payload, session_id=session_id, seq=seq)

    def decompress_all(
        self, deferred: list[Deferred], started: threading.Event | None = None
    ) -> list[Any] | None:
        """Decompress the frames of ``deferred`` records, each dictionary's in one call.

        Each call releases the GIL for all of its frames (run it on another thread to overlap
        the decoding of other records); ``started`` is set just before the first. Returns the
        payloads in order, or None if any frame fails (then :meth:`finish` finds and names it)
        or if this zstandard has no ``multi_decompress_to_buffer`` (an API it calls
        experimental; :meth:`finish` then decompresses one by one).
        """
        payloads: list[Any] = [None] * len(deferred)
        by_dict: dict[int, list[int]] = {}
        for index, item in enumerate(deferred):
            by_dict.setdefault(item.dict_id, []).append(index)
        frames: dict[int, list[bytes | bytearray | memoryview]] = {
            dict_id: [deferred[index].frame for index in indices]
            for dict_id, indices in by_dict.items()
        }
        if started is not None:
            started.set()
        try:
            for dict_id, indices in by_dict.items():
                if dict_id and dict_id not in self._dicts:
                    return None
                many = getattr(self._decompressor(dict_id), "multi_decompress_to_buffer", None)
                if many is None:
                    return None
                out = many(frames[dict_id], threads=1)
                for position, index in enumerate(indices):
                    payloads[index] = out[position]
        except (zstandard.ZstdError, ValueError):  # a bad frame, or no content size in it
            return None
        return payloads

    def finish(self, deferred: list[Deferred], payloads: list[Any] | None) -> list[Event]:
        """Decode ``deferred`` records from their :meth:`decompress_all` payloads.

        With ``payloads`` None, each record is decompressed here (naming a damaged one).
        """
        if payloads is None:
            payloads = [
                self._decompress(item.frame, item.dict_id, item.session_id, item.seq)
                for item in deferred
            ]
        checks, decode = CHECKS, _decoder.decode
        checks.skip = True  # as in _decode_checked, once for the whole list
        try:
            return [_config_checked(decode(payload), payload) for payload in payloads]
        except msgspec.MsgspecError:
            pass  # decode them one by one below, naming the record that fails
        finally:
            checks.skip = False
        return [
            _decode_checked(payload, item.session_id, item.seq)
            for item, payload in zip(deferred, payloads, strict=True)
        ]

    def frame(self, payload: bytes) -> bytes:
        """Wrap ``payload`` in a checksummed frame, compressing it when that pays."""
        flags = dict_id = 0
        dict_id_active = self._active
        if len(payload) >= (self._dict_threshold if dict_id_active else self._threshold):
            compressed = self._compressor(dict_id_active).compress(payload)
            if len(compressed) < len(payload):
                payload, flags, dict_id = compressed, _FLAG_ZSTD, dict_id_active
        prefix = _PREFIX.pack(FORMAT_VERSION, flags, dict_id)
        return prefix + zlib.crc32(payload, zlib.crc32(prefix)).to_bytes(4, "big") + payload

    def unframe(
        self, record: bytes | memoryview, *, session_id: str | None = None, seq: int | None = None
    ) -> bytes:
        """Verify a frame's checksum and return its decompressed payload.

        Raises:
            CorruptRecordError: The record is truncated, fails its checksum, or names a
                dictionary this log does not hold.
            EventDecodeError: The record was written by a newer format version.
        """
        payload = self._payload(record, session_id, seq)
        return payload if isinstance(payload, bytes) else bytes(payload)

    def _payload(
        self, record: bytes | memoryview, session_id: str | None, seq: int | None
    ) -> bytes | memoryview:
        """The checked payload: a view into ``record`` when stored raw, else decompressed."""
        if len(record) < HEADER_SIZE:
            raise CorruptRecordError(
                f"record of {len(record)} bytes is shorter than its header",
                session_id=session_id,
                seq=seq,
            )
        version, flags, dict_id, crc = _HEADER.unpack_from(record)
        view = memoryview(record)
        if zlib.crc32(view[HEADER_SIZE:], zlib.crc32(view[:6])) != crc:
            raise CorruptRecordError("checksum mismatch", session_id=session_id, seq=seq)
        if version != FORMAT_VERSION or flags & ~_KNOWN_FLAGS:
            raise EventDecodeError(
                f"record format {version} (flags {flags:#x}) needs a newer ctxledger"
            )
        payload = view[HEADER_SIZE:]
        if not flags & _FLAG_ZSTD:
            return payload
        return self._decompress(payload, dict_id, session_id, seq)

    def _decompress(
        self, payload: bytes | memoryview, dict_id: int, session_id: str | None, seq: int | None
    ) -> bytes:
        if dict_id and dict_id not in self._dicts:
            raise CorruptRecordError(
                f"record needs zstd dictionary {dict_id}, which this log does not hold",
                session_id=session_id,
                seq=seq,
            )
        try:
            return self._decompressor(dict_id).decompress(payload)
        except zstandard.ZstdError as exc:
            raise CorruptRecordError(
                f"zstd payload does not decompress: {exc}", session_id=session_id, seq=seq
            ) from None

    def _compressor(self, dict_id: int) -> zstandard.ZstdCompressor:
        contexts: dict[int, Any] = self._local.__dict__.setdefault("compressors", {})
        compressor = contexts.get(dict_id)
        if compressor is None:
            compressor = zstandard.ZstdCompressor(
                level=self._level,
                dict_data=self._dicts.get(dict_id),
                write_checksum=False,  # the frame's CRC covers the payload
                write_content_size=True,
                write_dict_id=False,  # the frame header names the dictionary
            )
            contexts[dict_id] = compressor
        return compressor

    def _decompressor(self, dict_id: int) -> zstandard.ZstdDecompressor:
        contexts: dict[int, Any] = self._local.__dict__.setdefault("decompressors", {})
        decompressor = contexts.get(dict_id)
        if decompressor is None:
            decompressor = zstandard.ZstdDecompressor(dict_data=self._dicts.get(dict_id))
            contexts[dict_id] = decompressor
        return decompressor


class Deferred(msgspec.Struct, gc=False):
    """A checked record whose zstd frame is still to be decompressed (see ``decode_at``).

    Not tracked by the cyclic garbage collector (it holds no containers): a replay makes one
    per compressed record.
    """

    dict_id: int
    frame: bytes
    session_id: str | None
    seq: int | None


def _decode_checked(payload: Any, session_id: str | None, seq: int | None) -> Event:
    """Decode the payload of a record whose checksum matched, without re-validating messages."""
    checks = CHECKS
    checks.skip = True  # the messages were validated when they were appended
    try:
        return _config_checked(_decoder.decode(payload), payload)
    except msgspec.MsgspecError:
        pass
    finally:
        checks.skip = False
    return decode_payload(payload, session_id=session_id, seq=seq)


_DEFAULT_CODEC = Codec()


def encode_event(event: Event) -> bytes:
    """Encode ``event`` into a framed record (msgpack, zstd above the threshold, CRC-32).

    Uses no dictionary; a log with a trained dictionary encodes through its own :class:`Codec`.

    Raises:
        TypeError: ``event`` is not one of the event types.
    """
    return _DEFAULT_CODEC.encode(event)


def decode_event(data: bytes, *, session_id: str | None = None, seq: int | None = None) -> Event:
    """Verify and decode a framed record made by :func:`encode_event`.

    Args:
        data: The record.
        session_id: The session of the record, named in errors.
        seq: The seq of the record, named in errors.

    Raises:
        CorruptRecordError: The checksum fails, the payload does not decode, or the record needs
            a dictionary (decode those through the log's :class:`Codec`).
        UnknownEventTypeError: The tag is neither current nor known to an upcaster.
        EventDecodeError: The record needs a newer ctxledger or an upcaster failed.
    """
    return _DEFAULT_CODEC.decode(data, session_id=session_id, seq=seq)
