"""The decision step in the background: what is prepared ahead of need, and when it is used."""

from __future__ import annotations

from ctxledger import Config, Message, ToolCall
from ctxledger.domain import Background, Serve, background_estimate, threshold_for
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
    session.record(
        CompactionStarted(
            compaction_id="newer",
            reason="threshold_exceeded",
            retain_from_seq=session.state.last_seq - 1,
            covers_through_seq=session.state.last_seq - 2,
            estimated_tokens=threshold,
            background=True,
        )
    )
    decision = session._decide(Serve())
    assert decision.wait_for is None, "waited for the running summary"
    created = [e for e in decision.events if isinstance(e, CheckpointCreated)]
    assert len(created) == 1 and created[0].prepared
    assert created[0].compaction_id == prepared.compaction_id
    assert decision.view is not None and decision.view.estimated_tokens < threshold
