"""Background compaction in the decision step (DESIGN §2 "Background compaction").

When a summary is prepared ahead of need (:func:`decide_background`), what a prepared summary
stands for (:func:`usable_prepared`, :func:`as_activated`), and what happens to it at the
threshold (:func:`use_background`: activate it, with a shorter fact block where
:func:`block_gives_way`, extend it, or wait for the one running).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from ctxledger.checkpoints import Checkpoint, CheckpointReason
from ctxledger.config import SHARES, Config
from ctxledger.domain._decide_requests import Background, Decision, Serve, served, start_job
from ctxledger.domain.calibration import session_tokenizer, tokens_of_chars
from ctxledger.domain.compaction import (
    CompactionPlan,
    CompactionResult,
    finish_checkpoint,
    finished_with_draft,
    newly_covered,
    prepared_checkpoint,
)
from ctxledger.domain.estimate import current_estimate, view_estimate
from ctxledger.domain.limits import CHARS_PER_TOKEN
from ctxledger.domain.policy import (
    absorbs,
    background_on,
    extend_due,
    marks,
    plan_compaction,
    prepare_due,
    ready_before_threshold,
)
from ctxledger.domain.state import SessionState
from ctxledger.domain.tokenizer import Tokenizer
from ctxledger.domain.view import Draft, draft_view
from ctxledger.events.types import CheckpointCreated, Event, SummaryPrepared

__all__ = [
    "activate",
    "activated_tokens",
    "as_activated",
    "background_estimate",
    "block_gives_way",
    "decide_background",
    "extension_due",
    "prepared_as_checkpoint",
    "running_extends",
    "usable_prepared",
    "use_background",
]

#: Fact blocks tried, each shorter by the excess, before a prepared summary is judged not to
#: absorb the growth (the tokenizer need not count the block's characters linearly).
_SHRINK_TRIES = 4


def background_estimate(state: SessionState, *, tokenizer: Tokenizer) -> int:
    """The estimate a background compaction is measured against (see :class:`Background`).

    That is the current view's, or, while a prepared summary may still be activated, the view
    that summary would give: a new background compaction is due once that one no longer
    absorbs the growth.
    """
    prepared = usable_prepared(state)
    if prepared is not None:
        return activated_tokens(state, prepared, tokenizer)
    return draft_view(state, tokenizer=tokenizer).estimated_tokens


def extension_due(state: SessionState, tokenizer: Tokenizer, estimate: int) -> bool:
    """Whether the usable prepared summary's delta should be prepared now
    (:func:`ctxledger.domain.policy.extend_due`), ``estimate`` being the view's now; ``True``
    when nothing prepared may be activated."""
    prepared = usable_prepared(state)
    if prepared is None:
        return True
    return extend_due(marks(state), activated_tokens(state, prepared, tokenizer), estimate)


def activated_draft(state: SessionState, prepared: SummaryPrepared, tokenizer: Tokenizer) -> Draft:
    """``draft_view(state, tokenizer=tokenizer, checkpoint=as_activated(...))``: the view the
    prepared summary gives, drafted once (:func:`as_activated` drafts it to measure it)."""
    return _activated(state, prepared, tokenizer)[1]


def as_activated(
    state: SessionState, prepared: SummaryPrepared, tokenizer: Tokenizer
) -> Checkpoint:
    """The checkpoint a prepared summary stands for, measured as its activation would make it:
    with its fact block. Without the block, the background would think a prepared summary still
    absorbs the growth when, at the threshold, the view it gives lies above the target by up to
    the block's room, and the agent then waits for a summary made at the threshold. Where the
    block gives way (:func:`block_gives_way`), the activation shortens it as far as absorbing
    needs, so the summary absorbs while it does without a block: it is measured so. Its
    ``tokens_after`` is the estimate of the view it gives (drafted with it, nothing current)."""
    return _activated(state, prepared, tokenizer)[0]


def activated_tokens(state: SessionState, prepared: SummaryPrepared, tokenizer: Tokenizer) -> int:
    """``as_activated(state, prepared, tokenizer).tokens_after``, counted without assembling the
    view where it has no fact block (:func:`~ctxledger.domain.estimate.view_estimate`): budget
    asks for it at every look, and a session never served has a tail as long as everything
    appended since the prepared cut."""
    config = state.config
    if block_gives_way(config) or not prepared.fact_chars:
        tokens = view_estimate(state, prepared_checkpoint(prepared), tokenizer=tokenizer)
        fitted = config.floor_guard or not config.legacy  # over the window: texts shortened
        if tokens is not None and not (fitted and tokens > config.context_window):
            return tokens
    return as_activated(state, prepared, tokenizer).tokens_after


def _activated(
    state: SessionState, prepared: SummaryPrepared, tokenizer: Tokenizer
) -> tuple[Checkpoint, Draft]:
    fact_chars = 0 if block_gives_way(state.config) else prepared.fact_chars
    return finished_with_draft(
        state,
        prepared_checkpoint(prepared),
        fact_chars=fact_chars,
        tokenizer=tokenizer,
    )


def usable_prepared(state: SessionState) -> SummaryPrepared | None:
    """Return the prepared summary that may still become the next checkpoint, if any.

    It must extend the active checkpoint and cut after it (a newer checkpoint, made meanwhile by
    other means, makes it stale).
    """
    prepared = state.prepared
    if prepared is None:
        return None
    active = state.active_checkpoint
    if prepared.previous_checkpoint_id != (active.id if active else None):
        return None
    base = active.retain_from_seq if active else state.cleared_through + 1
    if not base < prepared.retain_from_seq <= state.last_seq + 1:
        return None
    return prepared


def use_background(
    state: SessionState,
    request: Serve,
    draft: Draft,
    tokenizer: Tokenizer,
    new_id: Callable[[], str],
    now: Callable[[], float],
) -> Decision | None:
    """At the threshold: activate, extend or await what the background prepared, if anything.

    A prepared summary that brings the view below the threshold is activated at once, even if a
    newer background summary is still running (the agent does not wait for a summary it already
    has); otherwise a running one is awaited.
    """
    active = state.active_checkpoint
    prepared = usable_prepared(state)
    checkpoint: Checkpoint | None = None
    bare = None if prepared is None else _bare_draft(state, prepared, request.pending, tokenizer)
    if prepared is not None and (bare is None or absorbs(marks(state), bare.estimated_tokens)):
        checkpoint = prepared_as_checkpoint(state, prepared, draft, tokenizer, "threshold_exceeded")
        after = draft_view(
            state, tokenizer=tokenizer, pending=request.pending, checkpoint=checkpoint
        )
        if absorbs(marks(state), after.estimated_tokens):
            return activate(state, request, prepared, checkpoint, draft, tokenizer, new_id, now)
        if block_gives_way(state.config):
            shorter = _absorbing(state, prepared, checkpoint, draft, request.pending, tokenizer)
            if shorter is not None:
                return activate(state, request, prepared, shorter, draft, tokenizer, new_id, now)
    running = state.background
    if running is not None and running_extends(state, running.compaction_id, active):
        return Decision(wait_for=running.compaction_id)
    if prepared is None:
        return None
    # The history grew past what the prepared cut absorbs: summarise only what lies between
    # that cut and a new one, with the prepared summary as the previous summary.
    under = bare
    if under is None:
        under = draft_view(
            state,
            tokenizer=tokenizer,
            pending=request.pending,
            checkpoint=prepared_checkpoint(prepared),
        )
    outcome = plan_compaction(
        state,
        tokenizer=tokenizer,
        trigger="threshold_exceeded",
        pending=request.pending,
        prepared=prepared,
        draft=under,
        force=True,
    )
    if isinstance(outcome, CompactionPlan):
        return start_job(outcome, request, new_id)
    if checkpoint is None:  # it cannot absorb the growth: not made above
        checkpoint = prepared_as_checkpoint(state, prepared, draft, tokenizer, "threshold_exceeded")
        after = draft_view(
            state, tokenizer=tokenizer, pending=request.pending, checkpoint=checkpoint
        )
    if after.estimated_tokens >= state.config.context_window:
        # The prepared view would not fit the window (its fact block included): the foreground
        # path compacts from the active checkpoint towards the window instead.
        return None
    # No further cut is possible: the prepared one is still the best there is.
    return activate(state, request, prepared, checkpoint, draft, tokenizer, new_id, now)


def _bare_draft(
    state: SessionState, prepared: SummaryPrepared, pending: str, tokenizer: Tokenizer
) -> Draft | None:
    """The view ``prepared`` gives without a fact block, where the tokenizer counts characters
    (None for another tokenizer). No block, however short, then counts fewer tokens: a prepared
    summary that does not absorb the growth (:func:`absorbs`) without one does not with one, so
    its block, most of an activation's time (~4 ms for a summary of a few hundred messages, on
    the history actor), is not made for a step that then waits for the summary still running
    or extends this one (which starts from this draft)."""
    if tokens_of_chars(session_tokenizer(state, tokenizer), 0) is None:
        return None
    return draft_view(
        state, tokenizer=tokenizer, pending=pending, checkpoint=prepared_checkpoint(prepared)
    )


def running_extends(state: SessionState, compaction_id: str, active: Checkpoint | None) -> bool:
    """Whether background compaction ``compaction_id`` was planned on the active checkpoint."""
    running = state.background
    if running is None or running.compaction_id != compaction_id:
        return False
    # A background compaction planned before the active checkpoint was made cuts no further
    # than it (or extends a checkpoint that is gone): it cannot help.
    base = active.retain_from_seq if active else state.cleared_through + 1
    return running.retain_from_seq > base


def prepared_as_checkpoint(
    state: SessionState,
    prepared: SummaryPrepared,
    draft: Draft,
    tokenizer: Tokenizer,
    reason: CheckpointReason,
    fact_chars: int | None = None,
) -> Checkpoint:
    """The checkpoint a prepared summary becomes (its id and time are set on activation), with
    a fact block of at most ``fact_chars`` (by default the room it was planned with)."""
    return finish_checkpoint(
        state,
        Checkpoint(
            id="",
            summary=prepared.summary,
            retain_from_seq=prepared.retain_from_seq,
            covers_through_seq=prepared.covers_through_seq,
            reason=reason,
            previous_checkpoint_id=prepared.previous_checkpoint_id,
            tokens_before=draft.estimated_tokens,
            input_hash=prepared.input_hash,
            summarizer=prepared.summarizer,
            summary_seconds=prepared.summary_seconds,
            input_chars=prepared.input_chars,
            summarizer_calls=prepared.summarizer_calls,
        ),
        fact_chars=prepared.fact_chars if fact_chars is None else fact_chars,
        tokenizer=tokenizer,
    )


def block_gives_way(config: Config) -> bool:
    """Whether a summary prepared ahead is activated with a shorter fact block when that lets
    it absorb the growth (``Shares.block_gives_way``, schema 5), rather than the agent waiting
    for a summary made at the threshold."""
    shares = SHARES.get(config.schema_version)
    return shares is not None and shares.block_gives_way


def _absorbing(
    state: SessionState,
    prepared: SummaryPrepared,
    checkpoint: Checkpoint,
    draft: Draft,
    pending: str,
    tokenizer: Tokenizer,
) -> Checkpoint | None:
    """The prepared summary's checkpoint with its fact block shortened until the view it gives
    :func:`absorbs` the growth; None when even no block does not (or it has no block)."""
    in_force = marks(state)
    limit = in_force.target + (in_force.threshold - in_force.target) // 2
    room = len(checkpoint.facts)
    for _ in range(_SHRINK_TRIES):
        view = draft_view(state, tokenizer=tokenizer, pending=pending, checkpoint=checkpoint)
        if absorbs(in_force, view.estimated_tokens):
            return checkpoint
        if room == 0:
            return None
        room = max(0, room - (view.estimated_tokens - limit) * CHARS_PER_TOKEN)
        checkpoint = prepared_as_checkpoint(
            state, prepared, draft, tokenizer, "threshold_exceeded", fact_chars=room
        )
    return None


def activate(
    state: SessionState,
    request: Serve,
    prepared: SummaryPrepared,
    checkpoint: Checkpoint,
    draft: Draft,
    tokenizer: Tokenizer,
    new_id: Callable[[], str],
    now: Callable[[], float],
) -> Decision:
    """Make ``prepared`` (as ``checkpoint``) the next checkpoint, and serve its view when
    ``request`` asks for one."""
    checkpoint = msgspec.structs.replace(checkpoint, id=new_id(), created_at=now())
    after = draft_view(state, tokenizer=tokenizer, pending=request.pending, checkpoint=checkpoint)
    result = CompactionResult(
        compacted=True,
        reason="compacted",
        checkpoint_id=checkpoint.id,
        estimated_tokens=after.estimated_tokens,
        threshold=marks(state).threshold,
        retain_from_seq=checkpoint.retain_from_seq,
        messages_compacted=len(newly_covered(state, prepared.retain_from_seq)),
        tokens_before=draft.estimated_tokens,
        prepared=True,
    )
    created = CheckpointCreated(
        compaction_id=prepared.compaction_id, checkpoint=checkpoint, prepared=True
    )
    events: tuple[Event, ...] = (created,)
    if not request.view:
        return Decision(events=events, result=result)
    view = after.view(state)
    event = served(view, state, tokenizer, chars=after.chars)
    return Decision(events=(*events, event), view=view, result=result)


def decide_background(
    state: SessionState,
    request: Background,
    tokenizer: Tokenizer,
    new_id: Callable[[], str],
    now: Callable[[], float],
) -> Decision:
    """Start a summary ahead of need when one is due (see :class:`Background`)."""
    if (
        not background_on(state.config)
        or state.background is not None
        or state.last_seq < 3
        or state.last_seq < state.background_retry_seq
    ):
        return Decision()
    in_force = marks(state)
    prepared = usable_prepared(state)
    if prepared is not None:
        # Only the estimate of the view now is needed: the plan starts from the prepared cut.
        estimate = current_estimate(state, tokenizer=tokenizer)
        if not prepare_due(in_force, estimate):
            return Decision()
        under = activated_draft(state, prepared, tokenizer)
        if not extend_due(in_force, under.estimated_tokens, estimate):
            return Decision()  # what is prepared will absorb the growth
        outcome = plan_compaction(
            state, tokenizer=tokenizer, prepared=prepared, draft=under, force=True
        )
    else:
        draft = draft_view(state, tokenizer=tokenizer)
        if not prepare_due(in_force, draft.estimated_tokens):
            return Decision()
        if request.timed and not ready_before_threshold(state, draft, now()):
            return Decision()
        outcome = plan_compaction(state, tokenizer=tokenizer, draft=draft, force=True)
    if not isinstance(outcome, CompactionPlan):
        return Decision()
    return start_job(outcome, request, new_id)
