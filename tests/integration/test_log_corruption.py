"""Corruption test: damage stored bytes with raw lmdb; reads fail loudly and precisely."""

from __future__ import annotations

import zlib
from pathlib import Path

import lmdb
import pytest

from ctxledger.errors import CorruptRecordError
from ctxledger.events.codec import HEADER_SIZE
from ctxledger.events.types import Event, MessageAppended
from ctxledger.messages import Message
from ctxledger.storage import LmdbEventLog
from ctxledger.storage._layout import STAMP_SIZE, pack_pair, pack_u64


def events(count: int) -> list[Event]:
    """Messages alternating small (stored raw) and large (stored compressed)."""
    out: list[Event] = []
    for seq in range(1, count + 1):
        text = f"message {seq}" if seq % 2 else " ".join(f"token{n % 97}" for n in range(900))
        out.append(MessageAppended(message=Message.user(text).with_seq(seq)))
    return out


@pytest.fixture
def path(tmp_path: Path) -> Path:
    """A closed log with sessions "a" (session number 1) and "b" (2), five events each."""
    with LmdbEventLog.open(tmp_path / "log") as log:
        log.append("a", events(5), expected_seq=0)
        log.append("b", events(5), expected_seq=0)
    return tmp_path / "log"


def damage(path: Path, db_name: bytes, key: bytes, offset: int) -> None:
    """Flip one byte of the value stored under ``key`` in sub-database ``db_name``."""
    with lmdb.open(str(path), max_dbs=16) as env:
        db = env.open_db(db_name)
        with env.begin(write=True, db=db) as txn:
            value = bytearray(txn.get(key))
            value[offset] ^= 0x20
            txn.put(key, bytes(value))


# Offsets into a stored event value: the envelope, the frame header, the payload, its last byte.
OFFSETS = [0, 12, STAMP_SIZE, STAMP_SIZE + 7, STAMP_SIZE + HEADER_SIZE + 3, -1]


@pytest.mark.parametrize("offset", OFFSETS)
@pytest.mark.parametrize("seq", [3, 4])  # a raw record and a compressed one
def test_damaged_event_names_session_and_seq(path: Path, offset: int, seq: int) -> None:
    """Reading a damaged event raises CorruptRecordError naming its session and seq."""
    damage(path, b"events", pack_pair(1, seq), offset)
    with LmdbEventLog.open(path) as log, pytest.raises(CorruptRecordError) as caught:
        log.read("a")
    assert (caught.value.session_id, caught.value.seq) == ("a", seq)


def test_other_sessions_stay_readable(path: Path) -> None:
    """Damage in one session does not stop another session from being read."""
    damage(path, b"events", pack_pair(1, 3), -1)
    with LmdbEventLog.open(path) as log:
        assert [r.event for r in log.read("b")] == events(5)


def test_undamaged_ranges_of_the_session_stay_readable(path: Path) -> None:
    """The events before and after the damaged one can still be read by range."""
    damage(path, b"events", pack_pair(1, 3), -1)
    with LmdbEventLog.open(path) as log:
        assert [r.seq for r in log.read("a", 1, 2) + log.read("a", 4)] == [1, 2, 4, 5]


def test_streaming_stops_at_the_damaged_event(path: Path) -> None:
    """iter_events raises when it reaches the damaged event."""
    damage(path, b"events", pack_pair(1, 3), -1)
    with LmdbEventLog.open(path) as log, pytest.raises(CorruptRecordError) as caught:
        list(log.iter_events("a"))
    assert caught.value.seq == 3


def test_global_tail_names_the_damaged_event(path: Path) -> None:
    """read_all raises CorruptRecordError naming the damaged event's session and seq."""
    damage(path, b"events", pack_pair(2, 2), -1)
    with LmdbEventLog.open(path) as log, pytest.raises(CorruptRecordError) as caught:
        log.read_all()
    assert (caught.value.session_id, caught.value.seq) == ("b", 2)


def test_damaged_global_index_is_detected(path: Path) -> None:
    """A global entry pointing at the wrong event is reported, not followed silently."""
    damage(path, b"global", pack_u64(2), 15)  # position 2 now names seq 34, which does not exist
    with LmdbEventLog.open(path) as log, pytest.raises(CorruptRecordError):
        log.read_all()


def test_damaged_session_entry_is_detected(path: Path) -> None:
    """A session entry failing its checksum is reported when the session is read."""
    damage(path, b"sessions", b"a", 3)
    with LmdbEventLog.open(path) as log, pytest.raises(CorruptRecordError) as caught:
        log.read("a")
    assert caught.value.session_id == "a"


@pytest.mark.parametrize("offset", OFFSETS)
@pytest.mark.parametrize("seq", [3, 4])  # a raw record and a compressed one
def test_iter_bodies_names_the_damaged_event(path: Path, offset: int, seq: int) -> None:
    """The replay's fast path reports damage exactly as read does."""
    damage(path, b"events", pack_pair(1, seq), offset)
    with LmdbEventLog.open(path) as log, pytest.raises(CorruptRecordError) as caught:
        list(log.iter_bodies("a"))
    assert (caught.value.session_id, caught.value.seq) == ("a", seq)


def forge_bad_zstd(path: Path, key: bytes) -> None:
    """Replace a compressed record's payload with bytes that are not zstd, checksum intact."""
    with lmdb.open(str(path), max_dbs=16) as env:
        db = env.open_db(b"events")
        with env.begin(write=True, db=db) as txn:
            value = bytes(txn.get(key))
            stamp, prefix = value[:STAMP_SIZE], value[STAMP_SIZE : STAMP_SIZE + 6]
            assert prefix[1] & 1, "the record must be a compressed one"
            payload = b"not a zstd frame at all" * 4
            crc = zlib.crc32(payload, zlib.crc32(prefix)).to_bytes(4, "big")
            txn.put(key, stamp + prefix + crc + payload)


@pytest.mark.parametrize("seq", [10, 2998])  # decompressed ahead by the worker / in the last chunk
def test_a_frame_that_does_not_decompress_is_named(tmp_path: Path, seq: int) -> None:
    """A record whose checksum holds but whose zstd frame is bad raises with its seq."""
    with LmdbEventLog.open(tmp_path / "log") as log:
        log.append("a", events(3000), expected_seq=0)
    forge_bad_zstd(tmp_path / "log", pack_pair(1, seq))
    with LmdbEventLog.open(tmp_path / "log") as log:
        with pytest.raises(CorruptRecordError, match="zstd") as caught:
            list(log.iter_bodies("a"))
        assert (caught.value.session_id, caught.value.seq) == ("a", seq)
        with pytest.raises(CorruptRecordError, match="zstd"):
            log.read("a", seq, seq)


def test_iter_bodies_of_a_long_session_equals_iter_events(tmp_path: Path) -> None:
    """Across chunks (some frames decompressed ahead on the worker) both paths agree."""
    with LmdbEventLog.open(tmp_path / "log") as log:
        log.append("a", events(5000), expected_seq=0)
        log.train_dictionary()
        log.append("a", events(5100)[5000:], expected_seq=5000)  # some frames use the dictionary
        expected = [(record.seq, record.event) for record in log.iter_events("a")]
        assert list(log.iter_bodies("a")) == expected
        assert list(log.iter_bodies("a", 2040, 4100)) == expected[2039:4100]
