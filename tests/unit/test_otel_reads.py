"""What the OpenTelemetry instrumentor reads back from the log after a traced call."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel test dependencies are not installed")

from ctxledger import Config
from ctxledger.events import Event, SessionOpened, SummaryPrepared, ViewServed
from ctxledger.integrations._otel_spans import _recent
from ctxledger.storage import MemoryEventLog


def _view(through: int) -> ViewServed:
    return ViewServed(through_seq=through, estimated_tokens=10, view_hash=f"h{through}")


def test_a_read_goes_back_to_the_last_event_read_not_only_to_the_previous_step() -> None:
    """A summary prepared between two reads but before the previous step's view is read: the
    read its finished call triggered could have come before the event reached the log (found
    as a flaky missing summariser span under load)."""
    log = MemoryEventLog()
    first: list[Event] = [SessionOpened(session_id="s", config=Config()), _view(0)]
    log.append("s", first, expected_seq=0)
    floor = log.last_seq("s")  # the last event the instrumentor read
    later: list[Event] = [
        SummaryPrepared(compaction_id="bg", retain_from_seq=3, covers_through_seq=2, summary="s"),
        *[_view(n) for n in range(1, 12)],  # steps after it: more than one page back
    ]
    log.append("s", later, expected_seq=floor)
    read = _recent(log, "s", floor)
    assert [r.seq for r in read] == list(range(floor + 1, log.last_seq("s") + 1))
    assert isinstance(read[0].event, SummaryPrepared)


def test_a_read_keeps_to_the_newest_events_within_its_lookback() -> None:
    """Nothing at or below the floor is read again; at most the lookback is read."""
    log = MemoryEventLog()
    events: list[Event] = [
        SessionOpened(session_id="s", config=Config()),
        *[_view(n) for n in range(700)],
    ]
    log.append("s", events, expected_seq=0)
    high = log.last_seq("s")
    assert _recent(log, "s", high) == []
    assert [r.seq for r in _recent(log, "s", high - 3)] == [high - 2, high - 1, high]
    assert len(_recent(log, "s", 0)) == 512 and _recent(log, "s", 0)[-1].seq == high
