"""Every public argument is checked at the boundary (issue 25): a named ctxledger error, and
nothing written. The property test (tests/property/test_bad_calls.py) draws many more."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxledger import (
    ConfigError,
    Host,
    InvalidArgumentError,
    InvalidMessageError,
    InvalidQueryError,
    InvalidSeqError,
    InvalidToolCallError,
    InvalidUsageError,
    Message,
    Session,
)


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    with Host.open(tmp_path / "db") as opened:
        session = opened.session("s")
        session.append_many([Message.user("one"), Message.assistant("two")])
        yield opened


CASES: list[tuple[str, Callable[[Session], Any], type[Exception]]] = [
    ("record_usage(10**30)", lambda s: s.record_usage(10**30), InvalidUsageError),
    ("record_usage(1, 10**13)", lambda s: s.record_usage(1, 10**13), InvalidUsageError),
    (
        "record_usage(usage dict over the limit)",
        lambda s: s.record_usage({"prompt_tokens": 10**20, "completion_tokens": 1}),
        InvalidUsageError,
    ),
    ("compact(focus=123)", lambda s: s.compact(focus=123), InvalidArgumentError),  # type: ignore[arg-type]
    (
        "compact(focus=lone surrogate)",
        lambda s: s.compact(focus="keep \ud800"),
        InvalidArgumentError,
    ),
    ("prepare_step(pending=None)", lambda s: s.prepare_step(None), InvalidArgumentError),  # type: ignore[arg-type]
    (
        "build_model_view(pending=b'')",
        lambda s: s.build_model_view(b""),  # type: ignore[arg-type]
        InvalidArgumentError,
    ),
    ("append_many(5)", lambda s: s.append_many(5), InvalidMessageError),  # type: ignore[arg-type]
    ("append_many('text')", lambda s: s.append_many("text"), InvalidMessageError),  # type: ignore[arg-type]
    ("retract_last(5)", lambda s: s.retract_last(5), InvalidMessageError),  # type: ignore[arg-type]
    ("pin('1')", lambda s: s.pin("1"), InvalidSeqError),  # type: ignore[arg-type]
    ("explain(None)", lambda s: s.explain(None), InvalidSeqError),  # type: ignore[arg-type]
    ("view_at(1.0)", lambda s: s.view_at(1.0), InvalidSeqError),  # type: ignore[arg-type]
    ("fork('t', at_seq='1')", lambda s: s.fork("t", "1"), InvalidSeqError),  # type: ignore[arg-type]
    (
        "revert_compaction(reason=lone surrogate)",
        lambda s: s.revert_compaction(reason="\udfff"),
        InvalidArgumentError,
    ),
    ("revert_compaction(7)", lambda s: s.revert_compaction(7), InvalidArgumentError),  # type: ignore[arg-type]
    ("audit(7)", lambda s: s.audit(7), InvalidArgumentError),  # type: ignore[arg-type]
    ("recall(lone surrogate)", lambda s: s.recall("\ud800"), InvalidQueryError),
    (
        "call_tool(deeply nested JSON)",
        lambda s: s.call_tool("recall", "[" * 100_000),
        InvalidToolCallError,
    ),
    (
        "call_tool(mixed keys)",
        lambda s: s.call_tool("recall", {"query": "x", 1: 2, "y": 3}),
        InvalidToolCallError,
    ),
    ("current_messages(-1)", lambda s: s.current_messages(-1), InvalidArgumentError),
    ("cost('free')", lambda s: s.cost("free"), InvalidArgumentError),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("name", "call", "error"), CASES, ids=[case[0] for case in CASES])
def test_a_bad_argument_raises_its_error_and_writes_nothing(
    host: Host, name: str, call: Callable[[Session], Any], error: type[Exception]
) -> None:
    """The call raises the named ctxledger error; the log holds exactly what it held."""
    session = host.session("s")
    before = [record.event for record in host.log.read("s")]
    with pytest.raises(error):
        call(session)
    assert [record.event for record in host.log.read("s")] == before
    assert host.sessions() == ["s"]
    assert session.append(Message.user("after")) == 3


@pytest.mark.parametrize("config", ["notaconfig", {"context_window": 1000}, {}])
def test_a_new_session_with_a_config_that_is_not_one_is_not_created(
    host: Host, config: object
) -> None:
    """ConfigError (field ``config``), and no session is created."""
    with pytest.raises(ConfigError) as refused:
        host.session("new", config=config)  # type: ignore[arg-type]
    assert refused.value.field == "config"
    assert host.sessions() == ["s"]


def test_the_new_errors_keep_the_builtin_types_callers_caught() -> None:
    """InvalidArgumentError is a TypeError and a ValueError (``current_messages`` raised
    ValueError and ``cost`` TypeError before), and pickles with its argument name."""
    import pickle

    error = InvalidArgumentError("limit", "must be a non-negative integer or None, got -1")
    assert isinstance(error, TypeError) and isinstance(error, ValueError)
    copy = pickle.loads(pickle.dumps(error))
    assert copy.argument == "limit" and str(copy) == str(error)
