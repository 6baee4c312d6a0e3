"""The record codec: framing, compression, checksums, errors and upcasting."""

from __future__ import annotations

import os
import threading
import zlib
from collections.abc import Iterator

import msgspec
import pytest
import zstandard

from ctxledger.errors import CorruptRecordError, EventDecodeError, UnknownEventTypeError
from ctxledger.events import upcasters
from ctxledger.events.codec import (
    COMPRESS_THRESHOLD,
    HEADER_SIZE,
    Codec,
    decode_event,
    decode_payload,
    encode_event,
    encode_payload,
)
from ctxledger.events.types import MessageAppended, UsageReported
from ctxledger.messages import Message, ToolCall


def small_event() -> MessageAppended:
    """A message well below the compression threshold."""
    return MessageAppended(message=Message.user("hello").with_seq(1))


def large_event(seq: int = 2) -> MessageAppended:
    """A compressible tool result well above the compression threshold."""
    body = "\n".join(f"src/pkg/module_{n:04d}.py: 1{n % 7}0 lines" for n in range(200))
    return MessageAppended(message=Message.tool(body, "call_1", "bash").with_seq(seq))


def flags(record: bytes) -> int:
    """The flags byte of a record."""
    return record[1]


def reframe(payload: bytes, version: int = 1, flag_bits: int = 0, dict_id: int = 0) -> bytes:
    """Build a record with a valid checksum around arbitrary header fields and payload."""
    prefix = bytes([version, flag_bits]) + dict_id.to_bytes(4, "big")
    return prefix + zlib.crc32(payload, zlib.crc32(prefix)).to_bytes(4, "big") + payload


