"""ctxledger: a context window that never overflows and a history that is never lost.

The public API is re-exported here and listed in ``__all__``; ``tests/unit/test_exports.py``
pins it so that the surface changes only on purpose.
"""

from ctxledger.actors import Host, HostOptions, Session
from ctxledger.checkpoints import Checkpoint, Remask
from ctxledger.config import Config
from ctxledger.domain import (
    CompactionResult,
    Fact,
    LossReport,
    ModelView,
    Placement,
    Tokenizer,
    is_prompt_too_long,
)
from ctxledger.domain.cost import Pricing
from ctxledger.domain.usage import UsageTotals
from ctxledger.errors import (
    BudgetExceededError,
    ConfigError,
    ContextOverflowError,
    CorruptRecordError,
    CtxLedgerError,
    EventDecodeError,
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
    LeaseHeldError,
    LeaseLostError,
    LogLockedError,
    SessionExistsError,
    StorageError,
    SystemPromptMismatchError,
    TraceFormatError,
    UnknownEventTypeError,
    UnknownSessionError,
    VersionConflictError,
)
from ctxledger.messages import Message, ToolCall
from ctxledger.replay.recall_index import RecallHit
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
    "BudgetExceededError",
    "Checkpoint",
    "CompactionResult",
    "Config",
    "ConfigError",
    "ContextOverflowError",
    "CorruptRecordError",
    "CtxLedgerError",
    "EventDecodeError",
    "ExtractiveSummarizer",
    "Fact",
    "Host",
    "HostClosedError",
    "HostOptions",
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
    "LossReport",
    "Message",
    "ModelView",
    "OpenAIChatSummarizer",
    "Placement",
    "Pricing",
    "RecallHit",
    "Remask",
    "Session",
    "SessionExistsError",
    "StorageError",
    "Summarizer",
    "SummaryRequest",
    "SystemPromptMismatchError",
    "Tokenizer",
    "ToolCall",
    "TraceFormatError",
    "UnknownEventTypeError",
    "UnknownSessionError",
    "UsageTotals",
    "VersionConflictError",
    "__version__",
    "is_prompt_too_long",
]
