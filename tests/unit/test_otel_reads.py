"""What the OpenTelemetry instrumentor keeps of the batches a host tells it as they commit."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel test dependencies are not installed")

from ctxledger import Config
from ctxledger.events import (
    CompactionStarted,
    Event,
    SessionOpened,
    SummaryPrepared,
    ViewServed,
)
from ctxledger.integrations._otel_spans import _Cursor
from ctxledger.storage import MemoryEventLog, RecordedEvent


def _view(through: int) -> ViewServed:
    return ViewServed(through_seq=through, estimated_tokens=10, view_hash=f"h{through}")


def _records(events: list[Event]) -> list[RecordedEvent]:
    log = MemoryEventLog()
    return log.append("s", events, expected_seq=0)


def test_compaction_events_are_kept_in_order_each_after_the_agent_event_that_dates_it() -> None:
    """Of the other events only the newest before each compaction event is kept: all a span
    needs of them is when the agent last acted."""
    started = CompactionStarted(
        compaction_id="bg",
        reason="threshold",
        retain_from_seq=3,
        covers_through_seq=2,
        background=True,
    )
    prepared = SummaryPrepared(
        compaction_id="bg", retain_from_seq=3, covers_through_seq=2, summary="s"
    )
    records = _records(
        [
            SessionOpened(session_id="s", config=Config()),
            _view(0),
            _view(1),
            started,
            _view(2),
            prepared,
            _view(3),
        ]
    )
    cursor = _Cursor()
    cursor.add(records[:2])
    cursor.add(records[2:])
    taken = cursor.take()
    assert [r.seq for r in taken] == [3, 4, 5, 6]
    kinds = [type(r.event) for r in taken]
    assert kinds == [ViewServed, CompactionStarted, ViewServed, SummaryPrepared]
    assert cursor.take() == []  # each event is taken once
    assert cursor.agent is not None and cursor.agent.seq == 7  # dates the next one, if any


def test_steps_without_compaction_events_leave_nothing_to_take() -> None:
    """A step that only appended and was served is not processed at all."""
    cursor = _Cursor()
    cursor.add(_records([SessionOpened(session_id="s", config=Config()), _view(0), _view(1)]))
    assert cursor.take() == []
    assert cursor.agent is not None and cursor.agent.seq == 3
    assert isinstance(cursor.agent.event, ViewServed)
    assert not cursor.pending
