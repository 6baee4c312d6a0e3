"""The decision step in the background: what is prepared ahead of need, and when it is used."""

from __future__ import annotations

import pytest

from ctxledger import Config, Message, ToolCall
from ctxledger.domain import (
    Background,
    Serve,
    background_estimate,
    draft_view,
    threshold_for,
)
from ctxledger.domain.compaction import prepared_checkpoint
from ctxledger.domain.cuts import Marks
from ctxledger.domain.decide import as_activated, extension_due
from ctxledger.domain.policy import extend_due, ready_in_time
from ctxledger.events import CheckpointCreated, CompactionStarted, SummaryPrepared
from ctxledger.testing import DomainSession

CONFIG = Config(
    context_window=12_000,
    compression_threshold=0.5,
    fact_index_chars=0,
    min_retain_rounds=10,
    micro_batch=1,
    micro_keep_recent=1_000,  # nothing masked: each step adds what it says
    prepare_threshold=0.85,
)


def tool_step(session: DomainSession, n: int, chars: int = 600) -> None:
    call = ToolCall(f"call-{n}", "bash", '{"command": "ls"}')
    session.append_many(
        [
            Message.assistant(f"step {n}", [call]),
            Message.tool(f"output {n} " + "o" * chars, call.id, "bash"),
        ]
    )


def grow_until(session: DomainSession, share: float, start: int) -> int:
    """Add tool steps until the background estimate reaches ``share`` of the threshold."""
    n = start
    while background_estimate(session.state, tokenizer=session.tokenizer) < share * threshold_for(
        session.state
    ):
        n += 1
        tool_step(session, n)
        assert n < start + 200
    return n


def test_a_background_cut_is_planned_inside_the_rounds_below_the_threshold() -> None:
    """One long round (no round cut makes progress): ahead of need the background still plans
    a step-level cut, as a compaction at the threshold would."""
    session = DomainSession(CONFIG)
    session.append_many([Message.system("You are a coding agent."), Message.user("fix the tests")])
    grow_until(session, CONFIG.prepare_threshold, 0)
    draft_tokens = session.view().estimated_tokens
    assert draft_tokens < threshold_for(session.state)
    decision = session.decide(Background())
    kinds = [type(event) for event in decision.events]
    started = [e for e in session.events if isinstance(e, CompactionStarted) and e.background]
    assert len(started) == 1, kinds
    assert started[0].retain_from_seq > 2  # past the head, inside the one round
    assert any(isinstance(e, SummaryPrepared) for e in session.events)


def test_a_sufficient_prepared_summary_is_activated_while_a_newer_one_runs() -> None:
    """At the threshold the agent does not wait for a newer background summary when one it
    already has absorbs the growth (the view it gives is at most half the gap between the
    marks above the target)."""
    session = DomainSession(CONFIG)
    session.append_many([Message.system("You are a coding agent."), Message.user("fix the tests")])
    n = grow_until(session, CONFIG.prepare_threshold, 0)
    session.decide(Background())  # written at once: SummaryPrepared
    (prepared,) = [e for e in session.events if isinstance(e, SummaryPrepared)]
    threshold = threshold_for(session.state)
    while session.view().estimated_tokens < threshold:
        n += 1
        tool_step(session, n, chars=120)
        assert n < 400
    # A newer background summary is running (as a host would have started it meanwhile).
    start_newer(session, session.state.last_seq - 1, threshold)
    decision = session._decide(Serve())
    assert decision.wait_for is None, "waited for the running summary"
    created = [e for e in decision.events if isinstance(e, CheckpointCreated)]
    assert len(created) == 1 and created[0].prepared
    assert created[0].compaction_id == prepared.compaction_id
    assert decision.view is not None and decision.view.estimated_tokens < threshold


FACTS_CONFIG = Config(
    context_window=24_000,
    compression_threshold=0.8,
    min_retain_rounds=1,
    micro_batch=1,
    micro_keep_recent=1_000,  # nothing masked: each step adds what it says
)


def fact_step(session: DomainSession, n: int, lines: int = 8) -> None:
    """A step whose output (``lines`` lines) is full of facts (paths, commands, errors) for the
    fact block."""
    call = ToolCall(f"call-{n}", "bash", f'{{"command": "pytest tests/test_{n}.py"}}')
    output = "\n".join(
        f"src/pkg/module_{n}_{k}.py:{k}: AssertionError: value_{n}_{k} != expected"
        for k in range(lines)
    )
    session.append_many(
        [
            Message.user(f"now look at src/pkg/module_{n}.py"),
            Message.assistant(f"step {n}", [call]),
            Message.tool(output, call.id, "bash"),
        ]
    )


def prepared_session(config: Config) -> tuple[DomainSession, int]:
    """A session grown by fact steps to its prepare point, with a summary prepared there; and
    the number of steps it took."""
    sizes = config.sizes()
    session = DomainSession(config)
    session.append_many([Message.system("You are a coding agent."), Message.user("fix the tests")])
    n = 0
    while session.view().estimated_tokens < sizes.prepare_tokens:
        n += 1
        fact_step(session, n)
    session.decide(Background())
    return session, n


def start_newer(session: DomainSession, cut: int, estimated_tokens: int) -> None:
    """Record a background compaction ``"newer"`` cutting at ``cut`` as running (as a host
    would have started it while the session grew)."""
    session.record(
        CompactionStarted(
            compaction_id="newer",
            reason="threshold_exceeded",
            retain_from_seq=cut,
            covers_through_seq=cut - 1,
            estimated_tokens=estimated_tokens,
            background=True,
        )
    )


