"""Typed events, their codec and upcasters."""

from ctxledger.events.types import (
    EVENT_TYPES,
    CheckpointCreated,
    CompactionFailed,
    CompactionStarted,
    ConfigChanged,
    Event,
    EventBase,
    MessageAppended,
    MessagePinned,
    SessionForked,
    SessionOpened,
    ToolResultSynthesized,
    TranscriptExported,
    UsageReported,
    ViewServed,
)

__all__ = [
    "EVENT_TYPES",
    "CheckpointCreated",
    "CompactionFailed",
    "CompactionStarted",
    "ConfigChanged",
    "Event",
    "EventBase",
    "MessageAppended",
    "MessagePinned",
    "SessionForked",
    "SessionOpened",
    "ToolResultSynthesized",
    "TranscriptExported",
    "UsageReported",
    "ViewServed",
]
