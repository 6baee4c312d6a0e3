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

from ctxledger.domain._decide_background import (
    activate,
    background_estimate,
    block_gives_way,
    decide_background,
    extension_due,
    prepared_as_checkpoint,
    usable_prepared,
    use_background,
)
from ctxledger.domain._decide_background import as_activated as as_activated
from ctxledger.domain._decide_background import running_extends as running_extends
from ctxledger.domain._decide_requests import (
    Adopt,
    Background,
    Compact,
    Decision,
    Job,
    Recover,
    Request,
    Serve,
    Summarized,
    served,
    start_job,
)
from ctxledger.domain.calibration import session_tokenizer
from ctxledger.domain.compaction import (
    CompactionPlan,
    CompactionResult,
    complete_compaction,
    fail_compaction,
)
from ctxledger.domain.policy import (
    background_on,
    marks,
    overflow_error,
    plan_compaction,
    ready_before_threshold,
    should_compact,
)
from ctxledger.domain.state import SessionState
from ctxledger.domain.tokenizer import Tokenizer
from ctxledger.domain.view import draft_view
from ctxledger.errors import BudgetExceededError, ContextOverflowError
from ctxledger.events.types import (
    BudgetExhausted,
    CheckpointCreated,
    CompactionFailed,
    CompactionStarted,
    Event,
    SummaryPrepared,
    ToolResultSynthesized,
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

#: Content of the tool result synthesised for a call that was never answered before a restart.
INTERRUPTED_RESULT = "[interrupted: no result was recorded for this tool call before the restart]"


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
            checkpoint = prepared_as_checkpoint(
                state, prepared, draft, tokenizer, "prompt_too_long"
            )
            return activate(state, serve, prepared, checkpoint, draft, tokenizer, new_id, now)
        outcome = plan_compaction(
            state,
            tokenizer=tokenizer,
            trigger=request.trigger,
            pending=request.pending,
            focus=request.focus,
            attempt=request.attempt,
        )
        return start_job(outcome, request, new_id)
    if isinstance(request, Summarized):
        return _summarized(state, request, tokenizer, new_id, now)
    if isinstance(request, Background):
        return decide_background(state, request, tokenizer, new_id, now)
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
            early = use_background(state, request, draft, tokenizer, new_id, now)
            if early is not None:
                return early
        outcome = plan_compaction(
            state, tokenizer=tokenizer, trigger="threshold_exceeded", pending=request.pending,
            draft=draft,
        )  # fmt: skip
        if isinstance(outcome, CompactionPlan):
            return start_job(outcome, request, new_id)
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
    view = draft.view(state)
    served_event = served(view, state, tokenizer, chars=draft.chars)
    return Decision(events=(served_event,), view=view, result=result)


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
            summarizer_calls=plan.summarizer_calls,
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
        view = draft.view(state)
        event = served(view, state, tokenizer, chars=draft.chars)
        return Decision(events=(failed, event), view=view, result=result)
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
    after = draft_view(state, tokenizer=tokenizer, pending=pending, checkpoint=checkpoint)
    view = after.view(state)
    event = served(view, state, tokenizer, chars=after.chars)
    return Decision(events=(created, event), view=view, result=result)


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
