"""Compaction planning: every outcome reason, the cut rules, reserves and reactive retries."""

from __future__ import annotations

from typing import Any

import pytest

from ctxledger import Message, SummaryRequest
from ctxledger.domain import (
    CharTokenizer,
    CompactionPlan,
    CompactionResult,
    build_view,
    complete_compaction,
    plan_compaction,
    summary_max_chars,
)
from ctxledger.events import CheckpointCreated

from .builders import call, recorded_session, session, step

TOKENS = CharTokenizer()
# Threshold 800 tokens = 2400 chars, target 600; summary room 15 % of the target (270 chars);
# no fact block, masking off, no kept first request: these tests are about the cut.
SMALL: dict[str, Any] = {
    "context_window": 1000,
    "compaction_target": 0.6,
    "min_retain_rounds": 2,
    "micro_keep_recent": 1000,
    "fact_index_chars": 0,
    "keep_first_request": False,
}


def _rounds(count: int, size: int = 300) -> list[Message]:
    out: list[Message] = []
    for index in range(count):
        out += [Message.user(f"{index}" + "u" * (size - 1)), Message.assistant("a" * size)]
    return out


def _plan(s: Any, trigger: str = "threshold_exceeded", **kwargs: Any) -> Any:
    return plan_compaction(s.state, tokenizer=TOKENS, trigger=trigger, **kwargs)


def _reason(s: Any, trigger: str = "threshold_exceeded", **kwargs: Any) -> str:
    outcome = _plan(s, trigger, **kwargs)
    assert isinstance(outcome, CompactionResult), outcome
    return outcome.reason


# --- reasons, in order ------------------------------------------------------------------------


def test_fewer_than_three_messages_never_compact() -> None:
    """messages_not_enough comes first, for every trigger."""
    s = session(Message.user("u" * 10_000), Message.assistant("a" * 10_000), **SMALL)
    for trigger in ("threshold_exceeded", "manual", "prompt_too_long"):
        assert _reason(s, trigger) == "messages_not_enough"


def test_nothing_appended_since_the_checkpoint_is_checkpoint_current() -> None:
    """A second manual compaction with no new message does nothing."""
    s = session(*_rounds(4), **SMALL)
    assert s.compact().compacted
    assert _reason(s, "manual") == "checkpoint_current"


def test_below_threshold_does_not_compact() -> None:
    """799 tokens against a threshold of 800."""
    messages = _rounds(4)
    messages[-1] = Message.assistant("a" * 297)
    assert _reason(session(*messages, **SMALL)) == "below_threshold"


def test_equality_compacts() -> None:
    """Exactly 800 tokens against 800 plans a compaction."""
    s = session(*_rounds(4), **SMALL)
    assert build_view(s.state, tokenizer=TOKENS).estimated_tokens == 800
    assert isinstance(_plan(s), CompactionPlan)


def test_over_threshold_by_usage_with_few_rounds_is_rounds_not_enough() -> None:
    """The provider's figure triggers, but the retained rounds alone fit: rounds_not_enough."""
    s = session(*_rounds(2, size=30), **SMALL)
    s.record_usage(900)
    assert _reason(s) == "rounds_not_enough"


def test_the_same_round_cut_again_is_no_progress() -> None:
    """Without a new round the planned cut is the active one: never pay twice."""
    s = session(*_rounds(4), **SMALL)
    assert s.compact().retain_from_seq == 5
    s.append(Message.user("more"))  # a new round moves the cut by one round: progress
    assert s.compact().retain_from_seq == 7
    s.append(Message.assistant("same round"))
    assert _reason(s, "manual") == "no_progress"


def test_manual_skips_the_threshold_check() -> None:
    """A small session compacts on request."""
    s = session(*_rounds(4, size=10), **SMALL)
    assert isinstance(_plan(s, "manual"), CompactionPlan)


def test_unknown_trigger_is_refused() -> None:
    """Only the three triggers are accepted."""
    with pytest.raises(ValueError, match="unknown compaction trigger"):
        _plan(session(*_rounds(4), **SMALL), "sometimes")


