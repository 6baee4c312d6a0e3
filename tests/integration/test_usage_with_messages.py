"""``append_many(messages, usage=)`` and ``step(messages, usage=)``: a model call's usage and the
messages it answered with in one commit (issue 28: one commit per agent step, usage included).

The log holds what ``record_usage(usage)`` then the same call would record (the same events, in
the same order, with the same view hashes and checkpoints): only the commits differ. A usage
that is no usage report fails its call alone and writes nothing.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ctxledger import Config, Host, Message, Session, ToolCall
from ctxledger.domain import ReportedUsage
from ctxledger.errors import InvalidUsageError
from ctxledger.events import Event, UsageReported, ViewServed
from ctxledger.testing import DomainSession, digest_summarizer

#: Small enough that the steps below compact (in the foreground: no background summaries, so
#: that both logs are deterministic); usage calibrates the tokenizer from the second report.
CONFIG = Config(
    context_window=2_000, min_retain_rounds=1, prepare_threshold=0, calibrate_after_reports=2
)
NOW = 1_765_000_000.0
USAGE = {
    "prompt_tokens": 700,
    "completion_tokens": 40,
    "prompt_tokens_details": {"cached_tokens": 300},
}


@contextmanager
def _host(path: Path) -> Iterator[Host]:
    ids = itertools.count(1)
    with Host.open(
        path,
        config=CONFIG,
        summarizer=digest_summarizer,
        clock=lambda: NOW,
        id_factory=lambda: f"c{next(ids)}",
    ) as host:
        yield host


def _batches(host: Host) -> list[list[str]]:
    """The names of the events of each durable batch of ``host`` from now on."""
    batches: list[list[str]] = []
    host._observe_commits(lambda _id, records: batches.append([_name(r.event) for r in records]))
    return batches


def _name(event: Event) -> str:
    return type(event).__name__


def _round(turn: int) -> list[Message]:
    """One agent step's new messages: the model's tool call and its result."""
    call = ToolCall(f"t{turn}", "bash", '{"command": "grep -rn needle src"}')
    return [
        Message.assistant(f"looking, turn {turn}", [call]),
        Message.tool(f"src/mod{turn}.py:3: needle " + "y" * 250, call.id, "bash"),
    ]


def _events(host: Host, name: str) -> list[Event]:
    return [record.event for record in host.log.read(name)][1:]  # after SessionOpened


def _usage(turn: int) -> dict[str, Any]:
    return {**USAGE, "prompt_tokens": 1_100 + 60 * turn}


def test_a_step_with_usage_records_what_record_usage_then_step_record(tmp_path: Path) -> None:
    """Each step with its usage is one commit (a compaction's summary aside); its log is the log
    of ``record_usage`` then ``step``: the same events, views and checkpoints."""
    views: dict[str, list[str]] = {"joined": [], "apart": []}
    with _host(tmp_path / "joined") as joined, _host(tmp_path / "apart") as apart:
        one, two = joined.session("s"), apart.session("s")
        one.append(Message.user("find the needle"))
        two.append(Message.user("find the needle"))
        batches = _batches(joined)
        for turn in range(14):
            before = len(batches)
            views["joined"].append(one.step(_round(turn), usage=_usage(turn)).view_hash)
            two.record_usage(_usage(turn))
            views["apart"].append(two.step(_round(turn)).view_hash)
            names = [name for batch in batches[before:] for name in batch]
            if "CheckpointCreated" not in names:
                assert len(batches) == before + 1  # one commit
            assert names[0] == "UsageReported"
        assert views["joined"] == views["apart"]
        assert _events(joined, "s") == _events(apart, "s")
        events = _events(joined, "s")
        assert any(_name(e) == "CheckpointCreated" for e in events)  # the steps compacted
        assert any(_name(e) == "TokenizerCalibrated" for e in events)  # and calibrated


def test_append_many_with_usage_is_one_commit_of_both(tmp_path: Path) -> None:
    """``append_many(batch, usage=)``: the usage first, then the batch, in one commit; with no
    messages it records the usage alone, as ``record_usage`` does."""
    with _host(tmp_path / "joined") as joined, _host(tmp_path / "apart") as apart:
        one, two = joined.session("s"), apart.session("s")
        batches = _batches(joined)
        for session in (one, two):
            session.append(Message.user("find the needle"))
        assert one.append_many(_round(0), usage=ReportedUsage(prompt_tokens=500)) == [2, 3]
        two.record_usage(500)
        assert two.append_many(_round(0)) == [2, 3]
        assert one.append_many([], usage=_usage(1)) == []
        two.record_usage(_usage(1))
        assert [b for b in batches if "UsageReported" in b] == [
            ["UsageReported", "MessageAppended", "MessageAppended"],
            ["UsageReported"],
        ]
        assert _events(joined, "s") == _events(apart, "s")
        reported = [e for e in _events(joined, "s") if isinstance(e, UsageReported)]
        assert [e.through_seq for e in reported] == [1, 3]  # measured before the batch


def test_the_async_twins_take_usage(tmp_path: Path) -> None:
    """``aappend_many`` and ``astep`` record the same as the blocking calls."""
    with _host(tmp_path / "async") as hosted, _host(tmp_path / "sync") as plain:

        async def drive(session: Session) -> None:
            await session.aappend_many([Message.user("hi")], usage=_usage(0))
            await session.astep(_round(1), usage=_usage(1))

        asyncio.run(drive(hosted.session("s")))
        session = plain.session("s")
        session.append_many([Message.user("hi")], usage=_usage(0))
        session.step(_round(1), usage=_usage(1))
        assert _events(hosted, "s") == _events(plain, "s")


BAD_USAGE: list[object] = [
    -5,
    True,
    "700 tokens",
    {"prompt": 700},
    {"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 11}},
    ReportedUsage(prompt_tokens=-1),
    object(),
]
BAD_USAGE_IDS = [
    "negative",
    "bool",
    "text",
    "no-shape",
    "cached-over-prompt",
    "bad-report",
    "object",
]


@pytest.mark.parametrize("usage", BAD_USAGE, ids=BAD_USAGE_IDS)
def test_a_bad_usage_fails_its_call_alone_and_writes_nothing(tmp_path: Path, usage: object) -> None:
    """``InvalidUsageError`` before anything is queued: the session's log is as it was, its next
    call and another session's go on; DomainSession refuses it the same way."""
    domain = DomainSession(CONFIG, session_id="s")
    calls: list[Callable[[Any], object]] = [
        lambda s: s.step(_round(1), usage=usage),
        lambda s: s.append_many(_round(1), usage=usage),
        lambda s: s.append_many([], usage=usage),
    ]
    with _host(tmp_path / "db") as host:
        session, other = host.session("s"), host.session("other")
        for target in (session, domain):
            target.append(Message.user("find the needle"))
        before, kept = list(host.log.read("s")), list(domain.events)
        for call in calls:
            for target in (session, domain):
                with pytest.raises(InvalidUsageError):
                    call(target)
            with pytest.raises(InvalidUsageError):
                asyncio.run(session.astep(_round(1), usage=usage))
        assert list(host.log.read("s")) == before
        assert domain.events == kept
        other.append(Message.user("unaffected"))
        view = session.step(_round(1), usage=_usage(1))
        assert [type(e) for e in _events(host, "s")[-4:]] == [
            UsageReported,
            *[type(e) for e in _events(host, "s")[-3:-1]],
            ViewServed,
        ]
        assert view.appended_seqs == (2, 3)


def test_domain_session_records_what_the_host_records(tmp_path: Path) -> None:
    """The same steps with usage on a host and on a DomainSession: the same events."""
    ids = itertools.count(1)
    domain = DomainSession(
        CONFIG, session_id="s", clock=lambda: NOW, id_factory=lambda: f"c{next(ids)}"
    )
    with _host(tmp_path / "db") as host:
        session = host.session("s")
        for target in (session, domain):
            target.append(Message.user("find the needle"))
            for turn in range(10):
                target.step(_round(turn), usage=_usage(turn))
            target.append_many([Message.assistant("found it")], usage=_usage(10))
        assert _events(host, "s") == domain.events[1:]
