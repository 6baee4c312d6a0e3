"""The two-mark policy through prepare_step (DomainSession) and its named steps."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from ctxledger import Config, ContextOverflowError, Message
from ctxledger.domain import (
    Background,
    CharTokenizer,
    Marks,
    draft_view,
    marks,
    prepare_due,
    should_compact,
    unshrinkable_tokens,
)
from ctxledger.events import CheckpointCreated, SummaryPrepared, ViewServed
from ctxledger.testing import DomainSession

from .builders import session, step

TOKENS = CharTokenizer()


def test_the_threshold_is_compared_in_one_place() -> None:
    """should_compact: equality compacts, one token below does not."""
    in_force = Marks(threshold=800, target=500, prepare=600)
    assert should_compact(in_force, 800) and not should_compact(in_force, 799)
    assert prepare_due(in_force, 600) and not prepare_due(in_force, 599)
    assert not prepare_due(Marks(threshold=800, target=500, prepare=0), 10_000)


def test_the_marks_in_force_follow_the_config() -> None:
    """A fixed threshold: the Config's sizes; the target never reaches the threshold."""
    s = session(Message.user("go"), context_window=16_000)
    in_force = marks(s.state)
    sizes = s.state.config.sizes()
    overshoot = min(sizes.tool_result_tokens, sizes.threshold_tokens - sizes.prepare_tokens)
    assert in_force == Marks(
        sizes.threshold_tokens, sizes.target_tokens, sizes.prepare_tokens, overshoot=overshoot
    )
    assert in_force.target < in_force.prepare < in_force.threshold


def test_two_messages_over_the_window_are_refused() -> None:
    """A 60,000-character system prompt and "go" at a 16k window: refused like three."""
    for extra in ([], [Message.assistant("ok")]):
        s = session(Message.system("s" * 60_000), Message.user("go"), *extra, context_window=16_000)
        events = len(s.events)
        with pytest.raises(ContextOverflowError, match="does not fit the window of 16,000"):
            s.step()
        assert len(s.events) == events  # nothing recorded


def test_one_huge_user_message_is_refused_not_served() -> None:
    """A single 300,000-character user message at an 8k window is not served as a 100k-token
    view: prepare_step refuses, naming the message, and nothing is recorded; the agent may
    retract it (or shorten it) and go on."""
    s = session(Message.user("x" * 300_000), context_window=8_000)
    with pytest.raises(ContextOverflowError) as raised:
        s.step()
    assert "seq 1 (user), has 300,000 characters" in str(raised.value)
    assert not any(isinstance(event, ViewServed) for event in s.events)


def test_a_tool_result_is_cut_only_above_its_share_of_the_window() -> None:
    """A tool result larger than the window itself is shown truncated, and the view fits."""
    s = session(Message.user("go"), *step("c1", "y" * 100_000), context_window=8_000)
    view = s.step()
    assert view.estimated_tokens <= 8_000
    assert "truncated" in view.messages[-1].content


def _one_round(config: dict[str, Any], steps: int = 40, chars: int = 900) -> DomainSession:
    s = session(Message.system("rules"), Message.user("fix it"), **config)
    for index in range(steps):
        s.extend(step(f"c{index}", f"{index} " + "o" * chars))
        s.step()
    return s


def test_automatic_compactions_land_at_most_at_the_target_inside_one_round() -> None:
    """One long round (no round cut fits): each automatic compaction cuts at a step boundary
    inside it and lands at or below the target; the next one is the gap away."""
    config = {"context_window": 8_000, "prepare_threshold": 0.0, "micro_keep_recent": 1000}
    s = _one_round(config)
    sizes = s.state.config.sizes()
    created = [e.checkpoint for e in s.events if isinstance(e, CheckpointCreated)]
    assert len(created) >= 2
    for checkpoint in created:
        assert checkpoint.tokens_after <= sizes.target_tokens
        assert checkpoint.retain_from_seq > 2  # inside the round, after the request
    steps = [i for i, r in enumerate(s.results) if r.compacted]
    assert all(b - a >= 2 for a, b in itertools.pairwise(steps))


def test_a_prepared_summary_lands_the_view_within_half_the_gap() -> None:
    """Background compaction: planned at the prepare point deep enough that, activated at the
    threshold without a summariser call, the view is no further than half the gap above the
    target."""
    config = Config(context_window=8_000, micro_keep_recent=1000)
    s = DomainSession(config)
    s.append_many([Message.system("rules"), Message.user("fix it")])
    in_force = marks(s.state)
    index = 0
    while True:
        index += 1
        s.extend(step(f"c{index}", "o" * 300))
        s.decide(Background())
        estimate = draft_view(s.state, tokenizer=TOKENS).estimated_tokens
        if should_compact(in_force, estimate):
            break
        assert index < 200
    assert any(isinstance(e, SummaryPrepared) for e in s.events)
    view = s.step()
    result = s.results[-1]
    assert result.compacted and result.prepared
    assert view.estimated_tokens <= in_force.target + (in_force.threshold - in_force.target) // 2


def test_unshrinkable_tokens_count_head_pins_and_the_newest_step() -> None:
    """What no cut shrinks: the system prompt, a pinned message, the newest step, and the
    smallest summary; old steps are not in it."""
    s = session(
        Message.system("s" * 3_000), Message.user("go"), context_window=100_000, micro_keep_recent=9
    )
    for index in range(5):
        s.extend(step(f"c{index}", "o" * 3_000))
    s.pin(3)
    floor = unshrinkable_tokens(s.state, TOKENS)
    whole = draft_view(s.state, tokenizer=TOKENS).view_tokens
    assert 2_000 + 1_000 * 2 < floor < whole