# --- where the cut goes ------------------------------------------------------------------------


def test_cut_keeps_the_last_min_retain_rounds_rounds() -> None:
    """Rounds start at 1, 3, 5, 7: keeping 2 cuts at seq 5, a seq not an index."""
    plan = _plan(session(*_rounds(4), **SMALL))
    assert (plan.retain_from_seq, plan.covers_through_seq) == (5, 4)
    assert [m.seq for m in plan.messages] == [1, 2, 3, 4]
    assert not plan.step_level


def test_head_system_messages_are_never_summarised() -> None:
    """The system preamble is left out of the summariser's input and heads the view."""
    s = session(Message.system("rules"), *_rounds(4), **SMALL)
    plan = _plan(s)
    assert [m.role for m in plan.messages].count("system") == 0
    s.compact_if_needed()
    assert build_view(s.state, tokenizer=TOKENS).messages[0] == s.state.history[0]


def test_second_compaction_is_incremental() -> None:
    """Only messages after the active coverage are sent, with the previous summary."""
    s = session(*_rounds(4), **SMALL)
    first = s.compact()
    s.extend(_rounds(1))
    plan = _plan(s, "manual")
    assert plan.previous_checkpoint_id == first.checkpoint_id
    assert plan.previous_summary == s.state.active_checkpoint.summary
    assert [m.seq for m in plan.messages] == [5, 6]


def test_cut_is_never_between_a_call_and_its_result() -> None:
    """Step-level cuts land on assistant or user messages with every earlier call answered."""
    messages = [Message.user("go")]
    for index in range(12):
        messages += step(f"c{index}", "o" * 300)
    s = session(*messages, **SMALL)
    plan = _plan(s)
    cut = plan.retain_from_seq
    assert s.state.history[cut - 1].role == "assistant"
    answered = {m.tool_call_id for m in s.state.history[: cut - 1] if m.role == "tool"}
    calls = {c.id for m in s.state.history[: cut - 1] for c in m.tool_calls}
    assert calls == answered


def test_one_oversized_round_is_cut_at_a_step_boundary() -> None:
    """One round over budget: a step-level cut, and the view ends below the threshold."""
    messages = [Message.user("go")]
    for index in range(12):
        messages += step(f"c{index}", "o" * 300)
    s = session(*messages, **SMALL)
    plan = _plan(s)
    assert plan.step_level
    result = s.compact_if_needed()
    assert result.compacted and result.estimated_tokens < result.threshold


def test_step_level_cut_leaves_room_to_grow() -> None:
    """The retained tail aims at half the room, so the next step does not compact again."""
    messages = [Message.user("go")]
    for index in range(12):
        messages += step(f"c{index}", "o" * 300)
    s = session(*messages, **SMALL)
    s.compact_if_needed()
    s.extend(step("next", "o" * 300))
    assert _reason(s) == "below_threshold"


def test_retained_minimum_larger_than_budget_then_no_progress() -> None:
    """A last step larger than the threshold: cut before it, then no_progress, not the same cut.

    As a Config recorded before the floor guard decodes (``floor_guard=False``, schema 3); with
    the guard, and with every Config built now (the two marks never compact when that cannot
    bring the view under the threshold), the same session is not compacted at all:
    ``floor_above_threshold``.
    """
    huge = '{"text": "' + "x" * 3000 + '"}'
    messages = (
        Message.user("go"),
        Message.assistant("", [call("c1", "write", huge), call("c2")]),
        Message.tool("ok", "c1", "write"),
    )
    s = recorded_session(*messages, **SMALL, floor_guard=False)
    result = s.compact_if_needed()
    assert result.compacted and result.retain_from_seq == 2
    assert result.estimated_tokens >= result.threshold
    s.append(Message.tool("ok", "c2"))
    assert _reason(s) == "no_progress"
    guarded = session(*messages, **SMALL)
    result = guarded.compact_if_needed()
    assert not result.compacted and result.reason == "floor_above_threshold"
    assert result.floor_tokens >= result.threshold
    guarded.append(Message.tool("ok", "c2"))
    assert _reason(guarded) == "floor_above_threshold"


