"""The base of every ctxledger exception (re-exported by :mod:`ctxledger.errors`)."""

from __future__ import annotations

__all__ = ["CtxLedgerError"]


class CtxLedgerError(Exception):
    """Raised for every failure that ctxledger itself detects; the base of all its errors."""
