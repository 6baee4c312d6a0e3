"""At the threshold, a prepared summary that cannot absorb the growth is not made into a
checkpoint first (its fact block is most of an activation's time) when the step then waits
for the summary still running or extends the prepared one: the decision is the one made with
the block, only cheaper."""

from __future__ import annotations

from typing import Any

import pytest

from ctxledger import Config
from ctxledger.domain import Decision, Serve, _decide_background
from ctxledger.domain import compaction as domain_compaction
from ctxledger.events import SummaryPrepared
from ctxledger.testing import DomainSession

from .test_background_decide import fact_step, prepared_session, start_newer

CONFIG = Config(
    context_window=24_000,
    compression_threshold=0.8,
    compaction_target=0.3,
    min_retain_rounds=1,
    prepare_threshold=0.45,  # prepared early: the growth after it is more than it absorbs
    micro_batch=1,
    micro_keep_recent=1_000,  # nothing masked: each step adds what it says
)


def at_threshold(config: Config, lines: int, running: bool) -> DomainSession:
    """A session with a summary prepared at its prepare point, then grown past the threshold
    by steps of ``lines`` output lines each (long ones go further past it than the prepared
    summary absorbs), with a newer background summary running if ``running``."""
    sizes = config.sizes()
    session, n = prepared_session(config)
    assert any(isinstance(event, SummaryPrepared) for event in session.events)
    while session.view().estimated_tokens < sizes.threshold_tokens:
        n += 1
        fact_step(session, n, lines)
    if running:
        start_newer(session, session.state.last_seq - 2, sizes.threshold_tokens)
    return session


@pytest.fixture
def blocks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry for each fact block a checkpoint is given from now on."""
    made: list[int] = []
    real = domain_compaction.fact_block

    def counted(*args: Any, **kwargs: Any) -> str:
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(domain_compaction, "fact_block", counted)
    return made


def comparable(decision: Decision) -> tuple[Any, ...]:
    job = decision.job
    plan = None if job is None else (job.compaction_id, job.plan.retain_from_seq, job.plan.covered)
    return decision.events, decision.view, decision.result, decision.wait_for, plan


@pytest.mark.parametrize("schema", [4, 5])
@pytest.mark.parametrize("running", [True, False])
@pytest.mark.parametrize("lines", [8, 120, 400])
def test_the_decision_is_the_one_made_with_the_block(
    schema: int, running: bool, lines: int, blocks: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = CONFIG.replace(schema_version=schema)
    shortcut = at_threshold(config, lines, running)._decide(Serve())
    cheaper = len(blocks)
    blocks.clear()
    with monkeypatch.context() as always:
        always.setattr(_decide_background, "_bare_draft", lambda *args: None)
        full = at_threshold(config, lines, running)._decide(Serve())
    assert comparable(shortcut) == comparable(full)
    assert cheaper <= len(blocks)


def test_a_prepared_summary_that_cannot_absorb_makes_no_block_before_waiting(
    blocks: list[int],
) -> None:
    """The case the shortcut is for is met: past the threshold by more than the prepared
    summary absorbs even without a block, with a newer summary running, the step waits for it
    and no fact block is made."""
    decision = at_threshold(CONFIG, 400, running=True)._decide(Serve())
    assert decision.wait_for == "newer"
    assert blocks == []
