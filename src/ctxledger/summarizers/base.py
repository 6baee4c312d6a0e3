"""The summariser interface: any callable from :class:`SummaryRequest` to ``str | None``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import msgspec

from ctxledger.messages import Message

__all__ = ["Summarizer", "SummaryRequest", "describe_summarizer"]


class SummaryRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What a summariser is asked to summarise.

    Attributes:
        messages: The newly covered messages, oldest first (with their seqs).
        previous_summary: The active checkpoint's summary, to be merged (incremental summaries).
        focus: What a manual compaction asked to keep, if anything.
        max_chars: The room the planner reserved for the summary; longer answers are cut to it.
    """

    messages: tuple[Message, ...]
    previous_summary: str | None = None
    focus: str | None = None
    max_chars: int = 4000

    @classmethod
    def of(
        cls,
        messages: Sequence[Message],
        previous_summary: str | None = None,
        focus: str | None = None,
        max_chars: int = 4000,
    ) -> SummaryRequest:
        """Build a request from any sequence of messages."""
        return cls(
            messages=tuple(messages),
            previous_summary=previous_summary,
            focus=focus,
            max_chars=max_chars,
        )


@runtime_checkable
class Summarizer(Protocol):
    """Any callable that turns a :class:`SummaryRequest` into a summary.

    Returning ``None`` or ``""`` (or raising, or timing out) makes the compaction end with
    ``summary_unavailable``; the previous checkpoint stays active.
    """

    def __call__(self, request: SummaryRequest, /) -> str | None: ...


def describe_summarizer(summarizer: object) -> str:
    """Name a summariser for the checkpoint's record: its class, and ``:model`` where it has one.

    Example:
        >>> from ctxledger import ExtractiveSummarizer
        >>> describe_summarizer(ExtractiveSummarizer())
        'ExtractiveSummarizer'
    """
    name = getattr(summarizer, "__name__", None) or type(summarizer).__name__
    model = getattr(summarizer, "model", None)
    return f"{name}:{model}" if isinstance(model, str) and model else str(name)
