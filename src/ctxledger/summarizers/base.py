"""The summariser interface (defined by the domain, :mod:`ctxledger.domain.summary`)."""

from ctxledger.domain.summary import Summarizer, SummaryRequest, describe_summarizer

__all__ = ["Summarizer", "SummaryRequest", "describe_summarizer"]