@pytest.fixture
def isolated_upcasters(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Let a test register upcasters without leaking them into other tests."""
    monkeypatch.setattr(upcasters, "_UPCASTERS", dict(upcasters._UPCASTERS))
    yield


def test_small_event_round_trips() -> None:
    """A small event decodes back to an equal event."""
    assert decode_event(encode_event(small_event())) == small_event()


def test_small_event_is_stored_raw() -> None:
    """Events below the threshold are not compressed."""
    assert flags(encode_event(small_event())) == 0


def test_large_event_is_compressed() -> None:
    """Events above the threshold that compress are stored as zstd."""
    assert flags(encode_event(large_event())) & 1


def test_large_event_round_trips() -> None:
    """A compressed event decodes back to an equal event."""
    assert decode_event(encode_event(large_event())) == large_event()


def test_incompressible_payload_stays_raw() -> None:
    """A payload that zstd cannot shrink is stored raw."""
    assert flags(Codec().frame(os.urandom(COMPRESS_THRESHOLD * 4))) == 0


def test_frame_round_trips_bytes() -> None:
    """frame and unframe are inverse for arbitrary bytes."""
    data = os.urandom(100) * 50
    codec = Codec()
    assert codec.unframe(codec.frame(data)) == data


def test_record_starts_with_format_version_one() -> None:
    """The first byte of every record is the format version."""
    assert encode_event(small_event())[0] == 1


def test_encoding_is_deterministic_for_map_order() -> None:
    """Metadata maps with the same items in another order encode to the same bytes."""

    def event(metadata: dict[str, int]) -> MessageAppended:
        return MessageAppended(
            message=msgspec.structs.replace(Message.user("x"), metadata=metadata)
        )

    assert encode_event(event({"b": 1, "a": 2})) == encode_event(event({"a": 2, "b": 1}))


@pytest.mark.parametrize("offset", [0, 1, 2, 5, 6, 9, HEADER_SIZE, -1])
def test_any_flipped_byte_is_a_corrupt_record(offset: int) -> None:
    """Flipping a byte anywhere in a record fails its checksum."""
    record = bytearray(encode_event(large_event()))
    record[offset] ^= 0x01
    with pytest.raises(CorruptRecordError):
        decode_event(bytes(record))


def test_truncated_record_is_corrupt() -> None:
    """A record shorter than its header is corrupt."""
    with pytest.raises(CorruptRecordError):
        decode_event(encode_event(small_event())[:6])


def test_corrupt_record_names_session_and_seq() -> None:
    """The error carries the position it was given."""
    record = bytearray(encode_event(small_event()))
    record[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError) as caught:
        decode_event(bytes(record), session_id="s1", seq=7)
    assert (caught.value.session_id, caught.value.seq) == ("s1", 7)


def test_corrupt_zstd_payload_with_valid_checksum_is_corrupt() -> None:
    """A compressed flag over bytes that are not zstd is a corrupt record, not a crash."""
    with pytest.raises(CorruptRecordError):
        decode_event(reframe(b"\x00not zstd at all", flag_bits=1))


def test_non_msgpack_payload_is_corrupt() -> None:
    """A payload that is not msgpack is a corrupt record."""
    with pytest.raises(CorruptRecordError):
        decode_event(reframe(b"\xc1\xc1\xc1"))


def test_known_tag_with_wrong_shape_is_corrupt() -> None:
    """A current tag whose fields do not match the schema is a corrupt record."""
    payload = msgspec.msgpack.encode({"type": "usage_reported", "prompt_tokens": "many"})
    with pytest.raises(CorruptRecordError, match="usage_reported"):
        decode_event(reframe(payload))


def test_payload_that_is_not_a_map_is_corrupt() -> None:
    """A msgpack payload that is not an event map is a corrupt record."""
    with pytest.raises(CorruptRecordError):
        decode_event(reframe(msgspec.msgpack.encode([1, 2, 3])))


def test_newer_format_version_is_not_reported_as_corruption() -> None:
    """A record of an unknown future format asks for a newer ctxledger."""
    with pytest.raises(EventDecodeError, match="newer") as caught:
        decode_event(reframe(encode_payload(small_event()), version=2))
    assert not isinstance(caught.value, CorruptRecordError)


def test_unknown_flag_bits_ask_for_a_newer_version() -> None:
    """Flag bits this version does not know are refused, not guessed."""
    with pytest.raises(EventDecodeError, match="newer"):
        decode_event(reframe(encode_payload(small_event()), flag_bits=0x80))


def test_unknown_tag_raises_unknown_event_type() -> None:
    """An event tag nobody knows fails loudly, naming the tag."""
    payload = msgspec.msgpack.encode({"type": "quantum_leap", "x": 1})
    with pytest.raises(UnknownEventTypeError) as caught:
        decode_event(reframe(payload))
    assert caught.value.tag == "quantum_leap"


def test_unknown_tag_notes_the_position() -> None:
    """The unknown-tag error notes where the record is stored."""
    payload = msgspec.msgpack.encode({"type": "quantum_leap"})
    with pytest.raises(UnknownEventTypeError) as caught:
        decode_event(reframe(payload), session_id="s9", seq=4)
    assert "s9" in " ".join(caught.value.__notes__)


def test_old_tag_is_upcast() -> None:
    """The built-in example upcaster turns message_added_v0 into MessageAppended."""
    payload = msgspec.msgpack.encode({"type": "message_added_v0", "role": "user", "content": "hi"})
    assert decode_payload(payload) == MessageAppended(message=Message.user("hi"))


@pytest.mark.usefixtures("isolated_upcasters")
def test_upcasters_chain_to_the_current_tag() -> None:
    """An upcaster may produce another old tag; the chain is followed to a current one."""

    @upcasters.register_upcaster("usage_v0")
    def _v0(raw: dict[str, object]) -> dict[str, object]:
        return {"type": "usage_v1", "tokens": raw["n"]}

    @upcasters.register_upcaster("usage_v1")
    def _v1(raw: dict[str, object]) -> dict[str, object]:
        return {"type": "usage_reported", "prompt_tokens": raw["tokens"]}

    payload = msgspec.msgpack.encode({"type": "usage_v0", "n": 42})
    assert decode_payload(payload) == UsageReported(prompt_tokens=42)


@pytest.mark.usefixtures("isolated_upcasters")
def test_upcaster_loop_is_an_error() -> None:
    """Upcasters that cycle raise EventDecodeError instead of spinning forever."""
    upcasters.register_upcaster("ping")(lambda raw: {"type": "pong"})
    upcasters.register_upcaster("pong")(lambda raw: {"type": "ping"})
    with pytest.raises(EventDecodeError, match="loop"):
        decode_payload(msgspec.msgpack.encode({"type": "ping"}))


@pytest.mark.usefixtures("isolated_upcasters")
def test_invalid_upcast_is_a_decode_error_not_corruption() -> None:
    """An upcaster producing an invalid event is reported as a decode error."""
    upcasters.register_upcaster("bad_v0")(lambda raw: {"type": "usage_reported"})
    with pytest.raises(EventDecodeError) as caught:
        decode_payload(msgspec.msgpack.encode({"type": "bad_v0"}))
    assert not isinstance(caught.value, CorruptRecordError)


def test_upcaster_for_a_current_tag_is_refused() -> None:
    """Registering an upcaster under a live tag would shadow it: ValueError."""
    with pytest.raises(ValueError):
        upcasters.register_upcaster("message_appended")


@pytest.mark.usefixtures("isolated_upcasters")
def test_second_upcaster_for_a_tag_is_refused() -> None:
    """A tag has at most one upcaster."""
    with pytest.raises(ValueError):
        upcasters.register_upcaster("message_added_v0")(lambda raw: raw)


def test_dictionary_compressed_record_round_trips() -> None:
    """A codec with an active dictionary writes records it can read back."""
    samples = [encode_payload(large_event(seq)) for seq in range(300)]
    codec = Codec({3: zstandard.train_dictionary(4096, samples).as_bytes()}, active=3)
    record = codec.encode(large_event(7))
    assert int.from_bytes(record[2:6], "big") == 3 and codec.decode(record) == large_event(7)


def test_record_needing_an_unknown_dictionary_is_corrupt() -> None:
    """Decoding without the dictionary a record names fails as a corrupt record."""
    samples = [encode_payload(large_event(seq)) for seq in range(300)]
    codec = Codec({3: zstandard.train_dictionary(4096, samples).as_bytes()}, active=3)
    with pytest.raises(CorruptRecordError, match="dictionary 3"):
        decode_event(codec.encode(large_event()))


def test_activating_an_unknown_dictionary_fails() -> None:
    """Only a dictionary the codec holds can be activated."""
    with pytest.raises(KeyError):
        Codec().activate(5)


def test_encoding_a_non_event_is_a_type_error() -> None:
    """Only events are encoded."""
    with pytest.raises(TypeError):
        encode_event({"type": "usage_reported"})  # type: ignore[arg-type]


def test_codec_is_safe_to_share_between_threads() -> None:
    """Threads encoding through one codec at once produce records that all decode."""
    codec = Codec()
    records: list[bytes] = []

    def encode_many(offset: int) -> None:
        records.extend(codec.encode(large_event(offset + n)) for n in range(50))

    threads = [threading.Thread(target=encode_many, args=(i * 100,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({codec.decode(record).message.seq for record in records}) == 200  # type: ignore[union-attr]


def test_tool_calls_round_trip() -> None:
    """Assistant tool calls survive encoding."""
    event = MessageAppended(
        message=Message.assistant("", [ToolCall("c1", "read", '{"path": "a.py"}')]).with_seq(3)
    )
    assert decode_event(encode_event(event)) == event
