"""ctxledger: a context window that never overflows and a history that is never lost.

The public API is re-exported here and listed in ``__all__``; ``tests/unit/test_exports.py``
pins it so that the surface changes only on purpose.

Each name is imported from its module on first use (PEP 562): ``import ctxledger`` loads
nothing else, so a command-line verb or a summary worker process pays only for the modules it
uses (``python -c "import ctxledger"`` took ~0.3 s when this file imported them all).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxledger._lazy import lazy_exports

if TYPE_CHECKING:  # what each name is, for type checkers and readers
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

#: The module each public name is imported from.
_HOMES = {
    "AnthropicSummarizer": "ctxledger.summarizers",
    "BudgetExceededError": "ctxledger.errors",
    "Checkpoint": "ctxledger.checkpoints",
    "CompactionResult": "ctxledger.domain",
    "Config": "ctxledger.config",
    "ConfigError": "ctxledger.errors",
    "ContextOverflowError": "ctxledger.errors",
    "CorruptRecordError": "ctxledger.errors",
    "CtxLedgerError": "ctxledger.errors",
    "EventDecodeError": "ctxledger.errors",
    "ExtractiveSummarizer": "ctxledger.summarizers",
    "Fact": "ctxledger.domain",
    "Host": "ctxledger.actors",
    "HostClosedError": "ctxledger.errors",
    "HostOptions": "ctxledger.actors",
    "InternalError": "ctxledger.errors",
    "InvalidArgumentError": "ctxledger.errors",
    "InvalidCheckpointError": "ctxledger.errors",
    "InvalidMessageError": "ctxledger.errors",
    "InvalidQueryError": "ctxledger.errors",
    "InvalidSeqError": "ctxledger.errors",
    "InvalidSessionIdError": "ctxledger.errors",
    "InvalidToolCallError": "ctxledger.errors",
    "InvalidUsageError": "ctxledger.errors",
    "LeaseHeldError": "ctxledger.errors",
    "LeaseLostError": "ctxledger.errors",
    "LogLockedError": "ctxledger.errors",
    "LossReport": "ctxledger.domain",
    "Message": "ctxledger.messages",
    "ModelView": "ctxledger.domain",
    "OpenAIChatSummarizer": "ctxledger.summarizers",
    "Placement": "ctxledger.domain",
    "Pricing": "ctxledger.domain.cost",
    "RecallHit": "ctxledger.replay.recall_index",
    "Remask": "ctxledger.checkpoints",
    "Session": "ctxledger.actors",
    "SessionExistsError": "ctxledger.errors",
    "StorageError": "ctxledger.errors",
    "Summarizer": "ctxledger.summarizers",
    "SummaryRequest": "ctxledger.summarizers",
    "SystemPromptMismatchError": "ctxledger.errors",
    "Tokenizer": "ctxledger.domain",
    "ToolCall": "ctxledger.messages",
    "TraceFormatError": "ctxledger.errors",
    "UnknownEventTypeError": "ctxledger.errors",
    "UnknownSessionError": "ctxledger.errors",
    "UsageTotals": "ctxledger.domain.usage",
    "VersionConflictError": "ctxledger.errors",
    "is_prompt_too_long": "ctxledger.domain",
}

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


if not TYPE_CHECKING:  # type checkers see the imports above, and no name of any other kind
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES)
