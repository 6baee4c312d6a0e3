"""Fault isolation, on every backend: one caller's bad request never fails another's append.

The rule is in the :class:`~ctxledger.storage.EventLog` docstring. A request that breaks a limit
is refused before anything is queued; one the storage refuses while writing a shared
transaction (``Backend.storage_refused_id``) is left out and the transaction written again; the
other requests commit as if they had arrived alone.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_backends import Backend

from ctxledger.errors import (
    InvalidMessageError,
    InvalidSessionIdError,
    VersionConflictError,
)
from ctxledger.events.types import CompactionFailed, Event, MessageAppended, UsageReported
from ctxledger.messages import Message
from ctxledger.storage import MAX_SESSION_ID_BYTES, EventLog
from ctxledger.storage import protocol as storage_protocol

RAISED_LIMIT = 4096  # lets Backend.storage_refused_id past the shared check, to the storage


def usage(count: int, start: int = 0) -> list[Event]:
    """``count`` small events, told apart by their ``prompt_tokens``."""
    return [UsageReported(prompt_tokens=start + index) for index in range(count)]


def with_metadata(metadata: dict[str, Any]) -> Event:
    """A message event carrying ``metadata`` (which may not be encodable)."""
    message = Message(role="user", content="hi", metadata=metadata)
    return MessageAppended(message=message.with_seq(1))


@dataclass(frozen=True)
class Bad:
    """A kind of request that must be refused: how to build the n-th one, and what it raises."""

    name: str
    error: type[Exception]
    build: Callable[[int], tuple[str, list[Event]]]  # n -> (session id, events); expected_seq 0


BAD_REQUESTS = [
    Bad("long id", InvalidSessionIdError, lambda n: (f"{n}" + "x" * (RAISED_LIMIT + 1), usage(1))),
    Bad("NUL in id", InvalidSessionIdError, lambda n: (f"bad\0{n}", usage(1))),
    Bad("lone surrogate in id", InvalidSessionIdError, lambda n: (f"bad\udc80{n}", usage(1))),
    Bad("empty id", InvalidSessionIdError, lambda n: ("", usage(1))),
    Bad(
        "metadata of an object",
        InvalidMessageError,
        lambda n: (f"meta-{n}", [*usage(1), with_metadata({"handle": object()})]),
    ),
    Bad(
        "metadata with an int key",
        InvalidMessageError,
        lambda n: (f"meta-key-{n}", [with_metadata({1: "one"})]),  # type: ignore[dict-item]
    ),
    Bad(
        "event that cannot be encoded",
        InvalidMessageError,
        lambda n: (f"enc-{n}", [*usage(2), CompactionFailed(compaction_id="c", detail="\ud800")]),
    ),
    Bad("not an event", TypeError, lambda n: (f"nev-{n}", [*usage(1), {"x": 1}])),  # type: ignore[list-item]
]


def bad_requests(backend: Backend) -> list[Bad]:
    """The refused kinds for ``backend``: the shared ones, plus its storage's own refusal."""
    refused_id = backend.storage_refused_id
    if refused_id is None:
        return BAD_REQUESTS
    storage = Bad(
        "refused by the storage mid-write",
        InvalidMessageError,
        lambda n: (f"{refused_id}{n}", usage(2)),
    )
    return [*BAD_REQUESTS, storage]


@pytest.fixture
def storage_limit_raised(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """Raise the shared session-id limit so that the storage's own limit is reached."""
    if backend.storage_refused_id is not None:
        monkeypatch.setattr(storage_protocol, "MAX_SESSION_ID_BYTES", RAISED_LIMIT)


# --- limits, one request at a time ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("session_id", "limit"),
    [
        ("x" * 600, "at most 255 bytes of UTF-8"),
        ("x" * 10_000, "at most 255 bytes of UTF-8"),
        ("é" * 128, "at most 255 bytes of UTF-8"),  # 128 characters, 256 bytes
        ("a\0b", "no NUL character"),
        ("bad \udc80 id", "valid UTF-8"),
        ("", "not empty"),
    ],
)
def test_a_session_id_breaking_a_limit_is_refused_by_name(
    log: EventLog, session_id: str, limit: str
) -> None:
    """The error names the field and the limit; nothing is written."""
    with pytest.raises(InvalidSessionIdError) as caught:
        log.append(session_id, usage(1), expected_seq=0)
    assert (caught.value.field, caught.value.limit) == ("session_id", limit)
    assert "session_id" in str(caught.value)
    assert isinstance(caught.value, ValueError)
    assert (log.sessions(), log.last_position()) == ([], 0)


