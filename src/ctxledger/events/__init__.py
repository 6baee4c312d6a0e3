"""Typed events, their codec and upcasters."""

from ctxledger.events.codec import Codec, decode_event, encode_event
from ctxledger.events.types import (
    EVENT_TYPES,
    CheckpointCreated,
    CompactionFailed,
    CompactionStarted,
    ConfigChanged,
    Event,
    EventBase,
    HistoryCleared,
    MessageAppended,
    MessagePinned,
    MessageRetracted,
    SessionForked,
    SessionOpened,
    ToolResultSynthesized,
    TranscriptExported,
    UsageReported,
    ViewServed,
)
from ctxledger.events.upcasters import register_upcaster

__all__ = [
    "EVENT_TYPES",
    "CheckpointCreated",
    "Codec",
    "CompactionFailed",
    "CompactionStarted",
    "ConfigChanged",
    "Event",
    "EventBase",
    "HistoryCleared",
    "MessageAppended",
    "MessagePinned",
    "MessageRetracted",
    "SessionForked",
    "SessionOpened",
    "ToolResultSynthesized",
    "TranscriptExported",
    "UsageReported",
    "ViewServed",
    "decode_event",
    "encode_event",
    "register_upcaster",
]
