"""Background compaction under Config schema 5: the fact block gives way, the pace decides.

A prepared summary whose full fact block would land the view more than half the gap above the
target is activated with a shorter block (the agent does not wait for a summary made at the
threshold); a Config of schema 4 keeps planning a delta as it was recorded. A summary that the
session's pace says cannot be ready before the threshold is not prepared, in every flow that
decides (the host, this kit, what-if), unless a log recorded that it was.
"""

from __future__ import annotations

import itertools

from ctxledger import Checkpoint, Config, Message, ToolCall
from ctxledger.domain import Background, Serve, background_estimate, draft_view
from ctxledger.domain.compaction import finish_checkpoint, prepared_checkpoint
from ctxledger.domain.decide import block_gives_way, usable_prepared
from ctxledger.domain.policy import marks
from ctxledger.events import CheckpointCreated, CompactionStarted, Event, SummaryPrepared
from ctxledger.testing import DomainSession

from .builders import recorded
from .test_background_decide import FACTS_CONFIG, fact_step


def _prepared(config: Config) -> tuple[DomainSession, SummaryPrepared, int]:
    """A session grown to its prepare point, with the summary prepared there."""
    session = DomainSession(config)
    session.append_many([Message.system("You are a coding agent."), Message.user("fix the tests")])
    n = 0
    while session.view().estimated_tokens < config.sizes().prepare_tokens:
        n += 1
        fact_step(session, n)
    session.decide(Background())
    (prepared,) = [e for e in session.events if isinstance(e, SummaryPrepared)]
    assert prepared.fact_chars > 0
    return session, prepared, n


def _past_the_block(session: DomainSession, prepared: SummaryPrepared, n: int) -> None:
    """Grow (no step served) until the prepared summary with its full block no longer absorbs
    the growth, while without its block it still does."""
    in_force = marks(session.state)
    limit = in_force.target + (in_force.threshold - in_force.target) // 2
    while True:
        n += 1
        fact_step(session, n)
        state, tokens = session.state, session.tokenizer
        bare = draft_view(state, tokenizer=tokens, checkpoint=prepared_checkpoint(prepared))
        assert bare.estimated_tokens <= limit, "the setup needs a view the bare summary absorbs"
        blocked = _with_block(session, prepared)
        if draft_view(state, tokenizer=tokens, checkpoint=blocked).estimated_tokens > limit:
            assert session.view().estimated_tokens >= in_force.threshold
            return


def _with_block(session: DomainSession, prepared: SummaryPrepared) -> Checkpoint:
    """The prepared summary's checkpoint with its full planned block."""
    return finish_checkpoint(
        session.state,
        prepared_checkpoint(prepared),
        fact_chars=prepared.fact_chars,
        tokenizer=session.tokenizer,
    )


def test_the_block_gives_way_from_schema_5_on() -> None:
    """Schema 5 shortens the block to absorb; schema 4 (and one mark) keep their rule."""
    assert block_gives_way(Config())
    assert not block_gives_way(Config(schema_version=4))


def test_a_prepared_summary_is_measured_as_absorbing_without_its_block() -> None:
    """The background estimate is the view the bare prepared summary gives: the activation
    shortens the block as far as absorbing needs, so no delta is due while that absorbs."""
    session, prepared, _ = _prepared(FACTS_CONFIG)
    bare = draft_view(
        session.state, tokenizer=session.tokenizer, checkpoint=prepared_checkpoint(prepared)
    )
    measured = background_estimate(session.state, tokenizer=session.tokenizer)
    assert measured == bare.estimated_tokens
    blocked = draft_view(
        session.state, tokenizer=session.tokenizer, checkpoint=_with_block(session, prepared)
    )
    assert blocked.estimated_tokens > measured


def test_a_prepared_summary_is_activated_with_a_shorter_block_rather_than_wait() -> None:
    """At the threshold the full block would land the view above the absorb limit: schema 5
    activates the prepared summary at once with the longest block that absorbs."""
    session, prepared, n = _prepared(FACTS_CONFIG)
    _past_the_block(session, prepared, n)
    in_force = marks(session.state)
    limit = in_force.target + (in_force.threshold - in_force.target) // 2
    full = _with_block(session, prepared).facts
    decision = session.decide(Serve())
    (created,) = [e for e in session.events if isinstance(e, CheckpointCreated)]
    assert created.prepared and created.compaction_id == prepared.compaction_id
    assert 0 < len(created.checkpoint.facts) < len(full)
    assert created.checkpoint.summary == prepared.summary
    assert decision.view is not None and decision.view.estimated_tokens <= limit
    assert created.checkpoint.tokens_after == decision.view.estimated_tokens


def test_a_schema_4_config_plans_the_delta_instead() -> None:
    """The same session recorded with schema 4: the prepared summary does not absorb with its
    block, so the delta between its cut and a new one is summarised (as that schema did)."""
    config = FACTS_CONFIG.replace(schema_version=4)
    session, prepared, n = _prepared(config)
    _past_the_block(session, prepared, n)
    session.decide(Serve())
    (created,) = [e for e in session.events if isinstance(e, CheckpointCreated)]
    assert not created.prepared
    assert created.checkpoint.retain_from_seq > prepared.retain_from_seq