@pytest.mark.parametrize(
    "session_id",
    [
        "x" * MAX_SESSION_ID_BYTES,
        "é" * (MAX_SESSION_ID_BYTES // 2),  # 254 bytes
        "\U0001f600" * 63 + "abc",  # 63 four-byte characters and 3 more: exactly 255 bytes
    ],
)
def test_the_longest_session_id_is_stored(
    backend: Backend, log: EventLog, session_id: str
) -> None:
    """An id of MAX_SESSION_ID_BYTES bytes of UTF-8 is appended, listed and read after reopen."""
    assert len(session_id.encode()) <= MAX_SESSION_ID_BYTES
    log.append(session_id, usage(2), expected_seq=0)
    reopened = backend.reopen(log)
    try:
        assert reopened.sessions() == [session_id]
        assert [r.event for r in reopened.read(session_id)] == usage(2)
    finally:
        reopened.close()


@pytest.mark.parametrize("bad", BAD_REQUESTS, ids=lambda bad: bad.name)
def test_a_refused_request_writes_nothing(log: EventLog, bad: Bad) -> None:
    """Each kind of bad request raises its named error and leaves the log as it was."""
    log.append("before", usage(1), expected_seq=0)
    session_id, events = bad.build(1)
    with pytest.raises(bad.error):
        log.append(session_id, events, expected_seq=0)
    assert (log.sessions(), log.last_position()) == (["before"], 1)


def test_a_refused_metadata_names_the_field(log: EventLog) -> None:
    """Metadata that cannot be encoded is refused as InvalidMessageError with field metadata."""
    with pytest.raises(InvalidMessageError) as caught:
        log.append("s", [with_metadata({"handle": object()})], expected_seq=0)
    assert caught.value.field == "metadata" and "metadata" in str(caught.value)


def test_a_request_the_storage_refuses_mid_write_fails_alone(
    backend: Backend, log: EventLog, storage_limit_raised: None
) -> None:
    """A session id that passes the checks but not the storage fails alone, naming the cause."""
    if backend.storage_refused_id is None:
        pytest.skip(f"the {backend.name} backend has no storage limit past the shared checks")
    with pytest.raises(InvalidMessageError, match="refused"):
        log.append(backend.storage_refused_id, usage(2), expected_seq=0)
    log.append("after", usage(1), expected_seq=0)
    assert (log.sessions(), log.last_position()) == (["after"], 1)


def test_awaited_appends_beside_refused_ones_all_land(
    backend: Backend, log: EventLog, storage_limit_raised: None
) -> None:
    """Tasks on one event loop: each bad request raises its own error, every good one lands."""
    kinds = bad_requests(backend)

    async def good(index: int) -> None:
        for step in range(4):
            await log.aappend(f"task-{index}", usage(1, start=step), expected_seq=step)

    async def bad(kind: Bad, n: int) -> None:
        session_id, events = kind.build(n)
        await log.aappend(session_id, events, expected_seq=0)

    async def go() -> list[BaseException | None]:
        return await asyncio.gather(
            *(good(index) for index in range(8)),
            *(bad(kind, n) for n, kind in enumerate(kinds)),
            return_exceptions=True,
        )

    outcomes = asyncio.run(go())
    assert outcomes[:8] == [None] * 8
    for kind, outcome in zip(kinds, outcomes[8:], strict=True):
        assert isinstance(outcome, kind.error), (kind.name, outcome)
    assert sorted(log.sessions()) == sorted(f"task-{index}" for index in range(8))
    assert all(log.last_seq(f"task-{index}") == 4 for index in range(8))


# --- the scenario: well-behaved writers beside a misbehaving one ---------------------------------


def run_beside_bad_requests(
    log: EventLog, bad: list[Bad], writers: int, steps: int
) -> tuple[list[BaseException], list[tuple[Bad, BaseException | None]]]:
    """``writers`` threads append ``steps`` batches each while one more sends ``bad`` requests.

    Returns the good writers' errors and each bad request with what it raised.
    """
    good_errors: list[BaseException] = []
    refused: list[tuple[Bad, BaseException | None]] = []
    start = threading.Barrier(writers + 1)
    done = threading.Event()

    def good(index: int) -> None:
        start.wait()
        for step in range(steps):
            try:
                log.append(f"good-{index}", usage(2, start=step * 2), expected_seq=step * 2)
            except BaseException as exc:
                good_errors.append(exc)

    def spoiler() -> None:
        start.wait()
        count = 0
        while not done.is_set() or count < len(bad):
            kind = bad[count % len(bad)]
            session_id, events = kind.build(count)
            try:
                log.append(session_id, events, expected_seq=0)
                refused.append((kind, None))
            except Exception as exc:
                refused.append((kind, exc))
            count += 1

    threads = [threading.Thread(target=good, args=(index,)) for index in range(writers)]
    bad_thread = threading.Thread(target=spoiler)
    bad_thread.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    bad_thread.join()
    return good_errors, refused


def test_good_appends_never_fail_beside_refused_requests(
    backend: Backend, log: EventLog, storage_limit_raised: None
) -> None:
    """16 writers lose nothing and see no error while bad requests of every kind are refused.

    Every bad request raised its own named error; after a reopen the log holds every good
    append, in order, and nothing of a bad one.
    """
    writers, steps = 16, 25
    kinds = bad_requests(backend)
    good_errors, refused = run_beside_bad_requests(log, kinds, writers, steps)
    assert good_errors == []
    assert len(refused) >= len(kinds)
    wrong = [(kind.name, repr(exc)) for kind, exc in refused if not isinstance(exc, kind.error)]
    assert wrong == []
    log = backend.reopen(log)
    try:
        assert sorted(log.sessions()) == sorted(f"good-{index}" for index in range(writers))
        for index in range(writers):
            assert [r.event for r in log.read(f"good-{index}")] == usage(2 * steps)
        assert log.last_position() == writers * steps * 2
    finally:
        log.close()


# --- the property: a random mix from several threads ---------------------------------------------


@dataclass(frozen=True)
class Request:
    """One request of a thread's script: a valid append, a stale one, or a bad kind."""

    kind: str  # "ok", "stale" or a Bad's name
    session: int  # which of the thread's own sessions
    count: int  # events in a valid append


def requests(kinds: list[Bad]) -> st.SearchStrategy[Request]:
    """Valid appends (most of them), stale appends and every kind of bad request."""
    valid = st.builds(Request, st.just("ok"), st.integers(0, 1), st.integers(1, 3))
    stale = st.builds(Request, st.just("stale"), st.integers(0, 1), st.just(1))
    bad = st.builds(Request, st.sampled_from([kind.name for kind in kinds]), st.just(0), st.just(0))
    return st.one_of(valid, valid, stale, bad)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_a_random_mix_of_requests_leaves_exactly_the_valid_ones(
    backend: Backend, storage_limit_raised: None, data: st.DataObject
) -> None:
    """Threads send random valid and invalid requests; the log holds exactly the valid ones.

    Each thread owns two sessions, so the expected seq of each of its appends is known; a stale
    one must conflict. Per session, the log holds the valid batches in the order sent, each
    valid append got the seqs it would have got alone, and every invalid one its own error.
    """
    kinds = {kind.name: kind for kind in bad_requests(backend)}
    scripts = data.draw(
        st.lists(st.lists(requests(list(kinds.values())), min_size=1, max_size=12), min_size=2,
                 max_size=4),
        label="scripts",
    )
    log = backend.fresh()
    outcomes: dict[tuple[int, int], Any] = {}
    expected: dict[str, list[Event]] = {}
    token = iter(range(1, 1_000_000))
    plans: list[list[tuple[str, list[Event], int, type[Exception] | None]]] = []
    for thread, script in enumerate(scripts):
        plan = []
        for index, request in enumerate(script):
            session = f"t{thread}-s{request.session}"
            have = len(expected.get(session, []))
            if request.kind == "ok":
                events = usage(request.count, start=next(token) * 10)
                plan.append((session, events, have, None))
                expected.setdefault(session, []).extend(events)
            elif request.kind == "stale":
                plan.append((session, usage(1), have + 1, VersionConflictError))
            else:
                kind = kinds[request.kind]
                bad_id, events = kind.build(thread * 100 + index)
                plan.append((bad_id, events, 0, kind.error))
        plans.append(plan)
    start = threading.Barrier(len(plans))

    def run(thread: int) -> None:
        start.wait()
        for index, (session, events, expected_seq, _) in enumerate(plans[thread]):
            try:
                outcomes[thread, index] = log.append(session, events, expected_seq=expected_seq)
            except Exception as exc:
                outcomes[thread, index] = exc

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(plans))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        for thread, plan in enumerate(plans):
            for index, (session, events, expected_seq, error) in enumerate(plan):
                outcome = outcomes[thread, index]
                if error is None:
                    assert [(r.session_id, r.seq, r.event) for r in outcome] == [
                        (session, expected_seq + 1 + offset, event)
                        for offset, event in enumerate(events)
                    ]
                else:
                    assert isinstance(outcome, error), (session[:20], outcome)
        assert sorted(log.sessions()) == sorted(expected)
        for session, events in expected.items():
            assert [r.event for r in log.read(session)] == events
        assert log.last_position() == sum(len(events) for events in expected.values())
        assert sorted(r.position for r in log.read_all()) == list(
            range(1, log.last_position() + 1)
        )
    finally:
        log.close()
