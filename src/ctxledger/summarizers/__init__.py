"""Summarisers: the offline extractive default and HTTP clients for hosted models."""

from ctxledger.summarizers.base import Summarizer, SummaryRequest
from ctxledger.summarizers.extractive import ExtractiveSummarizer

__all__ = ["ExtractiveSummarizer", "Summarizer", "SummaryRequest"]
