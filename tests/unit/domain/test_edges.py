"""Edges of the domain that a changed comparison or a dropped input would cross unnoticed.

Each test is built so that it fails if its boundary moves by one: a view hash that ignores
order, a planned view allowed onto the threshold, a step cut that misses the budget it meets
exactly, an input hash that forgets the previous summary, a usage figure that points past the
history.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from ctxledger import Message
from ctxledger.domain import (
    STEP_CUT_FILL,
    CharTokenizer,
    CompactionPlan,
    build_view,
    message_chars,
    plan_compaction,
    threshold_for,
)
from ctxledger.domain.cuts import CutMeasure
from ctxledger.domain.view import FULL_HISTORY, view_hash
from ctxledger.events import UsageReported

from .builders import recorded_session, session, step

TOKENS = CharTokenizer()
# threshold 800 tokens; summary reserve 240 chars; masking off; no kept first request
SMALL: dict[str, Any] = {
    "context_window": 1000,
    "min_retain_rounds": 2,
    "micro_keep_recent": 1000,
    "keep_first_request": False,
}


def test_view_hash_depends_on_message_order() -> None:
    """The same messages in another order are another view, with another hash."""
    first = Message.user("first").with_seq(1)
    second = Message.assistant("second").with_seq(2)
    assert view_hash(FULL_HISTORY, None, [first, second]) != view_hash(
        FULL_HISTORY, None, [second, first]
    )


def test_a_planned_view_stays_strictly_below_the_threshold_at_equality() -> None:
    """The round cut would make a view of exactly the threshold: the plan must go further.

    Four rounds of 1080 characters; the summary reserve (240) plus the last two rounds is 2400
    characters, 800 tokens: the threshold. Equality compacts, so that view must not be planned.
    The one-mark planner of a recorded Config (schema 3; the two marks aim at the target, see
    test_two_marks.py).
    """
    s = recorded_session(
        *[
            message
            for index in range(4)
            for message in (Message.user(f"{index}" + "u" * 539), Message.assistant("a" * 540))
        ],
        **SMALL,
    )
    round_cut = s.state.user_seqs[-2]
    assert CutMeasure(s.state, TOKENS, "threshold_exceeded", 240, "").exact(round_cut) == 800
    plan = plan_compaction(s.state, tokenizer=TOKENS)
    assert isinstance(plan, CompactionPlan) and plan.target_tokens == 800
    assert plan.planned_tokens < plan.target_tokens
    assert plan.retain_from_seq > round_cut
    result = s.compact_if_needed()
    assert result.compacted and result.estimated_tokens < result.threshold


class OverheadTokenizer:
    """chars // 3 per message, plus ``overhead`` tokens per message of a prompt (as chat
    formats add), summed message by message."""

    def __init__(self, overhead: int) -> None:
        self.overhead = overhead

    def count_text(self, text: str) -> int:
        """Tokens of ``text``."""
        return len(text) // 3

    def count_message(self, message: Message) -> int:
        """Tokens of one message, without the prompt's per-message overhead."""
        return message_chars(message) // 3

    def count_messages(self, messages: Sequence[Message]) -> int:
        """Tokens of a prompt: each message plus the overhead."""
        return sum(self.count_message(message) + self.overhead for message in messages)


@pytest.mark.parametrize(
    ("overhead", "measure"),
    [
        (0, "estimate"),  # the per-message estimate (one token of slack each) meets the budget
        (4, "exact"),  # the exact count of the view meets the budget
    ],
)
def test_a_step_cut_that_fills_the_budget_exactly_is_chosen(overhead: int, measure: str) -> None:
    """One oversized round of 30 tool steps; the assistant message of one step is padded so
    that the tail from it measures exactly the fill budget. That step is where the cut goes:
    the earliest boundary whose tail fits, and fitting includes equality. The one-mark
    planner's fill (``STEP_CUT_FILL``) of a recorded Config (schema 3)."""
    tokens = OverheadTokenizer(overhead)
    # Threshold 2400, summary reserve 720 chars, no fact block (its room would join the reserve).
    config = {**SMALL, "context_window": 3000, "fact_index_chars": 0}

    def build(padding: int) -> Any:
        messages = [Message.user("go")]
        for index in range(30):
            assistant, result = step(f"c{index}", "o" * 300)
            if index == 21:  # 9 steps from the end: the tail that fits
                assistant = Message.assistant("p" * padding, assistant.tool_calls)
            messages += [assistant, result]
        return recorded_session(*messages, **config)

    chosen_seq = 2 + 2 * 21
    base = build(0)
    cutter = CutMeasure(base.state, tokens, "threshold_exceeded", 720, "")
    fixed = cutter.exact(base.state.last_seq + 1)
    budget = fixed + int((threshold_for(base.state) - 1 - fixed) * STEP_CUT_FILL)

    def size(s: Any) -> int:  # what step_cut compares with the budget for ``measure``
        tail = s.state.history[chosen_seq - 1 :]
        if measure == "exact":
            return CutMeasure(s.state, tokens, "threshold_exceeded", 720, "").exact(chosen_seq)
        return fixed + sum(tokens.count_message(m) + 1 for m in tail)

    padding = 3 * (budget - size(base))
    s = build(padding)
    assert padding > 0 and size(s) == budget  # the precondition: exactly at the budget
    plan = plan_compaction(s.state, tokenizer=tokens)
    assert isinstance(plan, CompactionPlan) and plan.step_level
    assert plan.retain_from_seq == chosen_seq


def test_the_input_hash_depends_on_the_previous_summary() -> None:
    """The same newly covered messages under two different previous summaries are two inputs.

    Otherwise what-if would reuse a recorded summary made from another previous summary.
    """
    rounds = [
        message
        for index in range(6)
        for message in (Message.user(f"{index}" + "u" * 299), Message.assistant("a" * 300))
    ]
    plans = []
    for summary in ("first summary", "another summary"):
        s = session(*rounds[:8], summarizer=lambda request, text=summary: text, **SMALL)
        assert s.compact().compacted
        s.extend(rounds[8:])
        plan = plan_compaction(s.state, tokenizer=TOKENS, trigger="manual")
        assert isinstance(plan, CompactionPlan)
        plans.append(plan)
    first, other = plans
    assert first.messages == other.messages and first.focus == other.focus
    assert first.previous_summary != other.previous_summary
    assert first.input_hash != other.input_hash


def test_a_usage_report_past_the_last_message_is_clamped_in_the_fold() -> None:
    """Usage said to be measured through seq 99 of a 3-message history counts as through 3, so
    a message appended next still counts in the estimate."""
    s = session(Message.user("a"), Message.assistant("b"), Message.user("c"), **SMALL)
    s.record(UsageReported(prompt_tokens=1000, through_seq=99))
    assert s.state.usage is not None and s.state.usage.through_seq == 3
    s.append(Message.assistant("x" * 300))  # 100 tokens since the measured prompt
    assert build_view(s.state, tokenizer=TOKENS).estimated_tokens == 1100
