"""Summarisers: the offline extractive default and HTTP clients for hosted models."""

from ctxledger.summarizers.base import Summarizer, SummaryRequest

__all__ = ["Summarizer", "SummaryRequest"]
