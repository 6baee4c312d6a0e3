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

from hypothesis import given
from hypothesis import strategies as st
from tests.property.test_current_estimate import CONFIGS, _commands

from ctxledger import Checkpoint, Config, Message
from ctxledger.domain import CharTokenizer, SessionState, render_policy
from ctxledger.domain.calibration import CalibratedTokenizer
from ctxledger.domain.cuts import CutMeasure, shown_chars
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
