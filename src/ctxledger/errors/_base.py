"""The base of every ctxledger exception (re-exported by :mod:`ctxledger.errors`)."""

from __future__ import annotations

from typing import Any

__all__ = ["CtxLedgerError"]


class CtxLedgerError(Exception):
    """Raised for every failure that ctxledger itself detects; the base of all its errors.

    Every ctxledger error survives ``pickle`` (a worker process, ``concurrent.futures``,
    multiprocessing) with its message and its attributes, whatever its constructor takes.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        # The default rebuilds an exception by calling its class with ``self.args`` (the
        # message), which fails for the errors whose constructors take named parts; rebuild it
        # without its constructor instead, then restore its attributes.
        return (_rebuild, (type(self), self.args), dict(self.__dict__))


def _rebuild(cls: type[CtxLedgerError], args: tuple[Any, ...]) -> CtxLedgerError:
    """Make an instance of ``cls`` with ``args`` without calling its ``__init__``."""
    error = cls.__new__(cls, *args)
    error.args = args
    return error
