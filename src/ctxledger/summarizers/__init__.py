"""Summarisers: the offline extractive default and HTTP clients for hosted models."""

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
