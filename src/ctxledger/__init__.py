"""ctxledger: a context window that never overflows and a history that is never lost.

The public API is re-exported here and listed in ``__all__``; ``tests/unit/test_exports.py``
pins it so that the surface changes only on purpose.
"""

from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config
from ctxledger.domain import CompactionResult, ModelView, Tokenizer, is_prompt_too_long
from ctxledger.errors import (
    ConfigError,
    ContextOverflowError,
    CorruptRecordError,
    CtxLedgerError,
    EventDecodeError,
    HostClosedError,
    InvalidMessageError,
    InvalidSeqError,
    InvalidSessionIdError,
    SessionExistsError,
    StorageError,
    TraceFormatError,
    UnknownEventTypeError,
    UnknownSessionError,
    VersionConflictError,
)
from ctxledger.messages import Message, ToolCall
from ctxledger.runtime import Host, Session
from ctxledger.summarizers import (
    AnthropicSummarizer,
    ExtractiveSummarizer,
    OpenAIChatSummarizer,
    Summarizer,
    SummaryRequest,
)

__version__ = "0.1.0"

__all__ = [
    "AnthropicSummarizer",
    "Checkpoint",
    "CompactionResult",
    "Config",
    "ConfigError",
    "ContextOverflowError",
    "CorruptRecordError",
    "CtxLedgerError",
    "EventDecodeError",
    "ExtractiveSummarizer",
    "Host",
    "HostClosedError",
    "InvalidMessageError",
    "InvalidSeqError",
    "InvalidSessionIdError",
    "Message",
    "ModelView",
    "OpenAIChatSummarizer",
    "Session",
    "SessionExistsError",
    "StorageError",
    "Summarizer",
    "SummaryRequest",
    "Tokenizer",
    "ToolCall",
    "TraceFormatError",
    "UnknownEventTypeError",
    "UnknownSessionError",
    "VersionConflictError",
    "__version__",
    "is_prompt_too_long",
]