def test_summary_room_is_reserved_and_passed_as_max_chars() -> None:
    """Derived room: 15 % of the target in chars (600 * 0.15 * 3 = 270; before the two marks
    it was a tenth of the threshold). The planned view ends at or below the target."""
    s = session(*_rounds(4), **SMALL)
    assert summary_max_chars(s.state.config) == 270
    plan = _plan(s)
    assert plan.max_chars == 270
    assert plan.planned_tokens <= plan.target_tokens == 600


def test_configured_summary_room_is_used() -> None:
    """summary_max_chars set in the Config wins."""
    assert _plan(session(*_rounds(4), summary_max_chars=99, **SMALL)).max_chars == 99


def test_a_full_size_summary_still_fits() -> None:
    """With a summary of exactly max_chars the view is at most the target."""
    s = session(*_rounds(4), summarizer=lambda r: "S" * 10_000, **SMALL)
    result = s.compact_if_needed()
    assert len(s.state.active_checkpoint.summary) == 270
    assert result.estimated_tokens <= 600


def test_pending_text_counts_towards_the_threshold() -> None:
    """Pending text can push the estimate over the threshold."""
    messages = _rounds(4)
    messages[-1] = Message.assistant("a" * 270)
    s = session(*messages, **SMALL)
    assert _reason(s) == "below_threshold"
    assert isinstance(_plan(s, pending="p" * 30), CompactionPlan)


# --- reactive compaction -------------------------------------------------------------------------


def test_reactive_first_attempt_keeps_half_the_rounds() -> None:
    """prompt_too_long keeps min_retain_rounds >> 1 rounds and targets half the view."""
    s = session(*_rounds(12, size=10), context_window=100_000, min_retain_rounds=4)
    plan = _plan(s, "prompt_too_long")
    assert plan.retain_from_seq == s.state.user_seqs[-2]
    assert plan.target_tokens == build_view(s.state, tokenizer=TOKENS).view_tokens // 2


def test_reactive_retries_cut_harder_each_time() -> None:
    """Each attempt retains from a later seq, even with nothing appended in between."""
    s = session(*_rounds(40, size=30), context_window=100_000, min_retain_rounds=16)
    cuts = []
    for _ in range(3):
        result = s.reactive_compact()  # attempt 0, 1, 2: nothing appended in between
        assert result.compacted, result
        cuts.append(result.retain_from_seq)
    assert cuts == sorted(cuts) and len(set(cuts)) == 3


def test_reactive_reaches_step_level_cuts() -> None:
    """With no round left to drop, a retry cuts inside the last round."""
    messages = [Message.user("go")]
    for index in range(6):
        messages += step(f"c{index}", "o" * 30)
    s = session(*messages, context_window=100_000, min_retain_rounds=1)
    result = s.reactive_compact()
    assert result.compacted and s.state.history[result.retain_from_seq - 1].role == "assistant"


# --- the summariser and the checkpoint ------------------------------------------------------------


def test_focus_reaches_the_summariser() -> None:
    """A manual compaction's focus is in every request and on the checkpoint."""
    seen: list[SummaryRequest] = []
    s = session(*_rounds(4), summarizer=lambda r: seen.append(r) or "S", **SMALL)
    s.compact(focus="keep the API signatures")
    assert seen[0].focus == "keep the API signatures"
    assert s.state.active_checkpoint.focus == "keep the API signatures"


