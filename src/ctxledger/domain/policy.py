"""The compaction policy: two marks, in small named steps (DESIGN §2 "Two marks").

A step whose estimate reaches the high mark compacts (:func:`should_compact`, the one place the
threshold is compared); an automatic compaction brings the view to at most the low mark
(:func:`aim`), keeping ``min_retain_rounds`` raw and cutting at a step boundary inside them when
it must (:func:`plan_cut`), with rooms for the summary and the fact block that are shares of the
target (:func:`size_summary`). A summary is prepared ahead from the prepare point on
(:func:`prepare_due`), planned deep enough that, activated at the threshold, the view lands at
the target (:func:`absorbs`). A view over the window is never served (:func:`overflow_error`).

:func:`plan_compaction` composes the steps; the live host, the testing driver and what-if reach
it through :func:`ctxledger.domain.decide`. Configs recorded before the marks (schema 3) take
the one-mark steps of :mod:`ctxledger.domain.onemark`, so old logs replay as served. The marks
and the predicates on them are :mod:`ctxledger.domain._marks`, re-exported here.
"""

from __future__ import annotations

from ctxledger.domain import onemark
from ctxledger.domain._marks import (
    absorbs,
    background_on,
    extend_due,
    marks,
    prepare_due,
    ready_in_time,
    should_compact,
)
from ctxledger.domain.calibration import session_tokenizer
from ctxledger.domain.compaction import (
    CompactionPlan,
    CompactionResult,
    prepared_checkpoint,
)
from ctxledger.domain.cuts import (
    TRIGGERS,
    Cut,
    CutMeasure,
    CutRequest,
    Rooms,
    Skip,
    Trigger,
    newest_cut,
)
from ctxledger.domain.limits import CHARS_PER_TOKEN
from ctxledger.domain.projection import FACTS_SEPARATOR
from ctxledger.domain.state import SessionState
from ctxledger.domain.tokenizer import Tokenizer, message_chars
from ctxledger.domain.view import Draft, draft_view
from ctxledger.errors import ContextOverflowError
from ctxledger.events.types import SummaryPrepared

__all__ = [
    "FLOOR_GAIN",
    "absorbs",
    "aim",
    "background_on",
    "extend_due",
    "marks",
    "overflow_error",
    "plan_compaction",
    "plan_cut",
    "prepare_due",
    "ready_before_threshold",
    "ready_in_time",
    "should_compact",
    "size_summary",
    "smallest_summary",
    "unshrinkable_tokens",
]


#: When no compaction brings the view under the threshold, one runs only when it frees at least
#: this share of the window: the slack of the promise that a lower threshold never gives a
#: higher peak (DESIGN §2 "Two marks").
FLOOR_GAIN = 0.005


def aim(request: CutRequest) -> int:
    """The tokens the view must end at or below after the compaction.

    The target; for a summary prepared ahead, lower by the distance from the prepare point to
    the threshold (the growth it must absorb before it is used); for a reactive retry (the
    provider refused the view), half the view, halved again per earlier attempt, and never
    above the target.
    """
    target = request.marks.target
    if request.trigger == "prompt_too_long":
        return max(1, min(target, request.draft.view_tokens >> (request.attempt + 1)))
    if request.ahead and request.marks.prepare:
        return max(1, target - (request.marks.threshold - request.marks.prepare))
    return target


