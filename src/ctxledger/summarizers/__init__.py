"""Summarisers: the offline extractive default and HTTP clients for hosted models.

The names are imported on first use (PEP 562): the offline summariser (what a summary worker
process runs) does not load the HTTP clients.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxledger._lazy import lazy_exports

if TYPE_CHECKING:  # what each name is, for type checkers and readers
    from ctxledger.summarizers.anthropic import AnthropicSummarizer
    from ctxledger.summarizers.base import Summarizer, SummaryRequest, describe_summarizer
    from ctxledger.summarizers.extractive import ExtractiveSummarizer
    from ctxledger.summarizers.openai import OpenAIChatSummarizer

__all__ = [
    "AnthropicSummarizer",
    "ExtractiveSummarizer",
    "OpenAIChatSummarizer",
    "Summarizer",
    "SummaryRequest",
    "describe_summarizer",
]

#: The module each public name is imported from.
_HOMES = {
    "AnthropicSummarizer": "ctxledger.summarizers.anthropic",
    "ExtractiveSummarizer": "ctxledger.summarizers.extractive",
    "OpenAIChatSummarizer": "ctxledger.summarizers.openai",
    "Summarizer": "ctxledger.summarizers.base",
    "SummaryRequest": "ctxledger.summarizers.base",
    "describe_summarizer": "ctxledger.summarizers.base",
}


if not TYPE_CHECKING:  # type checkers see the imports above, and no name of any other kind
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES)
