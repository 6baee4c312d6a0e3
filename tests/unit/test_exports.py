"""The public surface of ``ctxledger`` changes only on purpose."""

from __future__ import annotations

import subprocess
import sys

import ctxledger

PUBLIC = {
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
}


def test_all_is_pinned() -> None:
    """__all__ lists exactly the public names this test knows."""
    assert set(ctxledger.__all__) == PUBLIC


def test_every_public_name_exists_and_is_documented() -> None:
    """Each exported name resolves, and every class and function has a docstring."""
    for name in ctxledger.__all__:
        value = getattr(ctxledger, name)
        if callable(value):
            assert value.__doc__, f"{name} has no docstring"


def test_errors_share_one_base() -> None:
    """Every exported error derives from CtxLedgerError."""
    errors = [getattr(ctxledger, n) for n in ctxledger.__all__ if n.endswith("Error")]
    assert errors and all(issubclass(e, ctxledger.CtxLedgerError) for e in errors)


def test_import_does_not_load_test_or_plot_dependencies() -> None:
    """`import ctxledger` needs neither hypothesis nor matplotlib."""
    code = "import sys, ctxledger; print('hypothesis' in sys.modules, 'matplotlib' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split() == ["False", "False"]