def test_complete_compaction_builds_the_checkpoint() -> None:
    """The checkpoint names the cut, the coverage, the reason and the estimates."""
    s = session(*_rounds(4), **SMALL)
    plan = _plan(s)
    before = s.state.to_snapshot()
    checkpoint, result = complete_compaction(
        s.state, plan, "S" * 1000, checkpoint_id="cp9", created_at=12.5, tokenizer=TOKENS
    )
    assert s.state.to_snapshot() == before  # pure
    assert (checkpoint.id, checkpoint.retain_from_seq, checkpoint.covers_through_seq) == (
        "cp9",
        5,
        4,
    )
    assert (checkpoint.reason, checkpoint.created_at, checkpoint.previous_checkpoint_id) == (
        "threshold_exceeded",
        12.5,
        None,
    )
    assert checkpoint.summary == "S" * 270
    assert (checkpoint.tokens_before, checkpoint.tokens_after) == (800, result.estimated_tokens)
    assert checkpoint.input_hash == plan.input_hash
    assert (result.compacted, result.reason, result.messages_compacted) == (True, "compacted", 4)


def test_stale_plan_is_refused() -> None:
    """A plan that extends a checkpoint that is no longer active raises."""
    s = session(*_rounds(4), **SMALL)
    plan = _plan(s)
    s.compact_if_needed()
    with pytest.raises(ValueError, match="stale"):
        complete_compaction(s.state, plan, "S", checkpoint_id="x", created_at=0, tokenizer=TOKENS)


def test_summary_unavailable_keeps_the_previous_checkpoint() -> None:
    """A summariser returning None leaves the active checkpoint in place."""
    s = session(*_rounds(4), **SMALL)
    s.compact()
    active = s.state.active_checkpoint
    s.summarizer = lambda request: None
    s.extend(_rounds(1))
    result = s.compact()
    assert (result.compacted, result.reason) == (False, "summary_unavailable")
    assert s.state.active_checkpoint == active


def test_raising_summariser_is_summary_unavailable() -> None:
    """An exception from the summariser ends the compaction without a checkpoint."""

    def broken(request: SummaryRequest) -> str:
        raise RuntimeError("down")

    s = session(*_rounds(4), summarizer=broken, **SMALL)
    assert s.compact().reason == "summary_unavailable"
    assert s.state.active_checkpoint is None


def test_input_hash_addresses_the_summariser_input() -> None:
    """Same input, same hash; another focus, another hash."""
    s = session(*_rounds(4), **SMALL)
    assert _plan(s).input_hash == _plan(s).input_hash
    assert _plan(s, "manual", focus="x").input_hash != _plan(s, "manual").input_hash


def test_checkpoint_replays_to_the_same_view() -> None:
    """Recording the checkpoint and replaying the events serves the same view hash."""
    s = session(*_rounds(4), **SMALL)
    s.compact_if_needed()
    view = build_view(s.state, tokenizer=TOKENS)
    assert build_view(s.replay(), tokenizer=TOKENS).view_hash == view.view_hash


def test_checkpoint_created_event_carries_the_checkpoint() -> None:
    """The host records CheckpointCreated(checkpoint=...) from complete_compaction."""
    s = session(*_rounds(4), **SMALL)
    s.compact_if_needed()
    created = [e for e in s.events if isinstance(e, CheckpointCreated)]
    assert created[0].checkpoint == s.state.active_checkpoint


def test_last_step_over_budget_is_still_cut_before() -> None:
    """min_retain_rounds=0 and a last step over budget: cut at that step, not no_progress."""
    config = {**SMALL, "min_retain_rounds": 0}
    last = Message.assistant("", [call(f"p{i}") for i in range(4)])
    s = session(Message.user("go"), *step("c1", "o" * 600), last, **config)
    s.append_many([Message.tool("o" * 600, f"p{i}") for i in range(4)])
    result = s.compact_if_needed()
    assert result.compacted and result.retain_from_seq == 4
    assert result.threshold <= result.estimated_tokens <= 1000


def test_plan_makes_its_compaction_started_event() -> None:
    """plan.started(id) records the cut, coverage, estimate, focus and attempt."""
    plan = _plan(session(*_rounds(4), **SMALL), "manual", focus="f")
    event = plan.started("c7")
    assert (event.compaction_id, event.reason, event.retain_from_seq) == ("c7", "manual", 5)
    assert (event.covers_through_seq, event.estimated_tokens, event.focus) == (
        4,
        plan.estimated_tokens,
        "f",
    )