def test_the_background_measures_a_prepared_summary_with_its_fact_block() -> None:
    """A prepared summary becomes a checkpoint with a fact block; under a Config of schema 4
    the background estimate (and so when its delta starts) counts that block, as the
    activation at the threshold will (schema 5 shortens the block instead:
    test_background_schema5.py)."""
    config = FACTS_CONFIG.replace(schema_version=4)
    session = DomainSession(config)
    session.append_many([Message.system("You are a coding agent."), Message.user("fix the tests")])
    n = 0
    while background_estimate(session.state, tokenizer=session.tokenizer) < (
        config.sizes().prepare_tokens
    ):
        n += 1
        fact_step(session, n)
        assert n < 400
    session.decide(Background())
    (prepared,) = [e for e in session.events if isinstance(e, SummaryPrepared)]
    assert prepared.fact_chars > 0
    bare = draft_view(
        session.state, tokenizer=session.tokenizer, checkpoint=prepared_checkpoint(prepared)
    ).estimated_tokens
    activated = as_activated(session.state, prepared, session.tokenizer)
    assert activated.facts  # the block the threshold will show
    measured = background_estimate(session.state, tokenizer=session.tokenizer)
    assert (
        measured
        == draft_view(
            session.state, tokenizer=session.tokenizer, checkpoint=activated
        ).estimated_tokens
    )
    assert measured > bare


@pytest.mark.parametrize(("schema", "summaries"), [(4, 1), (5, 3)])
def test_a_prepared_summary_that_will_absorb_the_growth_is_not_extended(
    schema: int, summaries: int
) -> None:
    """A summary prepared ahead that absorbs the growth to the threshold is not extended: no
    delta (no summariser call) is prepared while the view grows to the threshold. Schema 4
    allows the step that reaches the threshold a quarter of the prepare distance, so the
    summary prepared at the prepare point absorbs; schema 5 allows it a whole tool result at
    its truncation limit (a long file read), so deltas are prepared while the view grows until
    one absorbs that too, and then none."""
    config = FACTS_CONFIG.replace(schema_version=schema)
    sizes = config.sizes()
    session, n = prepared_session(config)
    assert len([e for e in session.events if isinstance(e, SummaryPrepared)]) == 1
    absorbing = False
    while True:
        n += 1
        fact_step(session, n)
        estimate = session.view().estimated_tokens
        if estimate >= sizes.threshold_tokens:
            break
        due = extension_due(session.state, session.tokenizer, estimate)
        assert not (absorbing and due)  # once it absorbs, the growth keeps it absorbing
        absorbing = not due
        assert bool(session.decide(Background()).events) is due
    assert absorbing
    assert len([e for e in session.events if isinstance(e, SummaryPrepared)]) == summaries


def test_the_delta_is_due_as_soon_as_the_prepared_view_would_not_be_absorbed() -> None:
    """The view a prepared summary gives at the threshold is the one it gives now plus the
    growth still to come; past the limit of absorbs (half the gap above the target), the delta
    is due at once, however far the threshold still is."""
    two = Marks(threshold=10_000, target=6_000, prepare=7_000)
    limit = 6_000 + 4_000 // 2
    overshoot = (10_000 - 7_000) // 4  # the step that reaches the threshold passes it
    assert not extend_due(two, activated=limit - 3_000 - overshoot, estimate=7_000)
    assert extend_due(two, activated=limit - 2_999 - overshoot, estimate=7_000)
    assert extend_due(two, activated=limit - overshoot + 1, estimate=10_500)  # over already
    assert not extend_due(two, activated=limit - overshoot, estimate=10_500)
    # Schema 5 states the step's allowance (a tool result at its truncation limit).
    long_step = two._replace(overshoot=2_000)
    assert not extend_due(long_step, activated=limit - 3_000 - 2_000, estimate=7_000)
    assert extend_due(long_step, activated=limit - 2_999 - 2_000, estimate=7_000)
    assert extend_due(long_step, activated=limit - 3_000 - overshoot, estimate=7_000)


def test_a_one_mark_config_extends_at_its_prepare_point_as_recorded() -> None:
    """Old logs' Configs (schema 3) keep the rule they were served with."""
    one = Marks(threshold=10_000, target=10_000, prepare=8_500, one_mark=True)
    assert extend_due(one, 8_500, 9_000) and not extend_due(one, 8_499, 9_999)
    off = Marks(threshold=10_000, target=5_000, prepare=0)
    assert not extend_due(off, 20_000, 20_000)


def test_a_summary_that_cannot_be_ready_before_the_threshold_is_not_prepared() -> None:
    """The growth rate since the last checkpoint times the last summary's time against the room
    left below the threshold; unknown rates prepare as before."""
    # 600 tokens a second, summaries of 2 s: 1,200 tokens of growth while one runs.
    assert ready_in_time(room=1_200, grown=6_000, seconds=10.0, summary_seconds=2.0)
    assert not ready_in_time(room=1_199, grown=6_000, seconds=10.0, summary_seconds=2.0)
    assert ready_in_time(room=10, grown=0, seconds=10.0, summary_seconds=2.0)
    assert ready_in_time(room=10, grown=6_000, seconds=0.0, summary_seconds=2.0)
    assert ready_in_time(room=10, grown=6_000, seconds=10.0, summary_seconds=0.0)
