"""Each kind of problem ``verify`` reports, on a hand-written log that has exactly that defect."""

from __future__ import annotations

import pytest

from ctxledger import Config, Message, ToolCall
from ctxledger.checkpoints import Checkpoint
from ctxledger.events import CheckpointCreated, Event, MessageAppended, SessionOpened
from ctxledger.replay import verify
from ctxledger.storage import MemoryEventLog

CALL = ToolCall("c1", "bash", '{"command": "ls"}')


def appended(message: Message, seq: int) -> Event:
    """A MessageAppended event for ``message`` with ``seq``."""
    return MessageAppended(message=message.with_seq(seq))


def healthy() -> list[Event]:
    """Opened; a user message, a tool call, its result, an answer."""
    return [
        SessionOpened(session_id="s", config=Config()),
        appended(Message.user("go"), 1),
        appended(Message.assistant("", [CALL]), 2),
        appended(Message.tool("a.txt", "c1", "bash"), 3),
        appended(Message.assistant("done"), 4),
    ]


def checkpoint(retain_from_seq: int) -> Event:
    """A manual checkpoint keeping history from ``retain_from_seq`` on."""
    return CheckpointCreated(
        compaction_id="k1",
        checkpoint=Checkpoint(
            id="cp1",
            summary="earlier work",
            retain_from_seq=retain_from_seq,
            covers_through_seq=retain_from_seq - 1,
            reason="manual",
        ),
    )


def mismatches(events: list[Event]) -> list[tuple[int, str, str]]:
    """``(event seq, kind, detail)`` of every mismatch verify finds in a log of ``events``."""
    log = MemoryEventLog()
    log.append("s", events, expected_seq=0)
    report = verify(log)
    assert report.ok is not report.mismatches
    return [(m.seq, m.kind, m.detail) for m in report.mismatches]


def test_a_healthy_log_has_no_mismatch() -> None:
    """The base every other case damages verifies clean, with its checkpoint."""
    assert mismatches([*healthy(), checkpoint(4)]) == []


def test_a_checkpoint_splitting_a_tool_call_from_its_result_is_reported() -> None:
    """Retaining from the result (seq 3) leaves its call (seq 2) in the summary."""
    assert mismatches([*healthy(), checkpoint(3)]) == [
        (6, "checkpoint", "checkpoint cp1 splits tool result seq 3 from its call")
    ]


def test_a_checkpoint_with_an_impossible_range_is_reported() -> None:
    """A checkpoint retaining from past the end of history."""
    assert mismatches([*healthy(), checkpoint(9)]) == [
        (6, "checkpoint", "checkpoint cp1 has an impossible range")
    ]


def test_a_tool_result_answering_no_open_call_is_reported() -> None:
    """The result names a call nobody made."""
    events = healthy()
    events[3] = appended(Message.tool("a.txt", "c9", "bash"), 3)
    assert mismatches(events[:4]) == [
        (4, "tool_pairing", "tool result 'c9' answers no open call")
    ]


def test_a_message_seq_that_skips_is_reported() -> None:
    """Message seq 5 right after 1."""
    events = [*healthy()[:2], appended(Message.assistant("hi"), 5)]
    assert mismatches(events) == [(3, "message_seq", "message seq 5 follows 1")]


@pytest.mark.parametrize("first", [appended(Message.user("go"), 1), checkpoint(1)])
def test_a_log_not_starting_with_session_opened_is_a_structure_report(first: Event) -> None:
    """Whatever the first event is, if it is not SessionOpened the structure is wrong."""
    assert mismatches([first]) == [
        (1, "structure", "the log does not start with SessionOpened")
    ]
