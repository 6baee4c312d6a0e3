"""How the read-only verbs print a session: message lines, event lines and a model view.

``show`` prints messages (one-line previews, or whole with ``--full``) and raw events, ``view``
a model view as text; long output goes through a pager on a terminal.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import click

from ctxledger.domain import ModelView
from ctxledger.events import (
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
    ToolResultSynthesized,
    TranscriptExported,
    UsageReported,
    ViewServed,
)
from ctxledger.messages import Message
from ctxledger.tooling.format import clip, human_time, human_tokens

__all__ = ["emit", "event_line", "message_lines", "view_text"]

_PREVIEW = 96
_BACKGROUND = " [background]"  # marks the events of a summary prepared ahead of need


def emit(lines: list[str], pager: bool) -> None:
    """Print ``lines``, through a pager when asked, on a terminal, and there are many."""
    if pager and sys.stdout.isatty() and len(lines) > 40:
        click.echo_via_pager("\n".join(lines) + "\n")
    else:
        for line in lines:
            click.echo(line)


def message_lines(messages: list[Message], full: bool) -> Iterator[str]:
    """One preview line per message, or each message whole with ``full``."""
    for message in messages:
        label = _label(message)
        if full:
            yield f"── #{message.seq} {label}"
            if message.content:
                yield message.content
            for call in message.tool_calls:
                yield f"→ {call.name}({call.arguments})  [{call.id}]"
        else:
            text = message.content or " ".join(
                f"→ {c.name}({c.arguments})" for c in message.tool_calls
            )
            suffix = (
                f"  ({len(message.content):,} chars)" if len(message.content) > _PREVIEW else ""
            )
            calls = (
                f"  → {', '.join(c.name for c in message.tool_calls)}"
                if message.tool_calls and message.content
                else ""
            )
            yield f"#{message.seq:<6} {label:<22} {clip(text, _PREVIEW)}{calls}{suffix}"


def _label(message: Message) -> str:
    lost = " lost" if message.metadata.get("lost") else ""
    if message.role == "tool":
        tag = " interrupted" if message.metadata.get("synthetic") else lost
        return f"tool {message.name or ''}{tag}".strip()
    return f"{message.role}{lost}"


def event_line(seq: int, timestamp: float, event: Event) -> str:
    """One line per event: seq, time, tag and what it holds."""
    tag = type(event).__struct_config__.tag
    return f"{seq:<7} {human_time(timestamp)}  {tag:<24} {_event_detail(event)}"


def _event_detail(event: Event) -> str:
    if isinstance(event, MessageAppended | ToolResultSynthesized):
        message = event.message
        return f"#{message.seq} {_label(message)}: {clip(message.content, 60)}"
    if isinstance(event, RecordLost):
        what = f"#{event.message.seq} {_label(event.message)}" if event.message else "no message"
        return f"{what} ({event.reason}): {clip(event.detail, 60)}"
    if isinstance(event, ViewServed):
        return (
            f"through #{event.through_seq}, {event.estimated_tokens:,} tokens, "
            f"{event.message_count} messages, hash {event.view_hash[:12]}"
        )
    if isinstance(event, UsageReported):
        return (
            f"prompt {event.prompt_tokens:,} completion {event.completion_tokens:,} "
            f"through #{event.through_seq}"
        )
    if isinstance(event, CompactionStarted):
        focus = f", focus {event.focus!r}" if event.focus else ""
        return (
            f"{event.reason}{_BACKGROUND if event.background else ''}: covers through "
            f"#{event.covers_through_seq}, retain from #{event.retain_from_seq}{focus}"
        )
    if isinstance(event, SummaryPrepared):
        by = f", {event.summarizer or 'summariser'} {event.summary_seconds:.2f} s"
        return (
            f"prepared {event.compaction_id[:12]}: covers through #{event.covers_through_seq}, "
            f"retain from #{event.retain_from_seq}{by}, "
            f"{event.input_chars:,} → {len(event.summary):,} chars"
        )
    if isinstance(event, CheckpointCreated):
        cp = event.checkpoint
        tokens = f"{cp.tokens_before:,} → {cp.tokens_after:,} tokens"
        meta = ""
        if cp.summarizer or cp.summary_seconds:
            meta = (
                f", {cp.summarizer or 'summariser'} {cp.summary_seconds:.2f} s, "
                f"{cp.input_chars:,} → {cp.output_chars:,} chars"
            )
        facts = f", facts {len(cp.facts):,} chars" if cp.facts else ""
        activated = f", activated prepared {event.compaction_id[:12]}" if event.prepared else ""
        return f"checkpoint {cp.id[:12]} ({cp.reason}) {tokens}{meta}{facts}{activated}"
    if isinstance(event, CheckpointReverted):
        reason = f": {clip(event.reason, 40)}" if event.reason else ""
        again = "the full history" if event.restored is None else event.restored.id[:12]
        return f"reverted {event.checkpoint_id[:12]}, {again} active again{reason}"
    if isinstance(event, CompactionFailed):
        return f"{event.reason}{_BACKGROUND if event.background else ''}: {clip(event.detail, 60)}"
    if isinstance(event, SessionOpened | ConfigChanged):
        config = event.config
        return f"window {config.context_window:,}, threshold {config.compression_threshold}"
    if isinstance(event, SessionForked):
        return f"from {event.parent_id!r} at #{event.at_seq}"
    if isinstance(event, TranscriptExported):
        return f"{event.messages} messages → {event.path}"
    if isinstance(event, MessagePinned | MessageRetracted):
        return f"#{event.seq}"
    if isinstance(event, HistoryCleared):
        return f"through #{event.through_seq}"
    return ""


def view_text(session_id: str, model_view: ModelView) -> str:
    """A model view as text: a two-line header, then each message whole."""
    checkpoint = f" (checkpoint {model_view.checkpoint_id})" if model_view.checkpoint_id else ""
    lines = [
        f"# view of {session_id} through #{model_view.through_seq}: {model_view.mode}{checkpoint}",
        f"# {len(model_view.messages)} messages, "
        f"{human_tokens(model_view.estimated_tokens)} tokens "
        f"estimated, hash {model_view.view_hash}",
    ]
    for message in model_view.messages:
        seq = f"#{message.seq} " if message.seq is not None else ""
        lines.append(f"── {seq}{_label(message)}")
        if message.content:
            lines.append(message.content)
        lines.extend(f"→ {call.name}({call.arguments})  [{call.id}]" for call in message.tool_calls)
    return "\n".join(lines)
