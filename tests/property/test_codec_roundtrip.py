"""Property: every event the vocabulary can express survives the codec, and damage never decodes."""

from __future__ import annotations

import json

import msgspec
import zstandard
from hypothesis import assume, given
from hypothesis import strategies as st

from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config, upcast_config
from ctxledger.errors import ConfigError, CorruptRecordError
from ctxledger.events.codec import Codec, decode_event, encode_event, encode_payload
from ctxledger.events.types import (
    EVENT_TYPES,
    BudgetExhausted,
    CheckpointCreated,
    CheckpointReverted,
    CompactionFailed,
    CompactionStarted,
    ConfigChanged,
    Event,
    HistoryCleared,
    MessageAppended,
    MessagePinned,
    MessageRetracted,
    RecordLost,
    SessionForked,
    SessionOpened,
    SummaryPrepared,
    TokenizerCalibrated,
    ToolResultSynthesized,
    TranscriptExported,
    UsageReported,
    ViewServed,
)
from ctxledger.messages import Message, ToolCall

# Text as agents produce it: mostly short, sometimes long and repetitive (compressed on disk).
_chars = st.characters(blacklist_categories=("Cs",))
texts = st.one_of(
    st.text(_chars, max_size=80),
    st.text(_chars, min_size=1, max_size=40).map(lambda chunk: chunk * 60),
)
ids = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=16)
counts = st.integers(min_value=0, max_value=2**40)
seqs = st.integers(min_value=1, max_value=2**31)
finite = st.floats(allow_nan=False, allow_infinity=False)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(_chars, max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(_chars, max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
arguments = st.dictionaries(st.text(_chars, max_size=10), json_values, max_size=4).map(json.dumps)
tool_calls = st.lists(
    st.builds(ToolCall, ids, ids, arguments), max_size=3, unique_by=lambda call: call.id
).map(tuple)
metadata = st.dictionaries(st.text(_chars, max_size=10), json_values, max_size=3)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    """Any valid message, with a seq."""
    role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
    return Message(
        role=role,
        content=draw(texts),
        tool_calls=draw(tool_calls) if role == "assistant" else (),
        tool_call_id=draw(ids) if role == "tool" else None,
        name=draw(st.none() | ids),
        seq=draw(seqs),
        metadata=draw(metadata),
    )


_config_fields = st.fixed_dictionaries(
    {
        "context_window": st.integers(1, 2_000_000),
        "compression_threshold": st.floats(0.01, 1.0),
        "min_retain_rounds": st.integers(0, 50),
        "summary_timeout": st.floats(0.1, 3600),
        "micro_keep_recent": st.integers(0, 20),
        "micro_preserve_tools": st.lists(ids, max_size=3).map(tuple),
        "micro_batch": st.integers(1, 32),
        "snapshot_interval": st.integers(1, 10_000),
        "threshold_policy": st.sampled_from(["fixed", "dynamic"]),
        "prepare_threshold": st.sampled_from([0.0, 0.5, 0.85, 0.99]),
        "fact_index_chars": st.integers(0, 100_000),
    }
)


@st.composite
def _configs(draw: st.DrawFn) -> Config:
    """A Config built now (schema 4; values the schema refuses are not drawn), or one
    recorded before the two marks (schema 3, upcast), which carries older values."""
    fields = draw(_config_fields)
    if draw(st.booleans()):
        return msgspec.convert(upcast_config(fields), Config)
    fields["compaction_target"] = draw(st.none() | st.floats(0.001, 0.999))
    fields["fact_index_chars"] = draw(st.none() | st.just(0) | st.integers(1, 100_000))
    try:
        return Config(**fields)
    except ConfigError:
        assume(False)
        raise  # unreachable: assume(False) rejects the example


configs = _configs()
reasons = st.sampled_from(["threshold_exceeded", "prompt_too_long", "manual"])
checkpoints = st.builds(
    Checkpoint,
    id=ids,
    summary=texts,
    retain_from_seq=seqs,
    covers_through_seq=counts,
    reason=reasons,
    focus=st.none() | texts,
    created_at=finite,
    previous_checkpoint_id=st.none() | ids,
    tokens_before=counts,
    tokens_after=counts,
    input_hash=st.text("0123456789abcdef", max_size=64),
    facts=texts,
    summarizer=ids,
    summary_seconds=st.floats(0, 1e6),
    input_chars=counts,
    summarizer_calls=counts,
)

#: One strategy per event type; a new event type must be added here (a test checks).
EVENT_STRATEGIES: dict[type, st.SearchStrategy[Event]] = {
    SessionOpened: st.builds(SessionOpened, session_id=ids, config=configs, created_at=finite),
    MessageAppended: st.builds(MessageAppended, message=messages()),
    UsageReported: st.builds(
        UsageReported,
        prompt_tokens=counts,
        completion_tokens=counts,
        through_seq=counts,
        cached_tokens=counts,
        cache_write_tokens=counts,
    ),
    CompactionStarted: st.builds(
        CompactionStarted,
        compaction_id=ids,
        reason=reasons,
        retain_from_seq=seqs,
        covers_through_seq=counts,
        estimated_tokens=counts,
        focus=st.none() | texts,
        attempt=st.integers(0, 5),
        background=st.booleans(),
    ),
    CheckpointCreated: st.builds(
        CheckpointCreated, compaction_id=ids, checkpoint=checkpoints, prepared=st.booleans()
    ),
    CompactionFailed: st.builds(
        CompactionFailed, compaction_id=ids, reason=ids, detail=texts, background=st.booleans()
    ),
    SummaryPrepared: st.builds(
        SummaryPrepared,
        compaction_id=ids,
        retain_from_seq=seqs,
        covers_through_seq=counts,
        summary=texts,
        input_hash=st.text("0123456789abcdef", max_size=64),
        previous_checkpoint_id=st.none() | ids,
        max_chars=counts,
    ),
    ToolResultSynthesized: st.builds(ToolResultSynthesized, message=messages(), reason=ids),
    ViewServed: st.builds(
        ViewServed,
        through_seq=counts,
        estimated_tokens=counts,
        view_hash=st.text("0123456789abcdef", min_size=64, max_size=64),
        checkpoint_id=st.none() | ids,
        message_count=counts,
        view_chars=counts,
    ),
    SessionForked: st.builds(SessionForked, parent_id=ids, at_seq=counts, parent_event_seq=counts),
    TranscriptExported: st.builds(
        TranscriptExported, path=texts, messages=counts, checkpoints=counts, sha256=ids
    ),
    ConfigChanged: st.builds(ConfigChanged, config=configs),
    MessagePinned: st.builds(MessagePinned, seq=seqs),
    CheckpointReverted: st.builds(
        CheckpointReverted, checkpoint_id=ids, restored=st.none() | checkpoints, reason=texts
    ),
    MessageRetracted: st.builds(MessageRetracted, seq=seqs),
    HistoryCleared: st.builds(HistoryCleared, through_seq=counts),
    BudgetExhausted: st.builds(BudgetExhausted, cap=counts, total=counts),
    RecordLost: st.builds(
        RecordLost,
        message=st.none() | messages(),
        reason=st.sampled_from(["damaged", "unfoldable"]),
        detail=texts,
        lost_type=ids,
    ),
    TokenizerCalibrated: st.builds(
        TokenizerCalibrated,
        samples=counts,
        mean_chars=st.floats(0, 1e9),
        mean_tokens=st.floats(0, 1e9),
        m2_chars=st.floats(0, 1e18),
        m2_tokens=st.floats(0, 1e18),
        co_moment=st.floats(-1e18, 1e18),
        chars_per_token=st.floats(0, 3),
    ),
}
events: st.SearchStrategy[Event] = st.one_of(*EVENT_STRATEGIES.values())

_DICT_CODEC = Codec(
    {
        1: zstandard.train_dictionary(
            2048,
            [
                encode_payload(MessageAppended(message=Message.user(f"sample {n} " * (n % 40 + 1))))
                for n in range(400)
            ],
        ).as_bytes()
    },
    active=1,
)


def test_strategy_covers_every_event_type() -> None:
    """The generator draws from every event type of the vocabulary."""
    assert set(EVENT_STRATEGIES) == set(EVENT_TYPES)


@given(events)
def test_every_event_round_trips(event: Event) -> None:
    """encode_event then decode_event returns an equal event."""
    assert decode_event(encode_event(event)) == event


@given(events)
def test_every_event_round_trips_through_a_dictionary(event: Event) -> None:
    """With a trained dictionary active, events still decode to equal events."""
    assert _DICT_CODEC.decode(_DICT_CODEC.encode(event)) == event


@given(events)
def test_encoding_is_deterministic(event: Event) -> None:
    """Encoding the same event twice gives the same bytes."""
    assert encode_event(event) == encode_event(event)


@given(events, st.data())
def test_a_flipped_byte_never_decodes(event: Event, data: st.DataObject) -> None:
    """Flipping any bit of a record is detected as corruption."""
    record = bytearray(encode_event(event))
    offset = data.draw(st.integers(0, len(record) - 1))
    record[offset] ^= 1 << data.draw(st.integers(0, 7))
    try:
        decode_event(bytes(record))
    except CorruptRecordError:
        return
    raise AssertionError("a damaged record decoded")
