"""The one decision step: for a session state and a request, what to record and what to serve.

Every flow that compacts or serves a view goes through :func:`decide`: the live runtime
(the host's history actor), the testing driver (:class:`ctxledger.testing.DomainSession`),
what-if re-projection (:func:`ctxledger.replay.what_if`) and transcript import. None keeps a copy
of the flow, so they record the same events for the same state. The commands that record
without compacting (append, pin, usage, config, retract, clear, revert) and the reactive retry
loop's step are decided in :mod:`ctxledger.domain.commands`, the same way.

A decision may need a summary first. Then :attr:`Decision.job` names it: the caller records the
decision's events, runs the summariser for ``job.plan`` wherever it runs summarisers (inline, on a
pool, on an event loop) and calls :func:`decide` again with :class:`Summarized`. A decision may
also ask the caller to wait for a background compaction that is already running
(:attr:`Decision.wait_for`) and then decide the same request again.

Requests:

* :class:`Serve` -- serve the next view, compacting first when it is due (``prepare_step``,
  ``build_model_view``, ``compact_if_needed``).
* :class:`Compact` -- compact now: manual (with a focus) or reactive (a retry attempt).
* :class:`Background` -- start a summary ahead of need when the estimate crosses
  ``prepare_threshold`` (DESIGN §2 "Background compaction").
* :class:`Summarized` -- a job's summary arrived, or did not.
* :class:`Recover` -- a session is activated after a restart.
* :class:`Adopt` -- record a checkpoint made elsewhere (a transcript being imported).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from ctxledger.checkpoints import Checkpoint, CheckpointReason
from ctxledger.config import SHARES, Config
from ctxledger.domain.calibration import session_tokenizer, view_chars
from ctxledger.domain.compaction import (
    CompactionPlan,
    CompactionResult,
    Trigger,
    complete_compaction,
    fail_compaction,
    finish_checkpoint,
    prepared_checkpoint,
)
from ctxledger.domain.limits import CHARS_PER_TOKEN
from ctxledger.domain.policy import (
    absorbs,
    background_on,
    extend_due,
    marks,
    overflow_error,
    plan_compaction,
    prepare_due,
    ready_in_time,
    should_compact,
)
from ctxledger.domain.state import SessionState
from ctxledger.domain.tokenizer import Tokenizer
from ctxledger.domain.view import Draft, ModelView, draft_view, remask_of
from ctxledger.errors import BudgetExceededError, ContextOverflowError, CtxLedgerError
from ctxledger.events.types import (
    BudgetExhausted,
    CheckpointCreated,
    CompactionFailed,
    CompactionStarted,
    Event,
    SummaryPrepared,
    ToolResultSynthesized,
    ViewServed,
)
from ctxledger.messages import Message

__all__ = [
    "INTERRUPTED_RESULT",
    "Adopt",
    "Background",
    "Compact",
    "Decision",
    "Job",
    "Recover",
    "Request",
    "Serve",
    "Summarized",
    "background_estimate",
    "block_gives_way",
    "decide",
    "extension_due",
    "over_budget",
    "ready_before_threshold",
    "served",
    "usable_prepared",
]

#: Fact blocks tried, each shorter by the excess, before a prepared summary is judged not to
#: absorb the growth (the tokenizer need not count the block's characters linearly).
_SHRINK_TRIES = 4

#: Content of the tool result synthesised for a call that was never answered before a restart.
INTERRUPTED_RESULT = "[interrupted: no result was recorded for this tool call before the restart]"


class Serve(msgspec.Struct, frozen=True, kw_only=True):
    """Serve the next view, compacting first when it is due.

    Attributes:
        pending: Text about to be sent with the view (counted in the estimate).
        compact: Compact first when the estimate reaches the threshold (``False``:
            ``build_model_view``, which only serves).
        view: Serve and record a view (``False``: ``compact_if_needed``, which only compacts).
    """

    pending: str = ""
    compact: bool = True
    view: bool = True


class Compact(msgspec.Struct, frozen=True, kw_only=True):
    """Compact now, whatever the estimate.

    Attributes:
        trigger: ``manual``, ``prompt_too_long`` (a reactive retry) or ``threshold_exceeded``.
        focus: What the summary should keep (manual compaction).
        attempt: The reactive retry number, from 0.
        pending: Text about to be sent with the view.
    """

    trigger: Trigger = "manual"
    focus: str | None = None
    attempt: int = 0
    pending: str = ""


class Background(msgspec.Struct, frozen=True, kw_only=True):
    """Start a summary in the background when one is due (after an append or usage report).

    Attributes:
        timed: Prepare none that cannot be ready before the threshold at the session's pace
            (:func:`~ctxledger.domain.policy.ready_in_time`, a schema-4 Config or later).
            ``False`` replays a background start a log recorded, whatever the pace.
    """

    timed: bool = True


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


class Recover(msgspec.Struct, frozen=True, kw_only=True):
    """A session is activated after a restart: repair what the crash left open."""


class Adopt(msgspec.Struct, frozen=True, kw_only=True):
    """Record ``checkpoint``, made elsewhere, as the next one (a transcript being imported).

    Attributes:
        checkpoint: The checkpoint, as it was made; it must extend the active one.
        compaction_id: The id its ``CompactionStarted`` is to carry.
    """

    checkpoint: Checkpoint
    compaction_id: str


class Job(msgspec.Struct, frozen=True, kw_only=True):
    """A compaction waiting for its summary.

    Attributes:
        compaction_id: The id its ``CompactionStarted`` carries.
        plan: What to summarise (:func:`~ctxledger.domain.run_summarizer` runs it).
        request: The request that started it.
    """

    compaction_id: str
    plan: CompactionPlan
    request: Serve | Compact | Background

    @property
    def background(self) -> bool:
        """Whether the summary is prepared ahead of need (it changes no view when it arrives)."""
        return isinstance(self.request, Background)


class Summarized(msgspec.Struct, frozen=True, kw_only=True):
    """The summariser answered a job, or failed to.

    Attributes:
        job: The job.
        summary: The summary; None or "" when the summariser returned nothing, raised or timed
            out.
        detail: Why there is no summary (recorded on ``CompactionFailed``).
        waited_seconds: How long the caller waited for it (reported on the result).
        summarizer: Who wrote it (``describe_summarizer``), recorded with it; "" if unknown.
        seconds: The summariser's wall time, recorded with it.
    """

    job: Job
    summary: str | None
    detail: str = ""
    waited_seconds: float = 0.0
    summarizer: str = ""
    seconds: float = 0.0


Request = Serve | Compact | Background | Summarized | Recover | Adopt


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """What to record and what to answer.

    Attributes:
        events: Record these, in order, atomically; then fold them.
        view: The view to serve (it is the view of the state once ``events`` are folded).
        result: The outcome of the compaction part of the request, if it has one.
        job: A summary is needed: record ``events``, run the summariser for ``job.plan``, then
            decide :class:`Summarized`.
        wait_for: The id of a background compaction that is running: wait until its outcome
            (``SummaryPrepared`` or ``CompactionFailed``) is folded, then decide the same
            request again. Nothing is to be recorded now.
        error: The request fails: record ``events`` (if any), then raise this to the caller
            (:class:`~ctxledger.errors.BudgetExceededError`, or
            :class:`~ctxledger.errors.ContextOverflowError` when the floor of the view exceeds
            the window).
    """

    events: tuple[Event, ...] = ()
    view: ModelView | None = None
    result: CompactionResult | None = None
    job: Job | None = None
    wait_for: str | None = None
    error: CtxLedgerError | None = None


def served(view: ModelView, state: SessionState, tokenizer: Tokenizer) -> ViewServed:
    """Return the event that records ``state`` serving ``view`` (with the re-mask it makes, if
    any: :func:`~ctxledger.domain.remask_of`)."""
    return ViewServed(
        through_seq=view.through_seq,
        estimated_tokens=view.estimated_tokens,
        view_hash=view.view_hash,
        checkpoint_id=view.checkpoint_id,
        message_count=len(view.messages),
        view_chars=view_chars(view.messages),
        remask=remask_of(state, view, tokenizer=tokenizer),
    )


def decide(
    state: SessionState,
    request: Request,
    *,
    tokenizer: Tokenizer,
    new_id: Callable[[], str],
    now: Callable[[], float],
) -> Decision:
    """Decide what to record and serve for ``request`` on ``state`` (pure but for the ids).

    Args:
        state: The session, with every earlier decision's events folded.
        request: What is asked.
        tokenizer: Counts tokens.
        new_id: Returns a fresh id (for a compaction or a checkpoint).
        now: Returns the current unix time (recorded on checkpoints).

    Returns:
        The decision.

    Raises:
        ValueError: A :class:`Compact` request's trigger or attempt is invalid, a
            :class:`Summarized` job is stale (another checkpoint became active since it began),
            or an adopted checkpoint does not extend the active one.
    """
    tokenizer = session_tokenizer(state, tokenizer)
    if isinstance(request, Serve):
        if request.view:
            exhausted = over_budget(state)
            if exhausted is not None:
                return exhausted
        return _serve(state, request, tokenizer, new_id, now)
    if isinstance(request, Compact):
        prepared = usable_prepared(state) if request.trigger == "prompt_too_long" else None
        if prepared is not None and background_on(state.config):
            # The provider rejected the prompt: what the background prepared comes first.
            draft = draft_view(state, tokenizer=tokenizer, pending=request.pending)
            serve = Serve(pending=request.pending, view=False)
            checkpoint = _prepared_as_checkpoint(
                state, prepared, draft, tokenizer, "prompt_too_long"
            )
            return _activate(state, serve, prepared, checkpoint, draft, tokenizer, new_id, now)
        outcome = plan_compaction(
            state,
            tokenizer=tokenizer,
            trigger=request.trigger,
            pending=request.pending,
            focus=request.focus,
            attempt=request.attempt,
        )
        return _start(outcome, request, new_id)
    if isinstance(request, Summarized):
        return _summarized(state, request, tokenizer, new_id, now)
    if isinstance(request, Background):
        return _background(state, request, tokenizer, new_id, now)
    if isinstance(request, Adopt):
        return _adopt(state, request)
    return _recover(state)


def over_budget(state: SessionState) -> Decision | None:
    """The refusal to serve once the session's tokens reached ``Config.max_total_tokens``.

    ``BudgetExhausted`` is recorded the first time for a cap; a Config with a higher cap (or 0)
    lets the session go on. None while the session is under its cap.
    """
    cap = state.config.max_total_tokens
    total = state.accounting.totals.total_tokens
    if cap <= 0 or total < cap:
        return None
    events: tuple[Event, ...] = ()
    if state.accounting.exhausted_cap != cap:
        events = (BudgetExhausted(cap=cap, total=total),)
    return Decision(events=events, error=BudgetExceededError(state.session_id, cap, total))


def background_estimate(state: SessionState, *, tokenizer: Tokenizer) -> int:
    """The estimate a background compaction is measured against (see :class:`Background`).

    That is the current view's, or, while a prepared summary may still be activated, the view
    that summary would give: a new background compaction is due once that one no longer
    absorbs the growth.
    """
    prepared = usable_prepared(state)
    checkpoint = as_activated(state, prepared, tokenizer) if prepared is not None else None
    return draft_view(state, tokenizer=tokenizer, checkpoint=checkpoint).estimated_tokens


def extension_due(state: SessionState, tokenizer: Tokenizer, estimate: int) -> bool:
    """Whether the usable prepared summary's delta should be prepared now
    (:func:`ctxledger.domain.policy.extend_due`), ``estimate`` being the view's now; ``True``
    when nothing prepared may be activated."""
    prepared = usable_prepared(state)
    if prepared is None:
        return True
    activated = draft_view(
        state, tokenizer=tokenizer, checkpoint=as_activated(state, prepared, tokenizer)
    ).estimated_tokens
    return extend_due(marks(state), activated, estimate)


def as_activated(
    state: SessionState, prepared: SummaryPrepared, tokenizer: Tokenizer
) -> Checkpoint:
    """The checkpoint a prepared summary stands for, measured as its activation would make it:
    with its fact block. Without the block, the background would think a prepared summary still
    absorbs the growth when, at the threshold, the view it gives lies above the target by up to
    the block's room, and the agent then waits for a summary made at the threshold. Where the
    block gives way (:func:`block_gives_way`), the activation shortens it as far as absorbing
    needs, so the summary absorbs while it does without a block: it is measured so."""
    fact_chars = 0 if block_gives_way(state.config) else prepared.fact_chars
    return finish_checkpoint(
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


# --- the requests ------------------------------------------------------------------------------


def _serve(
    state: SessionState,
    request: Serve,
    tokenizer: Tokenizer,
    new_id: Callable[[], str],
    now: Callable[[], float],
) -> Decision:
    draft = draft_view(state, tokenizer=tokenizer, pending=request.pending)
    result: CompactionResult | None = None
    if request.compact:
        due = should_compact(marks(state), draft.estimated_tokens)
        if due and background_on(state.config) and state.last_seq >= 3:
            early = _use_background(state, request, draft, tokenizer, new_id, now)
            if early is not None:
                return early
        outcome = plan_compaction(
            state, tokenizer=tokenizer, trigger="threshold_exceeded", pending=request.pending,
            draft=draft,
        )  # fmt: skip
        if isinstance(outcome, CompactionPlan):
            return _start(outcome, request, new_id)
        result = outcome
        if state.config.legacy:
            overflow = _floor_overflow(state, result)
            if overflow is not None and request.view:
                return Decision(result=result, error=overflow)
    if not request.view:
        return Decision(result=result)
    if not state.config.legacy:
        floor = result.floor_tokens if result is not None else 0
        refused = overflow_error(state, draft, floor)
        if refused is not None:
            return Decision(result=result, error=refused)
    view = draft.view()
    return Decision(events=(served(view, state, tokenizer),), view=view, result=result)


def _floor_overflow(state: SessionState, result: CompactionResult) -> ContextOverflowError | None:
    """The refusal of a one-mark Config (schema 3) to serve a view over the window that no
    compaction can shrink enough (only under its floor guard, as those releases did)."""
    window = state.config.context_window
    if (
        result.reason != "floor_above_threshold"
        or result.floor_tokens < window
        or result.estimated_tokens <= window  # the view fits as it is
    ):
        return None
    return ContextOverflowError(
        f"session {state.session_id!r}: the view needs {result.estimated_tokens:,} tokens and "
        f"the part no compaction can shrink (system messages, pins, the newest step) alone "
        f"needs {result.floor_tokens:,}, which does not fit the window of "
        f"{window:,} tokens; shorten the system prompt or the pins, or use a larger window"
    )


def _use_background(
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
    if prepared is not None:
        checkpoint = _prepared_as_checkpoint(
            state, prepared, draft, tokenizer, "threshold_exceeded"
        )
        after = draft_view(
            state, tokenizer=tokenizer, pending=request.pending, checkpoint=checkpoint
        )
        if absorbs(marks(state), after.estimated_tokens):
            return _activate(state, request, prepared, checkpoint, draft, tokenizer, new_id, now)
        if block_gives_way(state.config):
            shorter = _absorbing(state, prepared, checkpoint, draft, request.pending, tokenizer)
            if shorter is not None:
                return _activate(state, request, prepared, shorter, draft, tokenizer, new_id, now)
    running = state.background
    if running is not None and running_extends(state, running.compaction_id, active):
        return Decision(wait_for=running.compaction_id)
    if prepared is None or checkpoint is None:
        return None
    # The history grew past what the prepared cut absorbs: summarise only what lies between
    # that cut and a new one, with the prepared summary as the previous summary.
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
        return _start(outcome, request, new_id)
    if after.estimated_tokens >= state.config.context_window:
        # The prepared view would not fit the window (its fact block included): the foreground
        # path compacts from the active checkpoint towards the window instead.
        return None
    # No further cut is possible: the prepared one is still the best there is.
    return _activate(state, request, prepared, checkpoint, draft, tokenizer, new_id, now)


def running_extends(state: SessionState, compaction_id: str, active: Checkpoint | None) -> bool:
    """Whether background compaction ``compaction_id`` was planned on the active checkpoint."""
    running = state.background
    if running is None or running.compaction_id != compaction_id:
        return False
    # A background compaction planned before the active checkpoint was made cuts no further
    # than it (or extends a checkpoint that is gone): it cannot help.
    base = active.retain_from_seq if active else state.cleared_through + 1
    return running.retain_from_seq > base


def _prepared_as_checkpoint(
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
        checkpoint = _prepared_as_checkpoint(
            state, prepared, draft, tokenizer, "threshold_exceeded", fact_chars=room
        )
    return None


def _activate(
    state: SessionState,
    request: Serve,
    prepared: SummaryPrepared,
    checkpoint: Checkpoint,
    draft: Draft,
    tokenizer: Tokenizer,
    new_id: Callable[[], str],
    now: Callable[[], float],
) -> Decision:
    checkpoint = msgspec.structs.replace(checkpoint, id=new_id(), created_at=now())
    after = draft_view(state, tokenizer=tokenizer, pending=request.pending, checkpoint=checkpoint)
    base = state.active_checkpoint
    start = base.retain_from_seq if base else state.cleared_through + 1
    covered = state.history[start - 1 : prepared.retain_from_seq - 1]
    result = CompactionResult(
        compacted=True,
        reason="compacted",
        checkpoint_id=checkpoint.id,
        estimated_tokens=after.estimated_tokens,
        threshold=marks(state).threshold,
        retain_from_seq=checkpoint.retain_from_seq,
        messages_compacted=sum(
            1 for m in covered if not state.is_head(m) and not state.is_withdrawn(m.seq or 0)
        ),
        tokens_before=draft.estimated_tokens,
        prepared=True,
    )
    created = CheckpointCreated(
        compaction_id=prepared.compaction_id, checkpoint=checkpoint, prepared=True
    )
    events: tuple[Event, ...] = (created,)
    if not request.view:
        return Decision(events=events, result=result)
    view = after.view()
    return Decision(events=(*events, served(view, state, tokenizer)), view=view, result=result)


def _start(
    outcome: CompactionPlan | CompactionResult,
    request: Serve | Compact | Background,
    new_id: Callable[[], str],
) -> Decision:
    if not isinstance(outcome, CompactionPlan):
        return Decision(result=outcome)
    job = Job(compaction_id=new_id(), plan=outcome, request=request)
    started = outcome.started(job.compaction_id, background=job.background)
    return Decision(events=(started,), job=job)


def _summarized(
    state: SessionState,
    request: Summarized,
    tokenizer: Tokenizer,
    new_id: Callable[[], str],
    now: Callable[[], float],
) -> Decision:
    job, plan = request.job, request.job.plan
    if job.background:
        if not request.summary:
            failed = CompactionFailed(
                compaction_id=job.compaction_id, detail=request.detail, background=True
            )
            return Decision(events=(failed,))
        prepared = SummaryPrepared(
            compaction_id=job.compaction_id,
            retain_from_seq=plan.retain_from_seq,
            covers_through_seq=plan.covers_through_seq,
            summary=request.summary[: plan.max_chars],
            input_hash=plan.input_hash,
            previous_checkpoint_id=plan.previous_checkpoint_id,
            max_chars=plan.max_chars,
            fact_chars=plan.fact_chars,
            summarizer=request.summarizer,
            summary_seconds=request.seconds,
            input_chars=plan.input_chars,
            summarizer_calls=len(plan.chunks()),
        )
        return Decision(events=(prepared,))
    origin = job.request
    assert not isinstance(origin, Background)  # a background job returned above
    pending = origin.pending
    serve = isinstance(origin, Serve) and origin.view
    if not request.summary:
        failed = CompactionFailed(compaction_id=job.compaction_id, detail=request.detail)
        result = msgspec.structs.replace(
            fail_compaction(plan), waited_seconds=request.waited_seconds
        )
        if not serve:
            return Decision(events=(failed,), result=result)
        # The failure changes no view: the one served is the current one, if it fits.
        draft = draft_view(state, tokenizer=tokenizer, pending=pending)
        refused = None if state.config.legacy else overflow_error(state, draft)
        if refused is not None:
            return Decision(events=(failed,), result=result, error=refused)
        view = draft.view()
        return Decision(events=(failed, served(view, state, tokenizer)), view=view, result=result)
    checkpoint, result = complete_compaction(
        state,
        plan,
        request.summary,
        checkpoint_id=new_id(),
        created_at=now(),
        tokenizer=tokenizer,
        summarizer=request.summarizer,
        summary_seconds=request.seconds,
    )
    result = msgspec.structs.replace(result, waited_seconds=request.waited_seconds)
    created = CheckpointCreated(compaction_id=job.compaction_id, checkpoint=checkpoint)
    if not serve:
        return Decision(events=(created,), result=result)
    view = draft_view(state, tokenizer=tokenizer, pending=pending, checkpoint=checkpoint).view()
    return Decision(events=(created, served(view, state, tokenizer)), view=view, result=result)


def _background(
    state: SessionState,
    request: Background,
    tokenizer: Tokenizer,
    new_id: Callable[[], str],
    now: Callable[[], float],
) -> Decision:
    if (
        not background_on(state.config)
        or state.background is not None
        or state.last_seq < 3
        or state.last_seq < state.background_retry_seq
    ):
        return Decision()
    in_force = marks(state)
    draft = draft_view(state, tokenizer=tokenizer)
    if not prepare_due(in_force, draft.estimated_tokens):
        return Decision()
    prepared = usable_prepared(state)
    if prepared is None and request.timed and not ready_before_threshold(state, draft, now()):
        return Decision()
    if prepared is not None:
        under = draft_view(
            state, tokenizer=tokenizer, checkpoint=as_activated(state, prepared, tokenizer)
        )
        if not extend_due(in_force, under.estimated_tokens, draft.estimated_tokens):
            return Decision()  # what is prepared will absorb the growth
        outcome = plan_compaction(
            state, tokenizer=tokenizer, prepared=prepared, draft=under, force=True
        )
    else:
        outcome = plan_compaction(state, tokenizer=tokenizer, draft=draft, force=True)
    if not isinstance(outcome, CompactionPlan):
        return Decision()
    return _start(outcome, request, new_id)


def _adopt(state: SessionState, request: Adopt) -> Decision:
    checkpoint = request.checkpoint
    active = state.active_checkpoint
    if checkpoint.previous_checkpoint_id != (active.id if active else None):
        raise ValueError(
            f"checkpoint {checkpoint.id!r} extends {checkpoint.previous_checkpoint_id!r}, but "
            f"{active.id if active else None!r} is active"
        )
    started = CompactionStarted(
        compaction_id=request.compaction_id,
        reason=checkpoint.reason,
        retain_from_seq=checkpoint.retain_from_seq,
        covers_through_seq=checkpoint.covers_through_seq,
        estimated_tokens=checkpoint.tokens_before,
        focus=checkpoint.focus,
    )
    created = CheckpointCreated(compaction_id=request.compaction_id, checkpoint=checkpoint)
    return Decision(events=(started, created))


def _recover(state: SessionState) -> Decision:
    events: list[Event] = []
    open_calls = list(state.open_tool_calls().values())
    if open_calls:
        synthetic = state.check_append(
            [
                Message(
                    role="tool",
                    content=INTERRUPTED_RESULT,
                    tool_call_id=call.id,
                    name=call.name,
                    metadata={"synthetic": "interrupted"},
                )
                for call in open_calls
            ]
        )
        events.extend(ToolResultSynthesized(message=message) for message in synthetic)
    if state.background is not None:
        # Its summariser died with the process: record that, so a new one may start at once.
        events.append(
            CompactionFailed(
                compaction_id=state.background.compaction_id,
                reason="interrupted",
                detail="the process stopped before the background summary was recorded",
                background=True,
            )
        )
    return Decision(events=tuple(events))
