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


def _loaded_after(statement: str, modules: list[str]) -> list[bool]:
    """Which of ``modules`` a fresh interpreter has loaded after ``statement``."""
    code = f"import sys; {statement}; print(*[m in sys.modules for m in {modules!r}])"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return [word == "True" for word in out.stdout.split()]


def test_import_loads_a_name_only_when_it_is_used() -> None:
    """`import ctxledger` loads none of the host, the storage or the HTTP clients; a name
    brings its own module when first used."""
    heavy = ["ctxledger.actors.host", "ctxledger.storage", "lmdb", "pykka", "httpx"]
    assert _loaded_after("import ctxledger", heavy) == [False] * 5
    assert _loaded_after("import ctxledger; ctxledger.Config", heavy) == [False] * 5
    assert _loaded_after("from ctxledger import Host", heavy) == [True, True, True, True, False]


def test_a_summary_worker_loads_neither_the_host_nor_the_http_clients() -> None:
    """What a summary worker process imports (``ctxledger.actors.summary_process``) leaves the
    host, the log and the HTTP clients out: the worker is ready in about half the time."""
    heavy = ["ctxledger.actors.host", "ctxledger.storage", "lmdb", "pykka", "httpx"]
    assert _loaded_after("import ctxledger.actors.summary_process", heavy) == [False] * 5


def test_a_summary_worker_loads_neither_the_fold_nor_the_projection_nor_the_events() -> None:
    """The worker needs the plan, the summariser and the facts of messages: ``ctxledger.domain``
    names its modules lazily, so the fold, the projection, the policy and the event codec stay
    out (the worker's imports took ~117 ms with them, ~70 without)."""
    domain = ["ctxledger.domain.fold", "ctxledger.domain.projection", "ctxledger.domain.policy"]
    out = [*domain, "ctxledger.domain.state", "ctxledger.events.codec"]
    assert _loaded_after("import ctxledger.actors._summary_main", out) == [False] * 5
    assert _loaded_after("import ctxledger.domain", out) == [False] * 5
    assert _loaded_after("from ctxledger.domain import decide", out) == [True] * 5


def test_the_domain_packages_names_are_its_functions_whatever_was_imported_first() -> None:
    """``ctxledger.domain.decide`` is the function, as when the package imported its modules
    eagerly, even after its submodule of the same name was imported on its own."""
    code = (
        "import ctxledger.domain.decide, ctxledger.domain.compaction;"
        " import ctxledger.domain as d; from ctxledger.domain import decide;"
        " import sys; m = sys.modules['ctxledger.domain.decide'];"
        " print(decide is m.decide, d.decide is m.decide, callable(d.run_summarizer),"
        " d.CompactionPlan is d.compaction.CompactionPlan)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split() == ["True", "True", "True", "True"]


def test_submodules_and_names_are_attributes_as_before() -> None:
    """`import ctxledger` then `ctxledger.storage...` or `ctxledger.actors.Session` works (a
    submodule is imported on first use); a name that does not exist is an AttributeError."""
    code = (
        "import ctxledger; print(ctxledger.storage.open_log.__name__,"
        " ctxledger.actors.Session.__name__, ctxledger.summarizers.describe_summarizer.__name__,"
        " 'Host' in dir(ctxledger), hasattr(ctxledger, 'no_such_name'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split() == ["open_log", "Session", "describe_summarizer", "True", "False"]
    assert ctxledger.Host is ctxledger.actors.host.Host
