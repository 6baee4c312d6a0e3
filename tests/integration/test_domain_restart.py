"""``DomainSession.from_events`` and ``restart``: what a host does first with a session it finds
in a log after a restart (the domain's ``Recover``), run by the testing kit on the same events.

The host's side is real: an LMDB host closed with a tool call left open, and a host whose
background summariser was stopped in the middle (the log copied as a crash would leave it).
"""

from __future__ import annotations

import threading
from pathlib import Path

import msgspec
import pytest

from ctxledger import Config, Host, InvalidArgumentError, Message, SummaryRequest, ToolCall
from ctxledger.events import (
    CompactionFailed,
    CompactionStarted,
    Event,
    SessionOpened,
    ToolResultSynthesized,
)
from ctxledger.events.codec import encode_payload
from ctxledger.storage import MemoryEventLog
from ctxledger.testing import DomainSession, digest_summarizer

NOW = 1_765_000_000.0


def _encoded(events: list[Event]) -> list[bytes]:
    """The events as recorded, but a session's creation time (stamped by the host's clock)."""
    return [
        encode_payload(
            msgspec.structs.replace(event, created_at=0.0)
            if isinstance(event, SessionOpened)
            else event
        )
        for event in events
    ]


def test_a_tool_call_left_open_gets_the_hosts_interrupted_result(tmp_path: Path) -> None:
    """The host that next opens the log answers the open call; the kit's restart records the
    same event, and both then serve the same view."""
    path = tmp_path / "db"
    with Host.open(path) as host:
        session = host.session("s")
        session.append(Message.user("list the files"))
        session.append(Message.assistant("", [ToolCall("t1", "bash", '{"command": "ls"}')]))
        recorded = [record.event for record in host.log.read("s")]
    kit = DomainSession.from_events(recorded)
    assert kit.events == recorded and kit.state.last_seq == 2
    restarted = kit.restart()
    with Host.open(path) as host:
        view = host.session("s").build_model_view()
        after = [record.event for record in host.log.read("s")][len(recorded) :]
    assert [type(event) for event in restarted] == [ToolResultSynthesized]
    assert _encoded(restarted) == _encoded(after[: len(restarted)])
    assert kit.build_model_view().messages == view.messages
    assert kit.restart() == []  # in order now: nothing more to recover


def test_a_background_summary_cut_short_is_recorded_as_failed_as_the_host_does() -> None:
    """A log that ends with a background ``CompactionStarted`` (its summariser died with the
    process): the next host records it failed (``interrupted``); so does the kit's restart."""
    called, release = threading.Event(), threading.Event()

    def stalled(request: SummaryRequest) -> str:
        called.set()
        release.wait(60)
        return digest_summarizer(request)

    config = Config(context_window=2_000, min_retain_rounds=1)
    log = MemoryEventLog()
    with Host(log, config=config, summarizer=stalled, clock=lambda: NOW) as host:
        session = host.session("s")
        for index in range(40):
            session.append(Message.user(f"request {index} " + "x" * 300))
            if called.is_set():
                break
        assert called.wait(60), "no background summary started"
        logged = [record.event for record in log.read("s")]
        release.set()
    # The log as a crash right after the summary started leaves it (appends that came while
    # the summariser was being called may follow it in the live log).
    started = [
        index
        for index, event in enumerate(logged)
        if isinstance(event, CompactionStarted) and event.background
    ]
    crashed = logged[: started[-1] + 1]
    image = MemoryEventLog()  # the log as the crash left it
    image.append("s", crashed, expected_seq=0)
    with Host(image, config=config, summarizer=digest_summarizer, clock=lambda: NOW) as host:
        host.session("s").current_messages()
        after = [record.event for record in image.read("s")][len(crashed) :]
    restarted = DomainSession.from_events(crashed).restart()
    assert [type(event) for event in restarted] == [CompactionFailed]
    assert isinstance(restarted[0], CompactionFailed) and restarted[0].reason == "interrupted"
    assert _encoded(restarted) == _encoded(after[:1])


def test_from_events_refuses_what_is_no_sessions_own_log() -> None:
    """No events, no ``SessionOpened`` first, a fork's log, or a ``session_id`` besides the
    log's: an ``InvalidArgumentError`` naming the argument."""
    parent = DomainSession(Config(), session_id="p")
    parent.append(Message.user("hello"))
    fork = parent.fork("f")
    cases = [
        ([], {}, "events"),
        (parent.events[1:], {}, "events"),
        (fork.events, {}, "events"),
        (parent.events, {"session_id": "other"}, "session_id"),
    ]
    for events, options, argument in cases:
        with pytest.raises(InvalidArgumentError) as caught:
            DomainSession.from_events(events, **options)
        assert caught.value.argument == argument
