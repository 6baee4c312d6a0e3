"""Retraction and clearing: MessageRetracted and HistoryCleared in the fold, views and planning."""

from __future__ import annotations

import pytest

from ctxledger import InvalidMessageError, Message
from ctxledger.domain import (
    SNAPSHOT_VERSION,
    CharTokenizer,
    CompactionPlan,
    SessionState,
    build_view,
    clear_event,
    plan_compaction,
    retraction_events,
    shown_messages,
)
from ctxledger.errors import InvalidSeqError
from ctxledger.events import HistoryCleared, MessagePinned, MessageRetracted
from ctxledger.testing import DomainSession, check_view_invariants

from .builders import call, rounds, session, step

TOKENS = CharTokenizer()


def _retract(s: DomainSession, replacement: list[Message] | None = None) -> None:
    for event in retraction_events(s.state, replacement or []):
        s.record(event)


def _clear(s: DomainSession) -> None:
    s.record(clear_event(s.state))


def _seqs(s: DomainSession) -> list[int | None]:
    return [m.seq for m in build_view(s.state, tokenizer=TOKENS).messages]


def _check(s: DomainSession) -> None:
    state = s.state
    check_view_invariants(
        state.history,
        build_view(state, tokenizer=TOKENS),
        state.config,
        checkpoint=state.active_checkpoint,
        pins=state.pins,
        retracted=state.retracted,
        cleared_through=state.cleared_through,
    )


def test_retraction_withdraws_the_newest_message_and_keeps_history() -> None:
    """The newest message leaves the view; history still holds it; the next target is older."""
    s = session(Message.user("a"), Message.assistant("b"), Message.user("c"))
    _retract(s)
    assert _seqs(s) == [1, 2]
    assert len(s.state.history) == 3 and s.state.retracted == {3}
    assert s.state.retraction_target() == 2
    _check(s)


def test_retraction_then_append_shows_the_new_message() -> None:
    """A message appended after a retraction takes the next seq and is shown."""
    s = session(Message.user("a"), Message.assistant("wrong"))
    _retract(s)
    s.append(Message.assistant("right"))
    assert _seqs(s) == [1, 3]
    assert shown_messages(s.state)[-1].content == "right"
    _check(s)


def test_retracting_a_tool_result_reopens_its_call() -> None:
    """The call is open again: only its result may follow, and then the pair is whole."""
    s = session(Message.user("go"), *step("c1", "out"))
    _retract(s)
    assert list(s.state.open_tool_calls()) == ["c1"]
    with pytest.raises(InvalidMessageError, match="unanswered"):
        s.state.check_append([Message.user("next")])
    s.append(Message.tool("out again", "c1", "bash"))
    assert _seqs(s) == [1, 2, 4]
    _check(s)


def test_retracting_an_assistant_message_frees_its_call_ids() -> None:
    """After its result and the call are retracted, the same call id may be used again."""
    s = session(Message.user("go"), *step("c1", "out"))
    _retract(s)
    _retract(s)
    assert not s.state.open_tool_calls()
    s.extend(step("c1", "again"))
    assert _seqs(s) == [1, 4, 5]
    _check(s)


def test_a_replacement_is_validated_after_the_retraction() -> None:
    """Retracting a two-call message and putting one call back reuses its id in one batch."""
    s = session(Message.user("go"), Message.assistant("", [call("c1"), call("c2")]))
    _retract(s, [Message.assistant("", [call("c1")])])
    assert [c.id for c in shown_messages(s.state)[-1].tool_calls] == ["c1"]
    assert list(s.state.open_tool_calls()) == ["c1"]
    with pytest.raises(InvalidMessageError, match="never made"):
        retraction_events(s.state, [Message.tool("x", "c9")])
    assert s.state.retracted == {2}  # the refused request wrote nothing


def test_nothing_to_retract_is_refused() -> None:
    """An empty session, or one whose every message is withdrawn, refuses a retraction."""
    s = session()
    with pytest.raises(InvalidSeqError, match="no message to retract"):
        retraction_events(s.state)
    s.append(Message.user("a"))
    _retract(s)
    with pytest.raises(InvalidSeqError, match="no message to retract"):
        retraction_events(s.state)


def test_a_message_covered_by_the_checkpoint_cannot_be_retracted() -> None:
    """Once the retained tail is retracted, the newest shown message is in the summary: refused."""
    s = session(*rounds(6), min_retain_rounds=2)
    assert s.compact().compacted
    cut = s.state.active_checkpoint.retain_from_seq  # type: ignore[union-attr]
    for _ in range(s.state.last_seq - cut + 1):
        _retract(s)
    assert s.state.retracted == set(range(cut, 13))
    with pytest.raises(InvalidSeqError, match="covered by checkpoint"):
        retraction_events(s.state)
    _check(s)


def test_the_fold_refuses_to_retract_any_other_message() -> None:
    """A log that retracts a message other than the newest shown one cannot be folded."""
    s = session(Message.user("a"), Message.assistant("b"))
    with pytest.raises(InvalidSeqError, match="newest message"):
        s.state.apply(MessageRetracted(seq=1))