def size_summary(request: CutRequest, aim_tokens: int) -> Rooms:
    """The summary's and the fact block's rooms (``Config.sizes``); a reactive retry gives the
    summary at most a quarter of its aim, and the block no more than the summary."""
    sizes = request.state.config.sizes()
    summary, facts = sizes.summary_chars, sizes.facts_chars
    if request.trigger == "prompt_too_long":
        summary = max(1, min(summary, aim_tokens * CHARS_PER_TOKEN // 4))
        facts = min(facts, summary)
    return Rooms(summary, facts)


def plan_cut(request: CutRequest) -> Cut | Skip:
    """Plan where an automatic, manual or reactive compaction cuts (a schema-4 Config).

    The cut keeps the last ``min_retain_rounds`` rounds raw when the view then ends at or below
    the aim; else it is the earliest step boundary inside them whose view does. What no cut can
    shrink (system messages, pins, the newest step and the smallest summary, a quarter of the
    summary's room) decides the rest. When it lies at most half the gap between the marks above
    the target, the rooms shrink if need be so that the view ends there too (the next
    compaction is then at least half the gap away); when it lies higher but below the
    threshold, they shrink to the smallest summary and no fact block. At or over the threshold (no
    compaction brings the view under it), an automatic compaction runs only when it frees at
    least half the gap between the marks or the view does not fit the window
    (``floor_above_threshold`` otherwise), and then makes room below the window.
    """
    state, base = request.state, request.base
    config = state.config
    window = config.context_window
    target = aim(request)
    rooms = size_summary(request, target)
    newest = newest_cut(state, base)

    def measure(summary: int, facts: int = 0) -> CutMeasure:
        reserve = Rooms(summary, facts).reserve
        return CutMeasure(state, request.tokenizer, request.trigger, reserve, request.pending)

    cutter = measure(*rooms)
    floor = 0
    limit = window
    if request.trigger == "threshold_exceeded":
        marks_ = request.marks
        floor = measure(smallest_summary(rooms.summary)).exact(newest)
        midpoint = marks_.target + (marks_.threshold - marks_.target) // 2
        if floor <= midpoint:
            # The next compaction stays at least half the gap away, even when what no cut
            # shrinks (a huge newest step, say) leaves the full rooms no space below it.
            limit = midpoint
        elif not should_compact(marks_, floor):
            # Even so the view lands more than half the gap above the target: keep it as small
            # as it can be (the smallest summary, no fact block), as a lower threshold would.
            limit = marks_.threshold - 1
            rooms = Rooms(smallest_summary(rooms.summary), 0)
            cutter = measure(*rooms)
        else:
            # No cut brings the view under the threshold: compact whenever that frees at least
            # FLOOR_GAIN of the window (a higher threshold would serve no larger view; for
            # less, the summary is not worth it), keeping the view as small as it can.
            gain = request.draft.estimated_tokens - floor
            fits = request.draft.estimated_tokens <= window
            if fits and gain < FLOOR_GAIN * window:
                return Skip("floor_above_threshold", floor=floor)
            rooms = Rooms(max(1, rooms.summary // 4), 0)
            cutter = measure(*rooms)
    if cutter.exact(newest) > limit:
        bare = measure(0).exact(newest)
        if bare >= limit:
            return Skip("floor_above_threshold", floor=bare)
        # The full rooms do not fit at the deepest cut: give the texts what is left, the
        # summary never less than the smallest summary (what no cut shrinks counts it).
        spare = (limit - bare) * CHARS_PER_TOKEN
        summary = max(smallest_summary(rooms.summary), min(rooms.summary, spare // 2))
        left = max(0, spare - summary - len(FACTS_SEPARATOR))
        rooms = Rooms(summary, min(rooms.facts, spare // 4, left))
        cutter = measure(*rooms)
    keep = config.min_retain_rounds
    if request.trigger == "prompt_too_long":
        keep >>= request.attempt + 1
    round_cut: int | None = None
    if keep == 0:
        round_cut = state.boundary_at_or_before(state.last_seq + 1)
    elif len(state.user_seqs) > keep:
        round_cut = state.boundary_at_or_before(state.user_seqs[-keep])
    lower = max(round_cut, base) if round_cut is not None else base
    # Ahead of need, or over the window, a round cut that makes no progress is no answer.
    deeper = lower <= base and (request.ahead or request.draft.view_tokens > window)
    step_level = False
    cut: int | None
    if cutter.exact(lower) <= target and not deeper:
        if round_cut is None:
            return Skip("rounds_not_enough", floor=floor)
        cut = lower
    else:
        cut = cutter.step_cut(max(lower, base + 1), target, 1.0)
        step_level = cut is not None and (round_cut is None or cut > round_cut)
    if cut is None or cut <= base:
        return Skip("no_progress", floor=floor)
    return Cut(cut, step_level, rooms, target, cutter.exact(cut), floor)


def smallest_summary(summary_chars: int) -> int:
    """The least room a summary is given: a quarter of its full room (at least 1 character)."""
    return max(1, summary_chars // 4)


def unshrinkable_tokens(state: SessionState, tokenizer: Tokenizer, pending: str = "") -> int:
    """The part of the view no compaction can shrink: system messages, pins (and the kept first
    request), the newest step and the smallest summary (DESIGN §2 "Two marks").

    A view at or over the threshold is served only when this is itself at or over it.
    """
    tokenizer = session_tokenizer(state, tokenizer)
    active = state.active_checkpoint
    base = active.retain_from_seq if active else state.cleared_through + 1
    rooms = state.config.sizes()
    cutter = CutMeasure(
        state, tokenizer, "threshold_exceeded", smallest_summary(rooms.summary_chars), pending
    )
    return cutter.exact(newest_cut(state, base))


def overflow_error(
    state: SessionState, draft: Draft, floor: int = 0
) -> ContextOverflowError | None:
    """The refusal to serve a view over the window (a schema-4 Config serves none).

    The view is measured by the tokenizer (with the pending text), not by the provider's usage
    figure, which also counts what the view does not hold (tool schemas, say). The error names
    the view's size, the window and the largest message of the view, so the caller knows what
    to shorten (or retract).
    """
    window = state.config.context_window
    if draft.prompt_tokens <= window:
        return None
    largest = max(draft.messages, key=message_chars, default=None)
    what = ""
    if largest is not None and largest.seq is not None:
        what = (
            f"; its largest message, seq {largest.seq} ({largest.role}), has "
            f"{message_chars(largest):,} characters"
        )
    part = (
        f" and the part no compaction can shrink (system messages, pins, the newest step) "
        f"alone needs {floor:,}"
        if floor
        else ""
    )
    return ContextOverflowError(
        f"session {state.session_id!r}: the view needs {draft.prompt_tokens:,} tokens{part}, "
        f"which does not fit the window of {window:,} tokens{what}; shorten or retract it "
        "(Session.retract_last), shorten the system prompt or the pins, or use a larger window"
    )


def plan_compaction(
    state: SessionState,
    *,
    tokenizer: Tokenizer,
    trigger: Trigger = "threshold_exceeded",
    pending: str = "",
    focus: str | None = None,
    attempt: int = 0,
    draft: Draft | None = None,
    prepared: SummaryPrepared | None = None,
    force: bool = False,
) -> CompactionPlan | CompactionResult:
    """Decide whether to compact and where to cut (the policy's steps, in order).

    ``manual`` and ``prompt_too_long`` skip the threshold check; ``prompt_too_long`` also skips
    ``checkpoint_current`` (the provider just rejected the current view) and cuts harder on each
    ``attempt`` (fewer raw rounds, a smaller aim).

    Args:
        state: The session.
        tokenizer: Counts tokens.
        trigger: Why compaction is considered.
        pending: Text about to be sent with the view.
        focus: What the summary should keep (manual compaction).
        attempt: Reactive retry number, from 0.
        draft: The current view (:func:`~ctxledger.domain.draft_view` with ``pending``), if
            already made; without ``prepared`` it must be the active checkpoint's view.
        prepared: Plan from a prepared summary instead of the active checkpoint: only what lies
            between its cut and the new one is summarised (with it as the previous summary);
            the new checkpoint still extends the active one. ``draft`` is then the view under
            the prepared summary.
        force: Skip the threshold check (``below_threshold``): plan the cut a background
            summary prepares ahead of need (deep enough for the growth until the threshold).

    Returns:
        A plan, or a not-compacted result with the reason.

    Raises:
        ValueError: ``trigger`` is unknown or ``attempt`` is negative.
    """
    if trigger not in TRIGGERS:
        raise ValueError(f"unknown compaction trigger {trigger!r}; expected one of {TRIGGERS}")
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    tokenizer = session_tokenizer(state, tokenizer)
    config = state.config
    active = state.active_checkpoint
    base_checkpoint = active if prepared is None else prepared_checkpoint(prepared)
    if draft is None:
        checkpoint = None if prepared is None else base_checkpoint
        draft = draft_view(state, tokenizer=tokenizer, pending=pending, checkpoint=checkpoint)
    estimate = draft.estimated_tokens
    in_force = marks(state)

    def skip(reason: str, *, floor: int = 0, planned: int = 0) -> CompactionResult:
        return CompactionResult(
            compacted=False,
            reason=reason,
            checkpoint_id=active.id if active else None,
            estimated_tokens=estimate,
            threshold=in_force.threshold,
            retain_from_seq=active.retain_from_seq if active else None,
            messages_compacted=0,
            tokens_before=estimate,
            floor_tokens=floor,
            planned_tokens=planned,
        )

    if state.last_seq < 3:
        return skip("messages_not_enough")
    # What must fit the window: the view (a smaller window since, say), with the pending text
    # (a one-mark Config looked at the view alone).
    sent = draft.view_tokens if in_force.one_mark else draft.prompt_tokens
    if (
        active is not None
        and prepared is None
        and trigger != "prompt_too_long"
        and state.checkpoint_seq == state.last_seq
        and sent <= config.context_window
    ):
        return skip("checkpoint_current")
    due = should_compact(in_force, estimate)
    if trigger == "threshold_exceeded" and not due and not force:
        return skip("below_threshold")
    base = base_checkpoint.retain_from_seq if base_checkpoint else state.cleared_through + 1
    request = CutRequest(
        state, tokenizer, trigger, pending, attempt, draft, in_force, base, force and not due
    )
    cut = onemark.plan_cut(request) if in_force.one_mark else plan_cut(request)
    if isinstance(cut, Skip):
        return skip(cut.reason, floor=cut.floor, planned=cut.planned)
    covered = tuple(
        m
        for m in state.history[base - 1 : cut.seq - 1]
        if not state.is_head(m) and m.seq not in state.retracted
    )
    if not covered:
        return skip("no_progress")
    held = onemark.gain_skip(request, cut) if in_force.one_mark else None
    if held is not None:
        return skip(held.reason, floor=held.floor, planned=held.planned)
    return CompactionPlan(
        reason=trigger,
        retain_from_seq=cut.seq,
        covers_through_seq=cut.seq - 1,
        covered=covered,
        previous_summary=base_checkpoint.summary if base_checkpoint else None,
        previous_checkpoint_id=active.id if active else None,
        focus=focus,
        max_chars=cut.rooms.summary,
        chunk_chars=config.sizes().chunk_chars,
        estimated_tokens=estimate,
        threshold=in_force.threshold,
        target_tokens=cut.aim,
        planned_tokens=cut.planned,
        attempt=attempt,
        step_level=cut.step_level,
        fact_chars=cut.rooms.facts,
        result_chars=config.summary_result_chars,
    )


def ready_before_threshold(state: SessionState, draft: Draft, now: float) -> bool:
    """Whether a summary started now can still be ready before the threshold (``True``), judged
    by the session's pace since its active checkpoint (:func:`ready_in_time`): the growth of
    the view since that checkpoint over the time since it was made, against how long its
    summary took. ``True`` with no checkpoint yet, or for a one-mark Config (schema 3).

    A summary that cannot be ready is not prepared: the agent waits at the threshold all the
    same, and the summary the background plans ahead of need (deeper, to absorb growth it will
    not see) lands the view higher than one made at the threshold, so the next compaction
    comes sooner.
    """
    active = state.active_checkpoint
    if active is None or state.config.legacy:
        return True
    in_force = marks(state)
    estimate = draft.estimated_tokens
    grown = estimate - active.tokens_after
    return ready_in_time(
        in_force.threshold - estimate, grown, now - active.created_at, active.summary_seconds
    )
