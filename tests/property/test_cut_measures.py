"""A cut's measures from the characters each message shows equal the view assembled and counted.

``CutMeasure.exact`` and ``step_cut`` count a candidate cut's view from one pass over the tail
(:class:`ctxledger.domain.cuts.ShownChars`, kept on the state while it folds no event) when the
tokenizer is a built-in estimator. After every command of a random session (appends of every
kind, pins, usage, retractions, clears, compactions, reverts, Config changes, served views,
prepared summaries) every cut must measure what the view assembled for it counts, and a
step-level cut must be the one found by counting message by message, as it was first written.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from tests.property.test_current_estimate import CONFIGS, _commands

from ctxledger import Checkpoint, Config, Message, ToolCall
from ctxledger.domain import Background, CharTokenizer, SessionState, draft_view, render_policy
from ctxledger.domain._decide_background import activated_tokens, as_activated, usable_prepared
from ctxledger.domain.calibration import CalibratedTokenizer
from ctxledger.domain.cuts import CutMeasure, shown_chars
from ctxledger.domain.estimate import view_estimate
from ctxledger.domain.projection import assemble, slot_seqs
from ctxledger.domain.render import render_message
from ctxledger.testing import DomainSession


class _Plain(CharTokenizer):
    """The default estimator's counts from a tokenizer that is not a built-in one: measured by
    assembling each view (the path any other tokenizer takes)."""


def _reference_exact(
    state: SessionState, tokenizer: Any, reserve: int, pending: str, cut: int
) -> int:
    checkpoint = Checkpoint(
        id="", summary="x" * reserve, retain_from_seq=cut, covers_through_seq=cut - 1,
        reason="threshold_exceeded",
    )  # fmt: skip
    extra = [Message(role="user", content=pending)] if pending else []
    return tokenizer.count_messages([*assemble(state, checkpoint), *extra])


def _reference_step_cut(cutter: CutMeasure, lower: int, room: int, fill: float) -> int | None:
    """``CutMeasure.step_cut`` as first written: every message rendered and counted."""
    state = cutter.state
    candidates = state.boundaries_between(lower, state.last_seq)
    if not candidates:
        return None
    fixed = cutter.exact(state.last_seq + 1)
    budget = fixed + int(max(0, room - fixed) * fill)
    always = set(slot_seqs(state, state.last_seq + 1))
    policy = render_policy(state)
    suffix: dict[int, int] = {}
    total = 0
    for seq in range(state.last_seq, candidates[0] - 1, -1):
        message = state.history[seq - 1]
        if seq not in always and seq not in state.retracted and not state.is_head(message):
            total += cutter.tokenizer.count_message(render_message(state, policy, message)) + 1
        if seq in candidates:
            suffix[seq] = total
    for seq in candidates:
        if fixed + suffix[seq] <= budget and cutter.exact(seq) <= budget:
            return seq
    return candidates[-1]


@given(
    config=st.sampled_from(CONFIGS),
    tokenizer=st.sampled_from([CharTokenizer(), CalibratedTokenizer(2.5), _Plain()]),
    data=st.data(),
)
def test_every_cut_measures_what_its_view_counts(
    config: Config, tokenizer: Any, data: st.DataObject
) -> None:
    session = DomainSession(config, tokenizer=tokenizer)
    for state in _commands(session, data):
        if state.last_seq == 0:
            continue
        if type(tokenizer) is _Plain:
            assert shown_chars(state, tokenizer) is None
        pending = data.draw(st.sampled_from(["", "next request"]))
        reserve = data.draw(st.sampled_from([0, 40, 400]))
        cutter = CutMeasure(state, tokenizer, "threshold_exceeded", reserve, pending)
        # From the newest cut down, as a plan asks, then the other way round (the kept sums
        # are extended downwards as far as asked).
        cuts = list(range(state.last_seq + 1, 0, -1))
        if data.draw(st.booleans()):
            cuts.reverse()
        for cut in cuts:
            assert cutter.exact(cut) == _reference_exact(state, tokenizer, reserve, pending, cut)
        lower = data.draw(st.integers(1, state.last_seq + 1))
        room = data.draw(st.integers(0, 3_000))
        fill = data.draw(st.sampled_from([0.5, 1.0]))
        fresh = CutMeasure(state, tokenizer, "threshold_exceeded", reserve, pending)
        assert fresh.step_cut(lower, room, fill) == _reference_step_cut(fresh, lower, room, fill)


@given(
    config=st.sampled_from(CONFIGS),
    tokenizer=st.sampled_from([CharTokenizer(), CalibratedTokenizer(2.5), _Plain()]),
    data=st.data(),
)
def test_a_view_is_estimated_as_drafted_without_assembling_it(
    config: Config, tokenizer: Any, data: st.DataObject
) -> None:
    """``view_estimate`` for any cut, and the estimate of the view a prepared summary gives
    (``activated_tokens``, what budget's looks read), equal the drafted views'."""
    session = DomainSession(config.replace(fact_index_chars=400), tokenizer=tokenizer)
    prepared_seen = 0
    for state in _commands(session, data):
        cut = data.draw(st.integers(1, state.last_seq + 1))
        summary = data.draw(st.sampled_from(["", "a summary", "s" * 900]))
        checkpoint = Checkpoint(
            id="probe", summary=summary, retain_from_seq=cut, covers_through_seq=cut - 1,
            reason="manual",
        )  # fmt: skip
        drafted = draft_view(state, tokenizer=tokenizer, checkpoint=checkpoint)
        estimated = view_estimate(state, checkpoint, tokenizer=tokenizer)
        assert estimated == (None if type(tokenizer) is _Plain else drafted.estimated_tokens)
        prepared = usable_prepared(state)
        if prepared is not None:
            prepared_seen += 1
            expected = as_activated(state, prepared, tokenizer).tokens_after
            assert activated_tokens(state, prepared, tokenizer) == expected
    note(f"{prepared_seen} states with a usable prepared summary")


@pytest.mark.parametrize("schema", [4, 5])
@pytest.mark.parametrize("calibrated", [False, True])
def test_a_prepared_summary_is_estimated_as_its_activation_drafts_it(
    schema: int, calibrated: bool
) -> None:
    """From the prepare point on, as the session grows (the masking boundary moving, a pin, a
    retraction), the estimate budget reads of the view a prepared summary gives is the one its
    activation drafts: counted from the characters shown under schema 5 (its block gives way),
    drafted with the block under schema 4."""
    config = Config(
        context_window=12_000, compression_threshold=0.5, min_retain_rounds=10, micro_batch=2,
        micro_keep_recent=4, micro_min_chars=10, prepare_threshold=0.85, schema_version=schema,
        fact_index_chars=400,
    )  # fmt: skip
    tokenizer = CalibratedTokenizer(2.5) if calibrated else CharTokenizer()
    session = DomainSession(config, tokenizer=tokenizer)
    session.append_many([Message.system("You are a coding agent."), Message.user("fix the tests")])
    checked = 0
    for n in range(120):
        call = ToolCall(f"call-{n}", "bash", f'{{"command": "pytest tests/test_{n}.py"}}')
        session.append_many(
            [
                Message.user(f"now look at src/pkg/module_{n}.py " + "u" * 300),
                Message.assistant(f"step {n}", [call]),
                Message.tool(f"src/pkg/module_{n}.py:1: AssertionError " * 6, call.id, "bash"),
            ]
        )
        if n == 60:
            session.pin(session.state.last_seq - 1)
        if n == 70:
            session.retract_last()  # the tool result, then its call
            session.retract_last()
        session.decide(Background())
        prepared = usable_prepared(session.state)
        if prepared is None:
            continue
        expected = as_activated(session.state, prepared, tokenizer).tokens_after
        assert activated_tokens(session.state, prepared, tokenizer) == expected
        checked += 1
    assert checked > 20
