"""Every ctxledger error survives pickle (worker processes, concurrent.futures) unchanged."""

from __future__ import annotations

import inspect
import pickle
from pathlib import Path

import pytest

import ctxledger.errors as errors

#: Constructor arguments for the errors whose ``__init__`` takes named parts.
ARGUMENTS: dict[str, tuple[object, ...]] = {
    "BudgetExceededError": ("s", 10, 20),
    "ConfigError": ("compaction_target", "must be below compression_threshold"),
    "CorruptRecordError": ("checksum mismatch",),
    "InvalidArgumentError": ("focus", "must be a str"),
    "InvalidMessageError": ("metadata is not a dict",),
    "InvalidSessionIdError": ("empty id",),
    "LeaseHeldError": ("s", "host-a", 3, 2.5),
    "LeaseLostError": ("s", "host-a", 3, "host-b", 4),
    "LogLockedError": ("/tmp/db", 1234),
    "SystemPromptMismatchError": ("s", "recorded prompt", "given prompt"),
    "TraceFormatError": (Path("/tmp/trace.jsonl"), 3, "not JSON"),
    "UnknownEventTypeError": ("NoSuchEvent",),
    "VersionConflictError": ("s", 1, 2),
}


def _error_classes() -> list[type[BaseException]]:
    return [
        value
        for name in errors.__all__
        if inspect.isclass(value := getattr(errors, name)) and issubclass(value, BaseException)
    ]


def test_the_table_covers_every_error_with_its_own_constructor() -> None:
    custom = {cls.__name__ for cls in _error_classes() if "__init__" in cls.__dict__}
    assert custom <= set(ARGUMENTS), (
        f"add constructor arguments for {sorted(custom - set(ARGUMENTS))}"
    )


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda cls: cls.__name__)
def test_an_error_round_trips_through_pickle(cls: type[BaseException]) -> None:
    error = cls(*ARGUMENTS.get(cls.__name__, ("something went wrong",)))
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is cls
    assert str(copy) == str(error)
    assert copy.args == error.args
    assert vars(copy) == vars(error)