def _paced(config: Config, seconds_per_step: float) -> tuple[DomainSession, int]:
    """A session with a checkpoint made at t=100 (its summary took 2 s), then grown to its
    prepare point at ``seconds_per_step`` a step."""
    now = itertools.count()
    clock_at = [100.0]
    session = DomainSession(config, clock=lambda: clock_at[0])
    session.append_many([Message.system("You are a coding agent."), Message.user("fix the tests")])
    n = 0
    while n < 3:
        n += 1
        fact_step(session, n)
    tokens = session.view().estimated_tokens
    checkpoint = Checkpoint(
        id="cp",
        summary="S",
        retain_from_seq=session.state.last_seq,
        covers_through_seq=session.state.last_seq - 1,
        reason="threshold_exceeded",
        created_at=100.0,
        tokens_after=tokens,
        summary_seconds=2.0,
    )
    session.record(CheckpointCreated(compaction_id="c0", checkpoint=checkpoint))
    while session.view().estimated_tokens < config.sizes().prepare_tokens:
        n += 1
        fact_step(session, n)
        clock_at[0] = 100.0 + seconds_per_step * next(now)
    return session, n


def test_a_summary_the_pace_cannot_ready_in_time_is_not_prepared() -> None:
    """Grown from the checkpoint to the prepare point in a few seconds, the session would pass
    the threshold before a 2 s summary is ready: the decision prepares none (the host, this kit
    and what-if alike); at a slow pace it does."""
    fast, _ = _paced(FACTS_CONFIG, 0.01)
    assert fast.decide(Background()).job is None
    assert not any(isinstance(e, SummaryPrepared) for e in fast.events)
    slow, _ = _paced(FACTS_CONFIG, 30.0)
    slow.decide(Background())
    assert any(isinstance(e, SummaryPrepared) for e in slow.events)


def test_a_background_start_a_log_recorded_is_replayed_whatever_the_pace() -> None:
    """``Background(timed=False)``: what-if replaying a log under its own Config starts the
    summaries the log started, which the host judged in time with its own clock."""
    fast, _ = _paced(FACTS_CONFIG, 0.01)
    fast.decide(Background(timed=False))
    assert any(isinstance(e, SummaryPrepared) for e in fast.events)


def test_a_one_mark_config_ignores_the_pace() -> None:
    """Schema 3 (old logs' Configs) prepared at its prepare point whatever the pace."""
    config = recorded(context_window=24_000, prepare_threshold=0.7, fact_index_chars=4_000)
    fast, _ = _paced(config, 0.01)
    fast.decide(Background())
    assert any(isinstance(e, SummaryPrepared) for e in fast.events)


def _long_read_at_the_threshold(config: Config) -> list[Event]:
    """Grow a session, with a background decision after each step, until its next step would
    reach the threshold or one tool result at its truncation limit (a long file read) would
    take it to just below the window; append that read and serve: the events the serving
    recorded."""
    sizes = config.sizes()
    session = DomainSession(config)
    session.append_many([Message.system("You are a coding agent."), Message.user("fix the tests")])
    n = 0
    step = 0
    while True:
        estimate = session.view().estimated_tokens
        if estimate + step >= sizes.threshold_tokens:
            break  # the next step would reach the threshold
        if estimate + sizes.tool_result_tokens >= sizes.window_tokens - 300:
            break
        n += 1
        fact_step(session, n)
        session.decide(Background())
        step = session.view().estimated_tokens - estimate
        assert n < 400
    assert usable_prepared(session.state) is not None
    call = ToolCall("call-read", "read_file", '{"path": "src/pkg/big.py"}')
    session.append_many(
        [
            Message.assistant("reading it", [call]),
            Message.tool("x" * sizes.tool_result_chars, call.id, "read_file"),
        ]
    )
    estimate = session.view().estimated_tokens
    assert sizes.threshold_tokens <= estimate <= sizes.window_tokens
    before = len(session.events)
    decision = session.decide(Serve())
    in_force = marks(session.state)
    limit = in_force.target + (in_force.threshold - in_force.target) // 2
    assert decision.view is not None and decision.view.estimated_tokens <= limit
    return session.events[before:]


def test_a_long_tool_result_at_the_threshold_finds_a_summary_that_absorbs_it() -> None:
    """Schema 5 judges a summary prepared ahead by whether it absorbs a step that passes the
    threshold by a whole tool result at its truncation limit, so its delta is prepared while
    the view still grows: such a step activates it, with no summary to wait for."""
    sizes = FACTS_CONFIG.sizes()
    overshoot = marks(DomainSession(FACTS_CONFIG).state).overshoot
    assert overshoot == min(sizes.tool_result_tokens, sizes.threshold_tokens - sizes.prepare_tokens)
    served = _long_read_at_the_threshold(FACTS_CONFIG)
    (created,) = [e for e in served if isinstance(e, CheckpointCreated)]
    assert created.prepared
    assert not [e for e in served if isinstance(e, CompactionStarted)]  # no summary to wait for


def test_a_schema_4_config_allows_a_quarter_of_the_prepare_distance() -> None:
    """The same read under schema 4 (its prepare point and absorb rule, as recorded): the
    summary prepared ahead does not absorb it, and the delta is summarised at the threshold."""
    first = FACTS_CONFIG.replace(schema_version=4)
    assert marks(DomainSession(first).state).overshoot is None
    served = _long_read_at_the_threshold(first)
    (created,) = [e for e in served if isinstance(e, CheckpointCreated)]
    started = [e for e in served if isinstance(e, CompactionStarted)]
    assert not created.prepared and len(started) == 1 and not started[0].background