def test_a_retracted_message_loses_its_pin_and_cannot_be_pinned() -> None:
    """Pins lapse with the message; pinning a withdrawn message is refused, and ignored in logs."""
    s = session(Message.user("a"), Message.assistant("b"))
    s.pin(2)
    _retract(s)
    assert s.state.pins == set()
    with pytest.raises(InvalidSeqError, match="withdrawn"):
        s.state.check_pin(2)
    s.record(MessagePinned(seq=2))
    assert s.state.pins == set()


def test_a_retracted_first_user_message_makes_way_for_the_next() -> None:
    """The next user message becomes the first; a system message in between heads the view."""
    s = session(Message.system("sys"), Message.user("first"))
    _retract(s)
    s.extend([Message.system("more rules"), Message.user("second")])
    assert s.state.first_user_seq == 4
    assert [m.content for m in s.state.head] == ["sys", "more rules"]
    _check(s)


def test_usage_measured_with_a_retracted_message_is_dropped() -> None:
    """A usage figure whose prompt showed the retracted message no longer counts."""
    s = session(Message.user("a"), Message.assistant("b"))
    s.record_usage(5000)
    _retract(s)
    assert s.state.usage is None


def test_clear_starts_an_empty_view() -> None:
    """After a clear the view holds nothing: no head, no summary, no pins."""
    s = session(Message.system("sys"), *rounds(6), min_retain_rounds=2)
    s.pin(3)
    assert s.compact().compacted
    _clear(s)
    view = build_view(s.state, tokenizer=TOKENS)
    assert view.messages == () and view.checkpoint_id is None and view.mode == "full_history"
    assert s.state.active_checkpoint is None and len(s.state.checkpoints) == 1
    assert s.state.pins == set() and s.state.head == [] and s.state.first_user_seq is None
    _check(s)


def test_after_a_clear_new_system_messages_head_the_view() -> None:
    """The conversation restarts: system, user and assistant messages after it are shown."""
    s = session(Message.system("old"), *rounds(2))
    _clear(s)
    s.extend([Message.system("new"), Message.user("hi"), Message.assistant("hello")])
    assert [m.content for m in build_view(s.state, tokenizer=TOKENS).messages] == [
        "new",
        "hi",
        "hello",
    ]
    _check(s)


def test_a_clear_closes_open_calls_and_frees_every_id() -> None:
    """An open call is closed; its id and the ids of answered calls may be used again."""
    s = session(Message.user("go"), *step("c1", "out"), Message.assistant("", [call("c2")]))
    _clear(s)
    assert not s.state.open_tool_calls()
    s.extend([Message.user("again"), *step("c1", "x"), *step("c2", "y")])
    _check(s)


def test_the_planner_never_summarises_cleared_messages() -> None:
    """The first checkpoint after a clear covers only later messages and starts afresh."""
    s = session(*rounds(8), min_retain_rounds=2)
    assert s.compact().compacted
    _clear(s)
    s.extend(rounds(6, user="new"))
    plan = plan_compaction(s.state, tokenizer=TOKENS, trigger="manual")
    assert isinstance(plan, CompactionPlan)
    assert plan.previous_summary is None and plan.previous_checkpoint_id is None
    assert all(m.seq is not None and m.seq > 16 for m in plan.messages)
    assert s.compact().compacted
    _check(s)


def test_the_planner_skips_retracted_messages() -> None:
    """A retracted message inside the summarised range is not handed to the summariser."""
    s = session(*rounds(2), min_retain_rounds=2)
    _retract(s)
    s.extend([Message.assistant("fixed"), *rounds(5, user="v")])
    plan = plan_compaction(s.state, tokenizer=TOKENS, trigger="manual")
    assert isinstance(plan, CompactionPlan)
    assert 4 not in [m.seq for m in plan.messages]


def test_a_clear_must_run_through_the_newest_message() -> None:
    """A log clearing less than everything cannot be folded."""
    s = session(Message.user("a"), Message.assistant("b"))
    with pytest.raises(InvalidSeqError, match="through the newest"):
        s.state.apply(HistoryCleared(through_seq=1))


def test_snapshots_carry_retractions_and_clears() -> None:
    """Snapshot + tail = full replay, byte for byte, with retractions and a clear recorded."""
    s = session(*rounds(3), Message.user("x"))
    _retract(s)
    _clear(s)
    s.extend(rounds(2))
    _retract(s)
    for split in range(1, len(s.events) + 1):
        resumed = SessionState.from_snapshot(s.replay(s.events[:split]).to_snapshot())
        for event in s.events[split:]:
            resumed.apply(event)
        assert resumed.to_snapshot() == s.state.to_snapshot()
    assert SNAPSHOT_VERSION == 7


def test_shown_messages_with_a_limit_returns_the_newest() -> None:
    """The newest ``limit`` shown messages, oldest first, withdrawn ones skipped."""
    s = session(*rounds(3))
    _retract(s)
    assert [m.seq for m in shown_messages(s.state, 2)] == [4, 5]
    assert [m.seq for m in shown_messages(s.state)] == [1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="limit"):
        shown_messages(s.state, -1)
