"""The one-mark policy of Configs recorded before the two marks (schema 3), kept to replay them.

Before the two marks a compaction cut only as far as just below the threshold, and two rules
answered "one compaction freed too little": the floor guard (``Config.floor_guard``: no
compaction while the part no cut can shrink, with the full summary reserve, is above the
threshold and the view fits the window) and the gain rule (``min_compaction_gain_tokens``,
capped at a tenth of the threshold: skip a compaction that saves less). Recorded Configs carry
them, so these steps stay exactly as those releases ran them; a Config built now never reaches
this module (see :mod:`ctxledger.domain.policy`).
"""

from __future__ import annotations

from ctxledger.domain.cuts import (
    STEP_CUT_FILL,
    Cut,
    CutMeasure,
    CutRequest,
    Rooms,
    Skip,
    newest_cut,
)
from ctxledger.domain.limits import CHARS_PER_TOKEN, min_gain_tokens

__all__ = ["gain_skip", "plan_cut"]


def plan_cut(request: CutRequest) -> Cut | Skip:
    """Plan the cut as the one-mark releases did: strictly below the threshold (or the
    reactive target), under the floor guard when the Config has it."""
    state, base = request.state, request.base
    config = state.config
    sizes = config.sizes()
    trigger, pending, tokenizer = request.trigger, request.pending, request.tokenizer
    threshold = request.marks.threshold
    estimate = request.draft.estimated_tokens
    target = threshold
    max_chars, fact_chars = sizes.summary_chars, sizes.facts_chars
    keep_rounds = config.min_retain_rounds
    if trigger == "prompt_too_long":
        keep_rounds >>= request.attempt + 1
        target = max(1, min(threshold, request.draft.view_tokens) >> (request.attempt + 1))
        # The summary may take at most a quarter of a shrunken target, and its facts as much.
        max_chars = max(1, min(max_chars, target * CHARS_PER_TOKEN // 4))
        fact_chars = min(fact_chars, max_chars)
    rooms = Rooms(max_chars, fact_chars)
    cutter = CutMeasure(state, tokenizer, trigger, rooms.reserve, pending)
    room = target - 1  # equality compacts, so the view must end strictly below the target
    window = config.context_window
    floor = 0
    if trigger == "threshold_exceeded" and config.floor_guard:
        newest = newest_cut(state, base)
        floor = cutter.exact(newest)
        if floor > room:
            # No compaction brings the view under the threshold: one at every step would pay
            # for nothing. Compact only when the view would not fit the window, towards it.
            if estimate <= window:
                return Skip("floor_above_threshold", floor=floor)
            bare = CutMeasure(state, tokenizer, trigger, 0, pending).exact(newest)
            if bare >= window:
                return Skip("floor_above_threshold", floor=bare)
            target = window
            room = target - 1
            if floor > room:
                # The summary's and the block's full rooms do not fit: give them what is left.
                spare = (room - bare) * CHARS_PER_TOKEN
                rooms = Rooms(max(1, min(rooms.summary, spare // 2)), min(rooms.facts, spare // 4))
                cutter = CutMeasure(state, tokenizer, trigger, rooms.reserve, pending)
                floor = cutter.exact(newest)
    round_cut: int | None = None
    if keep_rounds == 0:
        round_cut = state.boundary_at_or_before(state.last_seq + 1)
    elif len(state.user_seqs) > keep_rounds:
        round_cut = state.boundary_at_or_before(state.user_seqs[-keep_rounds])
    lower = max(round_cut, base) if round_cut is not None else base
    step_level = False
    cut: int | None
    ahead = request.ahead and lower <= base
    stuck = request.draft.view_tokens > window and lower <= base
    if cutter.exact(lower) <= room and not ahead and not stuck:
        if round_cut is None:
            return Skip("rounds_not_enough")
        cut = lower
    else:
        fill = 1.0 if trigger == "prompt_too_long" else STEP_CUT_FILL
        cut = cutter.step_cut(max(lower, base + 1), room, fill)
        step_level = cut is not None and (round_cut is None or cut > round_cut)
    if cut is None or cut <= base:
        return Skip("no_progress")
    return Cut(cut, step_level, rooms, target, cutter.exact(cut), floor)


def gain_skip(request: CutRequest, cut: Cut) -> Skip | None:
    """The gain rule: an automatic compaction that saves fewer tokens than the gain in force
    is skipped while the view fits the window (it would break the cached prefix for little)."""
    gain = min_gain_tokens(request.state.config)
    estimate = request.draft.estimated_tokens
    if (
        request.trigger == "threshold_exceeded"
        and gain > 0
        and estimate - cut.planned < gain
        and estimate < request.state.config.context_window
    ):
        return Skip("gain_too_small", floor=cut.floor, planned=cut.planned)
    return None
