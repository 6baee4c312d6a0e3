"""Edges of the decisions, through ``prepare_step`` (``DomainSession.step``) and ``decide``.

Each test puts a value exactly on a boundary and one step to either side of it, so that a
comparison that moves by one (``>=`` for ``>``, ``<=`` for ``<``) fails a test.
"""

from __future__ import annotations

from typing import Any

import pytest

from ctxledger import Message
from ctxledger.domain import (
    BACKGROUND_BACKOFF,
    Background,
    CharTokenizer,
    Recover,
    draft_view,
    threshold_for,
)
from ctxledger.domain.cuts import CutMeasure
from ctxledger.errors import ContextOverflowError
from ctxledger.events import (
    CheckpointCreated,
    CompactionFailed,
    CompactionStarted,
    SummaryPrepared,
)
from ctxledger.testing import DomainSession

from .builders import recorded_session, session

TOKENS = CharTokenizer()
# Threshold 800 tokens; nothing masked, nothing kept in the pinned slot, no fact block.
SMALL: dict[str, Any] = {
    "context_window": 1000,
    "min_retain_rounds": 1,
    "micro_keep_recent": 1000,
    "keep_first_request": False,
    "fact_index_chars": 0,
    "prepare_threshold": 0.0,
}


def tokens_of(s: DomainSession) -> int:
    """The estimate of the view ``s`` would serve now."""
    return draft_view(s.state, tokenizer=TOKENS).estimated_tokens


def padded_to(tokens: int, *, rounds: int = 6, **config: Any) -> DomainSession:
    """A session of ``rounds`` rounds whose last message makes the view exactly ``tokens``."""
    messages: list[Message] = []
    for index in range(rounds):
        messages += [Message.user(f"u{index} " + "u" * 120), Message.assistant("a" * 120)]
    s = session(*messages, **{**SMALL, **config})
    missing = 3 * (tokens - tokens_of(s))
    assert missing > 0
    s.append(Message.user("x" * missing))
    assert tokens_of(s) == tokens
    return s


def test_a_view_at_the_threshold_compacts() -> None:
    """Equality compacts: an estimate of exactly the threshold makes a checkpoint."""
    s = padded_to(800)
    assert threshold_for(s.state) == 800
    s.step()
    assert s.results[-1].compacted
    assert len(s.state.checkpoints) == 1


def test_a_view_one_token_below_the_threshold_does_not_compact() -> None:
    """One token below the threshold is served as it is."""
    s = padded_to(799)
    view = s.step()
    assert s.results[-1].reason == "below_threshold"
    assert not s.state.checkpoints and view.estimated_tokens == 799


def _unshrinkable(tokens: int) -> DomainSession:
    """A session of three messages whose whole view is ``tokens`` tokens and cannot be made
    smaller: two system messages (never summarised) and the request (the newest step)."""
    s = session(
        Message.system("s" * (3 * tokens - 12)),
        Message.system("tools: none"),
        Message.user("go"),
        **SMALL,
    )
    assert tokens_of(s) == tokens
    return s


def test_a_view_of_exactly_the_window_is_served() -> None:
    """Nothing can be compacted and the view is exactly the window: it is served."""
    s = _unshrinkable(1000)
    view = s.step()
    assert view.estimated_tokens == 1000


def test_a_view_one_token_over_the_window_is_refused() -> None:
    """One token over the window, with nothing to compact: ``ContextOverflowError``, and
    nothing is recorded."""
    s = _unshrinkable(1001)
    before = len(s.events)
    with pytest.raises(ContextOverflowError):
        s.step()
    assert len(s.events) == before


def _prepared_at(cut: int, s: DomainSession) -> None:
    """Record a background summary that retains from ``cut`` (as the host would)."""
    s.record(
        CompactionStarted(
            compaction_id="bg",
            reason="threshold_exceeded",
            retain_from_seq=cut,
            covers_through_seq=cut - 1,
            estimated_tokens=tokens_of(s),
            background=True,
        )
    )
    s.record(
        SummaryPrepared(
            compaction_id="bg",
            retain_from_seq=cut,
            covers_through_seq=cut - 1,
            summary="earlier: the user asked for many things",
            max_chars=200,
        )
    )


@pytest.mark.parametrize("offset", [0, 1])
def test_a_prepared_summary_retaining_from_the_next_seq_is_used(offset: int) -> None:
    """A prepared summary whose retained part starts at ``last_seq + 1`` (it covers every
    message) is still activated at the threshold; one that starts later is not."""
    s = padded_to(900, prepare_threshold=0.7)
    _prepared_at(s.state.last_seq + 1 + offset, s)
    s.step()
    result = s.results[-1]
    assert result.compacted
    assert result.prepared is (offset == 0)
    checkpoint = s.state.active_checkpoint
    assert checkpoint is not None
    assert (checkpoint.retain_from_seq == s.state.last_seq + 1) is (offset == 0)


def _failing(request: Any) -> str | None:
    raise RuntimeError("the summariser is down")


