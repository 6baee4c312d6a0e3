"""The summariser interface (defined by the domain, :mod:`ctxledger.domain.summary`)."""

from ctxledger.domain.summary import Summarizer, SummaryRequest

__all__ = ["Summarizer", "SummaryRequest"]
