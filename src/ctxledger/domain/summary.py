"""The summariser interface the domain asks for: any callable from :class:`SummaryRequest` to text.

It is part of the domain (compaction plans are summarised through it); the implementations live
in :mod:`ctxledger.summarizers`, which re-exports these names.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import msgspec

from ctxledger.messages import Message

__all__ = [
    "AsyncSummarizer",
    "Summarizer",
    "SummaryRequest",
    "describe_summarizer",
    "is_async_summarizer",
]


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


@runtime_checkable
class AsyncSummarizer(Protocol):
    """A summariser that is a coroutine function: awaited on an event loop, never on a thread."""

    async def __call__(self, request: SummaryRequest, /) -> str | None: ...


def is_async_summarizer(summarizer: object) -> bool:
    """Whether ``summarizer`` (a function or a callable object) is a coroutine function."""
    if inspect.iscoroutinefunction(summarizer):
        return True
    call = getattr(type(summarizer), "__call__", None)  # noqa: B004 - the method, not callable()
    return call is not None and inspect.iscoroutinefunction(call)


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
