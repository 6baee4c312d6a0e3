"""ctxledger: a context window that never overflows and a history that is never lost.

The public API is re-exported here and listed in ``__all__``; ``tests/unit/test_exports.py``
pins it so that the surface changes only on purpose.
"""

from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config
from ctxledger.errors import (
    ConfigError,
    ContextOverflowError,
    CorruptRecordError,
    CtxLedgerError,
    EventDecodeError,
    HostClosedError,
    InvalidMessageError,
    SessionExistsError,
    StorageError,
    UnknownEventTypeError,
    UnknownSessionError,
    VersionConflictError,
)
from ctxledger.messages import Message, ToolCall
from ctxledger.summarizers import Summarizer, SummaryRequest

__version__ = "0.1.0"

__all__ = [
    "Checkpoint",
    "Config",
    "ConfigError",
    "ContextOverflowError",
    "CorruptRecordError",
    "CtxLedgerError",
    "EventDecodeError",
    "HostClosedError",
    "InvalidMessageError",
    "Message",
    "SessionExistsError",
    "StorageError",
    "Summarizer",
    "SummaryRequest",
    "ToolCall",
    "UnknownEventTypeError",
    "UnknownSessionError",
    "VersionConflictError",
    "__version__",
]