def test_a_failed_background_summary_is_retried_after_the_backoff_which_doubles() -> None:
    """After a failed background summary no new one starts until ``BACKGROUND_BACKOFF``
    messages were appended; after a second failure, twice as many."""
    s = padded_to(700, prepare_threshold=0.7)
    s.summarizer = _failing

    def started() -> int:
        return sum(isinstance(e, CompactionStarted) and e.background for e in s.events)

    for failures, delay in enumerate((BACKGROUND_BACKOFF, 2 * BACKGROUND_BACKOFF), start=1):
        s.decide(Background())
        assert started() == failures
        assert isinstance(s.events[-1], CompactionFailed) and s.events[-1].background
        for _ in range(delay - 1):
            s.append(Message.user("more"))
            s.decide(Background())
            assert started() == failures, "retried before the backoff"
        s.append(Message.user("more"))  # the delay-th message: now it may start again
    s.decide(Background())
    assert started() == 3


def test_recovery_fails_a_background_compaction_the_crash_interrupted() -> None:
    """A background compaction started but never finished (the process died) is recorded as
    failed (``interrupted``) on recovery, and the next check starts a new one at once."""
    s = padded_to(700, prepare_threshold=0.7)
    s.record(
        CompactionStarted(
            compaction_id="lost",
            reason="threshold_exceeded",
            retain_from_seq=3,
            covers_through_seq=2,
            estimated_tokens=700,
            background=True,
        )
    )
    reopened = DomainSession(s.state.config)
    for event in s.events[1:]:
        reopened.record(event)
    assert reopened.state.background is not None
    decision = reopened.decide(Recover())
    failed = [e for e in decision.events if isinstance(e, CompactionFailed)]
    assert [(e.compaction_id, e.reason, e.background) for e in failed] == [
        ("lost", "interrupted", True)
    ]
    assert reopened.state.background is None
    reopened.decide(Background())
    assert any(
        isinstance(e, CompactionStarted) and e.background and e.compaction_id != "lost"
        for e in reopened.events
    )
    assert any(isinstance(e, SummaryPrepared) for e in reopened.events)


def test_a_checkpoint_is_recorded_for_the_equality_case_only_once() -> None:
    """After the compaction at the threshold, the next step serves the new view as it is."""
    s = padded_to(800)
    s.step()
    s.step()
    assert sum(isinstance(e, CheckpointCreated) for e in s.events) == 1
    assert s.results[-1].reason == "checkpoint_current"


def test_a_planned_round_cut_exactly_at_the_threshold_is_not_taken() -> None:
    """One mark (a Config recorded before the two marks): the round cut would give a view of
    exactly the threshold (the summary's reserved room plus the last two rounds: 240 + 2 x 1080
    characters, 800 tokens): equality compacts, so the compaction cuts further and the view it
    serves is strictly below the threshold."""
    config = {**SMALL, "context_window": 2000, "compression_threshold": 0.4, "min_retain_rounds": 2}
    messages = [
        message
        for index in range(4)
        for message in (Message.user(f"{index}" + "u" * 539), Message.assistant("a" * 540))
    ]
    s = recorded_session(*messages, **config)
    round_cut = s.state.user_seqs[-2]
    assert threshold_for(s.state) == 800
    assert CutMeasure(s.state, TOKENS, "threshold_exceeded", 240, "").exact(round_cut) == 800
    view = s.step()
    checkpoint = s.state.active_checkpoint
    assert checkpoint is not None and checkpoint.retain_from_seq > round_cut
    assert view.estimated_tokens < 800


@pytest.mark.parametrize(("extra", "taken"), [(0, True), (3, False)])
def test_a_round_cut_whose_view_is_exactly_the_target_is_taken(extra: int, taken: bool) -> None:
    """Two marks: the view after an automatic compaction may be at most the target. Five rounds
    of 1,020 characters pass the threshold (1,600 tokens); the
    summary's room (15 % of the 800-token target: 360 characters) and the last two rounds make
    exactly the target, so the round cut is taken; one token more and the cut moves inside the
    rounds."""
    config = {
        **SMALL,
        "context_window": 2000,
        "compaction_target": 0.4,
        "min_retain_rounds": 2,
        "prepare_threshold": 0.0,
    }
    messages = [
        message
        for index in range(5)
        for message in (Message.user(f"{index}" + "u" * 509), Message.assistant("a" * 510))
    ]
    messages[-1] = Message.assistant("a" * (510 + extra))
    s = session(*messages, **config)
    round_cut = s.state.user_seqs[-2]
    sizes = s.state.config.sizes()
    assert (sizes.target_tokens, sizes.summary_chars) == (800, 360)
    assert tokens_of(s) >= 1600  # at the threshold: an automatic compaction is due
    measured = CutMeasure(s.state, TOKENS, "threshold_exceeded", 360, "").exact(round_cut)
    assert measured == 800 + extra // 3
    view = s.step()
    checkpoint = s.state.active_checkpoint
    assert checkpoint is not None
    assert (checkpoint.retain_from_seq == round_cut) is taken
    assert view.estimated_tokens <= 800
