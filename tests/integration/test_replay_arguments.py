"""Replay's public functions refuse a wrong argument with a ctxledger error naming it, before
anything is opened or created."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxledger import Config, Host, HostOptions, Message, ToolCall, replay
from ctxledger.domain import Pricing
from ctxledger.errors import (
    ConfigError,
    CtxLedgerError,
    InvalidArgumentError,
    InvalidQueryError,
    InvalidSeqError,
    InvalidSessionIdError,
)
from ctxledger.storage import LmdbEventLog

# Stand-ins in the table for what each test provides: the log's folder, the same log opened,
# a folder that does not exist, a file, salvage's (missing) destination, and a what-if report.
LOG, OPEN, MISSING, FILE, OUT, REPORT = "<log>", "<open>", "<missing>", "<file>", "<out>", "<rep>"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("replay_arguments") / "db"
    with Host.open(folder, options=HostOptions(durability="none")) as host:
        session = host.session("a")
        call = ToolCall("c1", "bash", '{"command": "ls"}')
        session.append_many(
            [
                Message.user("list the files"),
                Message.assistant("", [call]),
                Message.tool("a.py b.py", call.id, "bash"),
            ]
        )
        session.prepare_step()
        session.compact()
        session.append(Message.user("thanks"))
        session.prepare_step()
    return folder


@pytest.fixture
def places(db: Path, tmp_path: Path) -> Iterator[dict[str, Any]]:
    (tmp_path / "file").write_text("not a folder")
    log = LmdbEventLog.open(db, readonly=True)
    try:
        yield {
            LOG: db,
            OPEN: log,
            MISSING: tmp_path / "missing",
            FILE: tmp_path / "file",
            OUT: tmp_path / "out",
            REPORT: replay.what_if(db, "a", Config()),
        }
    finally:
        log.close()


def _cost(report: replay.WhatIfReport, *args: Any, **kwargs: Any) -> float:
    return report.cost(*args, **kwargs)


PRICING = Pricing(input=3.0, cached_input=0.3, cache_write=3.75, output=15.0)
Case = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], type[CtxLedgerError], str]

CASES: dict[str, Case] = {
    # source: a folder, a URI or an open log
    "verify-source-None": (replay.verify, (None,), {}, InvalidArgumentError, "source: expected"),
    "verify-source-int": (replay.verify, (3,), {}, InvalidArgumentError, "got int 3"),
    "verify-source-bytes": (replay.verify, (b"x",), {}, InvalidArgumentError, "got bytes"),
    "verify-source-empty": (replay.verify, ("",), {}, InvalidArgumentError, "source: must not"),
    "verify-source-nul": (
        replay.verify,
        ("a\x00",),
        {},
        InvalidArgumentError,
        "source: 'a\\x00' holds a NUL",
    ),
    "verify-source-lone": (
        replay.verify,
        ("\ud800",),
        {},
        InvalidArgumentError,
        "source: '\\ud800' is not valid UTF-8",
    ),
    "rebuild-source-None": (replay.rebuild, (None, "a"), {}, InvalidArgumentError, "source"),
    "rebuild-source-object": (replay.rebuild, (object(), "a"), {}, InvalidArgumentError, "object"),
    "find_damage-source-None": (replay.find_damage, (None,), {}, InvalidArgumentError, "source"),
    # session_id: a string
    "rebuild-id-int": (replay.rebuild, (LOG, 3), {}, InvalidSessionIdError, "session_id must"),
    "view_at-id-int": (replay.view_at, (LOG, 3, 1), {}, InvalidSessionIdError, "got int 3"),
    "audit-id-None": (replay.audit, (LOG, None), {}, InvalidSessionIdError, "got NoneType"),
    "explain-id-bytes": (replay.explain, (LOG, b"a", 1), {}, InvalidSessionIdError, "got bytes"),
    "recall-id-int": (replay.recall, (LOG, 3, "ls"), {}, InvalidSessionIdError, "session_id"),
    "what_if-id-int": (replay.what_if, (LOG, 3, Config()), {}, InvalidSessionIdError, "int 3"),
    "verify-id-int": (replay.verify, (LOG,), {"session_id": 3}, InvalidSessionIdError, "int"),
    "find_damage-ids-str": (replay.find_damage, (LOG, "a"), {}, InvalidArgumentError, "ids"),
    "find_damage-ids-int": (replay.find_damage, (LOG, 3), {}, InvalidArgumentError, "ids"),
    "find_damage-id-int": (replay.find_damage, (LOG, [3]), {}, InvalidSessionIdError, "int 3"),
    # seq: an int, as Session.view_at and Session.explain check it
    "view_at-seq-str": (replay.view_at, (LOG, "a", "x"), {}, InvalidSeqError, "seq 'x'"),
    "view_at-seq-None": (replay.view_at, (LOG, "a", None), {}, InvalidSeqError, "seq None"),
    "view_at-seq-bool": (replay.view_at, (LOG, "a", True), {}, InvalidSeqError, "seq True"),
    "view_at-seq-float": (replay.view_at, (LOG, "a", 1.0), {}, InvalidSeqError, "seq 1.0"),
    "explain-seq-str": (replay.explain, (LOG, "nope", "1"), {}, InvalidSeqError, "seq '1'"),
    "rebuild-seq-str": (replay.rebuild, (LOG, "a"), {"through_seq": "x"}, InvalidSeqError, "'x'"),
    "rebuild-seq-bool": (
        replay.rebuild,
        (LOG, "a"),
        {"through_seq": True},
        InvalidSeqError,
        "True",
    ),
    # config, tokenizer, summarizer, flags and seconds
    "what_if-config-None": (replay.what_if, (LOG, "a", None), {}, ConfigError, "ctxledger.Config"),
    "what_if-config-dict": (replay.what_if, (LOG, "a", {}), {}, ConfigError, "got dict"),
    "verify-tokenizer-str": (
        replay.verify,
        (LOG,),
        {"tokenizer": "x"},
        InvalidArgumentError,
        "tok",
    ),
    "rebuild-tokenizer": (
        replay.rebuild,
        (LOG, "a"),
        {"tokenizer": 3},
        InvalidArgumentError,
        "tok",
    ),
    "view_at-tokenizer": (
        replay.view_at,
        (LOG, "a", 1),
        {"tokenizer": 3},
        InvalidArgumentError,
        "3",
    ),
    "what_if-tokenizer": (
        replay.what_if,
        (LOG, "a", Config()),
        {"tokenizer": "x"},
        InvalidArgumentError,
        "tokenizer",
    ),
    "what_if-summarizer": (
        replay.what_if,
        (LOG, "a", Config()),
        {"summarizer": "x"},
        InvalidArgumentError,
        "callable",
    ),
    "what_if-usage-str": (
        replay.what_if,
        (LOG, "a", Config()),
        {"use_recorded_usage": "x"},
        InvalidArgumentError,
        "use_recorded_usage: must be True, False or None",
    ),
    "what_if-usage-int": (
        replay.what_if,
        (LOG, "a", Config()),
        {"use_recorded_usage": 1},
        InvalidArgumentError,
        "use_recorded_usage",
    ),
    "what_if-seconds-str": (
        replay.what_if,
        (LOG, "a", Config()),
        {"summary_seconds": "x"},
        InvalidArgumentError,
        "summary_seconds: must be a finite number",
    ),
    "what_if-seconds-negative": (
        replay.what_if,
        (LOG, "a", Config()),
        {"summary_seconds": -1},
        InvalidArgumentError,
        "got int -1",
    ),
    "what_if-seconds-nan": (
        replay.what_if,
        (LOG, "a", Config()),
        {"summary_seconds": float("nan")},
        InvalidArgumentError,
        "nan",
    ),
    "what_if-seconds-inf": (
        replay.what_if,
        (LOG, "a", Config()),
        {"summary_seconds": float("inf")},
        InvalidArgumentError,
        "inf",
    ),
    "what_if-seconds-bool": (
        replay.what_if,
        (LOG, "a", Config()),
        {"summary_seconds": True},
        InvalidArgumentError,
        "True",
    ),
    "verify-progress": (replay.verify, (LOG,), {"progress": 3}, InvalidArgumentError, "progress"),
    "audit-checkpoint-int": (
        replay.audit,
        (LOG, "a", 3),
        {},
        InvalidArgumentError,
        "checkpoint_id",
    ),
    # recall's query and limit, checked before the log is read (here: an unknown session)
    "recall-query-None": (replay.recall, (LOG, "nope", None), {}, InvalidQueryError, "query"),
    "recall-limit-0": (replay.recall, (LOG, "nope", "ls"), {"limit": 0}, InvalidQueryError, "1 to"),
    # salvage's destination and tokenizer
    "salvage-destination-None": (replay.salvage, (LOG, None), {}, InvalidArgumentError, "destin"),
    "salvage-destination-int": (
        replay.salvage,
        (LOG, 3),
        {},
        InvalidArgumentError,
        "destination: expected a folder",
    ),
    "salvage-destination-empty": (
        replay.salvage,
        (LOG, ""),
        {},
        InvalidArgumentError,
        "destination: must not",
    ),
    "salvage-destination-nul": (
        replay.salvage,
        (LOG, "o\x00"),
        {},
        InvalidArgumentError,
        "holds a NUL character",
    ),
    "salvage-destination-file": (replay.salvage, (LOG, FILE), {}, InvalidArgumentError, "a file"),
    "salvage-source-None": (replay.salvage, (None, OUT), {}, InvalidArgumentError, "source"),
    "salvage-tokenizer": (
        replay.salvage,
        (LOG, OUT),
        {"tokenizer": "x"},
        InvalidArgumentError,
        "tok",
    ),
    # the functions over an open log
    "fold_session-log-path": (replay.fold_session, (LOG, "a"), {}, InvalidArgumentError, "log:"),
    "fold_session-log-None": (
        replay.fold_session,
        (None, "a"),
        {},
        InvalidArgumentError,
        "EventLog",
    ),
    "fold_session-id-int": (replay.fold_session, (OPEN, 3), {}, InvalidSessionIdError, "int 3"),
    "fold_session-bound": (
        replay.fold_session,
        (OPEN, "a"),
        {"through_event_seq": "x"},
        InvalidArgumentError,
        "through_event_seq",
    ),
    "fold_session-snapshots": (
        replay.fold_session,
        (OPEN, "a"),
        {"use_snapshots": "x"},
        InvalidArgumentError,
        "use_snapshots",
    ),
    "state_at_checkpoint-id": (
        replay.state_at_checkpoint,
        (OPEN, "a", 3),
        {},
        InvalidArgumentError,
        "checkpoint_id",
    ),
    # a what-if report's cost
    "cost-pricing": (_cost, (REPORT, "x"), {}, InvalidArgumentError, "pricing"),
    "cost-caching": (_cost, (REPORT, PRICING), {"caching": "x"}, InvalidArgumentError, "caching"),
}


def _resolve(value: Any, places: dict[str, Any]) -> Any:
    return places.get(value, value) if isinstance(value, str) else value


def _call(case: Case, places: dict[str, Any], source: Any = LOG) -> Any:
    function, args, kwargs, _, _ = case
    resolved = [_resolve(source if arg == LOG else arg, places) for arg in args]
    return function(*resolved, **{key: _resolve(v, places) for key, v in kwargs.items()})


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_wrong_argument_raises_a_ctxledger_error_naming_it(
    name: str, places: dict[str, Any]
) -> None:
    """The error is the library's own for that mistake, and says what was wrong."""
    case = CASES[name]
    with pytest.raises(case[3]) as raised:
        _call(case, places)
    assert case[4] in str(raised.value)
    assert not places[OUT].exists()  # salvage created no destination


READ_CASES = sorted(name for name, case in CASES.items() if LOG in case[1][:1])


@pytest.mark.parametrize("name", READ_CASES)
def test_a_wrong_argument_is_refused_before_a_missing_log_is_opened(
    name: str, places: dict[str, Any]
) -> None:
    """With a folder that does not exist, the same error comes first and no folder appears."""
    case = CASES[name]
    with pytest.raises(case[3]):
        _call(case, places, source=MISSING)
    assert not places[MISSING].exists()
    assert not places[OUT].exists()


def test_good_arguments_still_read_the_log(db: Path) -> None:
    """The checks let through every kind of argument the functions take."""
    state = replay.rebuild(db, "a", through_seq=0)
    assert state.history == []
    assert replay.view_at(db, "a", 0).messages == ()
    assert replay.find_damage(db, iter(["a"])) == {"a": None}
    seen: list[str] = []
    assert replay.verify(db, "a", progress=seen.append).ok and seen == ["a"]
    report = replay.what_if(db, "a", Config(), use_recorded_usage=False, summary_seconds=0)
    assert report.cost(PRICING, caching=False) >= 0
