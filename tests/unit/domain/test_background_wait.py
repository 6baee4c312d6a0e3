"""At the threshold, a prepared summary that cannot absorb the growth is not made into a
checkpoint first (its fact block is most of an activation's time) when the step then waits
for the summary still running or extends the prepared one: the decision is the one made with
the block, only cheaper."""

from __future__ import annotations

from typing import Any

import pytest

from ctxledger import Config, Message, ToolCall
from ctxledger.domain import Background, Decision, Serve, _decide_background
from ctxledger.domain import compaction as domain_compaction
from ctxledger.events import CompactionStarted, SummaryPrepared
from ctxledger.testing import DomainSession

CONFIG = Config(
    context_window=24_000,
    compression_threshold=0.8,
    compaction_target=0.3,
    min_retain_rounds=1,
    prepare_threshold=0.45,  # prepared early: the growth after it is more than it absorbs
    micro_batch=1,
    micro_keep_recent=1_000,  # nothing masked: each step adds what it says
)


def fact_step(session: DomainSession, n: int, lines: int = 8) -> None:
    """A step whose output is full of facts (paths, commands, errors) for the fact block."""
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


def at_threshold(config: Config, lines: int, running: bool) -> DomainSession:
    """A session with a summary prepared at its prepare point, then grown past the threshold
    by steps of ``lines`` output lines each (long ones go further past it than the prepared
    summary absorbs), with a newer background summary running if ``running``."""
    sizes = config.sizes()
    session = DomainSession(config)
    session.append_many([Message.system("You are a coding agent."), Message.user("fix the tests")])
    n = 0
    while session.view().estimated_tokens < sizes.prepare_tokens:
        n += 1
        fact_step(session, n)
    session.decide(Background())
    assert any(isinstance(event, SummaryPrepared) for event in session.events)
    while session.view().estimated_tokens < sizes.threshold_tokens:
        n += 1
        fact_step(session, n, lines)
    if running:
        session.record(
            CompactionStarted(
                compaction_id="newer",
                reason="threshold_exceeded",
                retain_from_seq=session.state.last_seq - 2,
                covers_through_seq=session.state.last_seq - 3,
                estimated_tokens=sizes.threshold_tokens,
                background=True,
            )
        )
    return session


def comparable(decision: Decision) -> tuple[Any, ...]:
    job = decision.job
    plan = None if job is None else (job.compaction_id, job.plan.retain_from_seq, job.plan.covered)
    return decision.events, decision.view, decision.result, decision.wait_for, plan


@pytest.mark.parametrize("schema", [4, 5])
@pytest.mark.parametrize("running", [True, False])
@pytest.mark.parametrize("lines", [8, 120, 400])
def test_the_decision_is_the_one_made_with_the_block(
    schema: int, running: bool, lines: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = CONFIG.replace(schema_version=schema)
    blocks: list[int] = []
    made = domain_compaction.checkpoint_fact_block

    def counted(*args: Any, **kwargs: Any) -> str:
        blocks.append(1)
        return made(*args, **kwargs)

    monkeypatch.setattr(domain_compaction, "checkpoint_fact_block", counted)
    shortcut = at_threshold(config, lines, running)._decide(Serve())
    cheaper = len(blocks)
    blocks.clear()
    with monkeypatch.context() as always:
        always.setattr(_decide_background, "_may_absorb", lambda *args: True)
        full = at_threshold(config, lines, running)._decide(Serve())
    assert comparable(shortcut) == comparable(full)
    assert cheaper <= len(blocks)


def test_a_prepared_summary_that_cannot_absorb_makes_no_block_before_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The case the shortcut is for is met: past the threshold by more than the prepared
    summary absorbs even without a block, with a newer summary running, the step waits for it
    and no fact block is made."""
    blocks: list[int] = []
    made = domain_compaction.checkpoint_fact_block

    def counted(*args: Any, **kwargs: Any) -> str:
        blocks.append(1)
        return made(*args, **kwargs)

    monkeypatch.setattr(domain_compaction, "checkpoint_fact_block", counted)
    decision = at_threshold(CONFIG, 400, running=True)._decide(Serve())
    assert decision.wait_for == "newer"
    assert blocks == []
