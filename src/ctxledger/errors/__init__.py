"""Every exception ctxledger raises, split by who is at fault.

All of them derive from :class:`CtxLedgerError`. Errors caused by the caller's input co-inherit
``ValueError``; errors of the storage layer co-inherit ``OSError`` only where the meaning fits.
Import them from here: the caller's errors are defined in ``_caller``, those of concurrent
writers in ``_concurrency`` and those of the storage and stored data in ``_storage``, and each
class names this module as its own (tracebacks and pickles read ``ctxledger.errors.<Name>``).
"""

from __future__ import annotations

from ctxledger.errors._base import CtxLedgerError
from ctxledger.errors._caller import (
    BudgetExceededError,
    ConfigError,
    ContextOverflowError,
    HostClosedError,
    InternalError,
    InvalidArgumentError,
    InvalidCheckpointError,
    InvalidMessageError,
    InvalidQueryError,
    InvalidSeqError,
    InvalidSessionIdError,
    InvalidToolCallError,
    InvalidUsageError,
    SessionExistsError,
    SystemPromptMismatchError,
    TraceFormatError,
    UnknownSessionError,
)
from ctxledger.errors._concurrency import LeaseHeldError, LeaseLostError, VersionConflictError
from ctxledger.errors._storage import (
    CorruptRecordError,
    EventDecodeError,
    LogLockedError,
    StorageError,
    UnknownEventTypeError,
)

__all__ = [
    "BudgetExceededError",
    "ConfigError",
    "ContextOverflowError",
    "CorruptRecordError",
    "CtxLedgerError",
    "EventDecodeError",
    "HostClosedError",
    "InternalError",
    "InvalidArgumentError",
    "InvalidCheckpointError",
    "InvalidMessageError",
    "InvalidQueryError",
    "InvalidSeqError",
    "InvalidSessionIdError",
    "InvalidToolCallError",
    "InvalidUsageError",
    "LeaseHeldError",
    "LeaseLostError",
    "LogLockedError",
    "SessionExistsError",
    "StorageError",
    "SystemPromptMismatchError",
    "TraceFormatError",
    "UnknownEventTypeError",
    "UnknownSessionError",
    "VersionConflictError",
]

for _error in (globals()[name] for name in __all__):
    _error.__module__ = __name__

del _error
