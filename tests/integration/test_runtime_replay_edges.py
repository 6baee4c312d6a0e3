"""Edges of the runtime's estimate bound, of verify and of what-if (exact value and neighbours)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from ctxledger import Config, Host, Message
from ctxledger.checkpoints import Checkpoint
from ctxledger.events import (
    CheckpointCreated,
    CompactionStarted,
    Event,
    MessageAppended,
    SessionOpened,
    UsageReported,
    ViewServed,
)
from ctxledger.replay import verify, what_if
from ctxledger.storage import MemoryEventLog
from ctxledger.summarizers import SummaryRequest
from ctxledger.testing import digest_summarizer

#: Threshold 1,000 tokens; nothing masked or kept apart, no fact block.
CONFIG = Config(
    context_window=2000,
    compression_threshold=0.5,
    min_retain_rounds=1,
    micro_keep_recent=1000,
    keep_first_request=False,
    fact_index_chars=0,
    prepare_threshold=0.0,
)
BACKGROUND = CONFIG.replace(prepare_threshold=0.85)


def turn(n: int, tokens: int) -> list[Message]:
    """A user message and a reply of ``tokens`` tokens together (chars // 3)."""
    user = f"q{n:03d} "
    return [
        Message.user(user + "q" * (3 * tokens // 2 - len(user))),
        Message.assistant("a" * (3 * tokens - 3 * tokens // 2)),
    ]


def _started(host: Host) -> list[CompactionStarted]:
    """The background compactions started in session ``s``."""
    return [
        r.event
        for r in host.log.read("s")
        if isinstance(r.event, CompactionStarted) and r.event.background
    ]


def test_a_usage_report_resets_the_estimate_bound(tmp_path: Path) -> None:
    """The runtime bounds the estimate by the characters appended since it last measured it; a
    usage report is not an append and can raise the estimate past the prepare point: the
    background summary must start on it."""
    ids = itertools.count(1)
    with Host.open(
        tmp_path / "db",
        config=BACKGROUND,
        summarizer=digest_summarizer,
        id_factory=lambda: f"id{next(ids)}",
    ) as host:
        session = host.session("s")
        for n in range(4):
            session.append_many(turn(n, 150))  # 600 tokens by characters, below 850
            session.prepare_step()
        session.wait_background()
        assert _started(host) == []
        session.record_usage(900)  # the provider counted more: past the prepare point
        session.wait_background()
        assert len(_started(host)) == 1


def test_a_pin_resets_the_estimate_bound(tmp_path: Path) -> None:
    """A pin brings a covered message back into the view without an append: the bound the
    runtime kept from the appends no longer holds, and the next append must measure the view
    anew (and start the background summary it now needs)."""
    ids = itertools.count(1)
    with Host.open(
        tmp_path / "db",
        config=BACKGROUND.replace(min_retain_rounds=0),
        summarizer=digest_summarizer,
        id_factory=lambda: f"id{next(ids)}",
    ) as host:
        session = host.session("s")
        big = session.append(Message.user("p" * 1950))  # 650 tokens
        session.append(Message.assistant("ok"))
        for n in range(2):
            session.append_many(turn(n, 20))
        assert session.prepare_step().estimated_tokens < 850
        assert session.compact().compacted  # the big request is summarised
        for n in range(2, 5):
            session.append_many(turn(n, 60))  # measured: the bound is the small view
        assert session.prepare_step().estimated_tokens < 400
        session.wait_background()
        assert _started(host) == []
        session.pin(big)  # the view is past the prepare point now
        session.append_many(turn(5, 20))
        session.wait_background()
        assert len(_started(host)) == 1


def _log(events_by_time: list[tuple[float, list[Event]]], session: str = "s") -> MemoryEventLog:
    now = [0.0]
    log = MemoryEventLog(clock=lambda: now[0])
    for at, events in events_by_time:
        now[0] = at
        log.append(session, events, expected_seq=log.last_seq(session))
    return log


def _messages(*messages: Message, start: int) -> list[Event]:
    return [MessageAppended(message=m.with_seq(start + i)) for i, m in enumerate(messages)]


def _served(through: int) -> ViewServed:
    return ViewServed(
        through_seq=through, estimated_tokens=0, view_hash="", checkpoint_id=None, message_count=0
    )


def _checkpoint(name: str, retain: int, previous: str | None) -> CheckpointCreated:
    return CheckpointCreated(
        compaction_id=name,
        checkpoint=Checkpoint(
            id=name,
            summary="what came before",
            retain_from_seq=retain,
            covers_through_seq=retain - 1,
            reason="manual",
            previous_checkpoint_id=previous,
        ),
    )


@pytest.mark.parametrize(("retain", "flagged"), [(3, True), (4, False)])
def test_verify_reports_a_checkpoint_that_cuts_where_the_active_one_does(
    retain: int, flagged: bool
) -> None:
    """A checkpoint whose ``retain_from_seq`` equals the active one's does not cut after it:
    verify reports it; one message later is fine."""
    messages = [m for n in range(3) for m in turn(n, 10)]
    log = _log(
        [
            (1.0, [SessionOpened(session_id="s", config=CONFIG)]),
            (2.0, _messages(*messages, start=1)),
            (3.0, [_checkpoint("cp1", 3, None)]),
            (4.0, [_checkpoint("cp2", retain, "cp1")]),
        ]
    )
    report = verify(log, "s")
    problems = [(m.kind, "cut after" in m.detail) for m in report.mismatches]
    assert problems == ([("checkpoint", True)] if flagged else [])


def _growing_log() -> MemoryEventLog:
    """Turns of 300, 600, 50 and 100 tokens: a commit of appends at 10 i, a view at 10 i + 5.

    Under ``BACKGROUND`` the second turn crosses the prepare point (900 tokens) and the fourth
    the threshold (1,050).
    """
    timeline: list[tuple[float, list[Event]]] = [
        (0.0, [SessionOpened(session_id="s", config=CONFIG)])
    ]
    seq = 1
    for n, tokens in enumerate((300, 600, 50, 100), start=1):
        timeline.append((10.0 * n, _messages(*turn(n, tokens), start=seq)))
        seq += 2
        timeline.append((10.0 * n + 5, [_served(seq - 1)]))
    return _log(timeline)


@pytest.mark.parametrize(("seconds", "in_time"), [(24.75, True), (25.0, True), (25.25, False)])
def test_what_if_counts_a_summary_ready_exactly_at_the_step_as_in_time(
    seconds: float, in_time: bool
) -> None:
    """The background summary starts after the commit at 20 s and the threshold is reached at
    the view at 45 s: a summary taking 25 s is ready exactly then, in time; 0.25 s more is late."""
    report = what_if(_growing_log(), "s", BACKGROUND, summary_seconds=seconds)
    prepared = [step for step in report.steps if step.prepared]
    assert len(prepared) == 1 and prepared[0].through_seq == 8
    assert prepared[0].in_time is in_time
    assert (report.prepared_in_time, report.prepared_late) == ((1, 0) if in_time else (0, 1))


def test_what_if_runs_a_background_summary_until_it_is_ready() -> None:
    """As a host: the summary started at 20 s is still running at the threshold (45 s) when it
    takes 25.25 s, so that step waits the 0.25 s left, and no second summary starts while it
    runs (one call); its checkpoint records how long the summary took."""
    counted = _Inputs()
    log = _growing_log()
    report = what_if(log, "s", BACKGROUND, summarizer=counted, summary_seconds=25.25)
    (prepared,) = [step for step in report.steps if step.prepared]
    assert prepared.in_time is False and prepared.waited_seconds == pytest.approx(0.25)
    assert report.summarizer_calls == len(counted.seqs) == 1
    assert report.waited_seconds == pytest.approx(0.25)


def _usage_log() -> MemoryEventLog:
    return _log(
        [
            (0.0, [SessionOpened(session_id="s", config=CONFIG)]),
            (1.0, _messages(*turn(1, 100), start=1)),
            (2.0, [UsageReported(prompt_tokens=700, through_seq=2)]),
            (3.0, [_served(2)]),
        ]
    )


@pytest.mark.parametrize(("use", "tokens"), [(True, 700), (False, 100), (None, 100)])
def test_what_if_uses_recorded_usage_only_when_asked(use: bool | None, tokens: int) -> None:
    """Recorded usage figures measured the original prompts: another Config uses them only
    when asked (``use_recorded_usage=True``)."""
    other = CONFIG.replace(micro_batch=2)
    report = what_if(_usage_log(), "s", other, use_recorded_usage=use)
    assert [step.view_tokens for step in report.steps] == [tokens]


def test_what_if_under_the_own_config_uses_recorded_usage() -> None:
    """Under the session's own Config the recorded usage is used by default."""
    report = what_if(_usage_log(), "s", CONFIG)
    assert [step.view_tokens for step in report.steps] == [700]


class _Inputs:
    """Records the seqs each summariser request covers."""

    def __init__(self) -> None:
        self.seqs: list[list[int]] = []

    def __call__(self, request: SummaryRequest, /) -> str:
        self.seqs.append([m.seq or 0 for m in request.messages])
        return digest_summarizer(request)


def test_what_if_decides_background_work_at_the_end_of_a_commit_only() -> None:
    """Events that share a timestamp were one commit: a background summary is planned after the
    last of them, not between them. The commit at 20 s (a long reply, then the next request)
    crosses the prepare point at its first event already; planned after the whole commit, the
    round cut moves to the new request and the summary covers the reply too."""
    log = _log(
        [
            (0.0, [SessionOpened(session_id="s", config=CONFIG)]),
            (10.0, _messages(*turn(1, 300), start=1)),
            (15.0, [_served(2)]),
            (20.0, _messages(Message.assistant("b" * 1800), Message.user("next"), start=3)),
            (25.0, [_served(4)]),
        ]
    )
    inputs = _Inputs()
    what_if(log, "s", BACKGROUND, summarizer=inputs, summary_seconds=1.0)
    assert inputs.seqs and inputs.seqs[0] == [1, 2, 3]
