"""Compaction: the plan, the summariser's run and the checkpoint it makes.

The host's flow per step: :func:`ctxledger.domain.policy.plan_compaction` (pure; a
:class:`CompactionResult` when nothing should run, else a :class:`CompactionPlan`),
:func:`run_summarizer` (the only call out, made off the hot path), :func:`complete_compaction`
(pure; the checkpoint to record). Outcome reasons are checked in DESIGN §2 order:
``messages_not_enough``, ``checkpoint_current``, ``below_threshold``,
``floor_above_threshold``, ``rounds_not_enough``, ``no_progress``, ``gain_too_small`` (a
one-mark Config only); then ``compacted`` or ``summary_unavailable``. The plan and the result
are defined in ``_compaction_plan.py`` and importable from here.
"""

from __future__ import annotations

import msgspec

from ctxledger.checkpoints import Checkpoint
from ctxledger.config import SHARES
from ctxledger.domain._compaction_plan import (
    CompactionPlan,
    CompactionResult,
    arun_summarizer,
    fail_compaction,
    input_hash,
    run_summarizer,
)
from ctxledger.domain.cuts import STEP_CUT_FILL, TRIGGERS, Trigger
from ctxledger.domain.facts import block_candidates, fact_block
from ctxledger.domain.projection import kept_request_seq
from ctxledger.domain.state import SessionState
from ctxledger.domain.tokenizer import Tokenizer
from ctxledger.domain.view import Draft, draft_view
from ctxledger.events.types import SummaryPrepared
from ctxledger.messages import Message

__all__ = [
    "STEP_CUT_FILL",
    "TRIGGERS",
    "CompactionPlan",
    "CompactionResult",
    "Trigger",
    "arun_summarizer",
    "complete_compaction",
    "fail_compaction",
    "finish_checkpoint",
    "input_hash",
    "newly_covered",
    "prepared_checkpoint",
    "run_summarizer",
]


def prepared_checkpoint(prepared: SummaryPrepared) -> Checkpoint:
    """The checkpoint a prepared summary stands for, as planning and views measure it.

    Its id is the background compaction's; activating it (the background step of
    :func:`ctxledger.domain.decide.decide`) makes the real one.
    """
    return Checkpoint(
        id=prepared.compaction_id,
        summary=prepared.summary,
        retain_from_seq=prepared.retain_from_seq,
        covers_through_seq=prepared.covers_through_seq,
        reason="threshold_exceeded",
        previous_checkpoint_id=prepared.previous_checkpoint_id,
        input_hash=prepared.input_hash,
    )


def complete_compaction(
    state: SessionState,
    plan: CompactionPlan,
    summary: str,
    *,
    checkpoint_id: str,
    created_at: float,
    tokenizer: Tokenizer,
    summarizer: str = "",
    summary_seconds: float = 0.0,
) -> tuple[Checkpoint, CompactionResult]:
    """Build the checkpoint for a finished plan (pure; the caller records it).

    The checkpoint records the compaction's metadata (input size, calls, and what the caller
    measured: the summariser's name and wall time) and, when ``plan.fact_chars`` allows, its
    fact block (:func:`ctxledger.domain.facts.checkpoint_fact_block`).

    Args:
        state: The session; messages appended since the plan are fine, a newer checkpoint is not.
        plan: The plan the summary answers.
        summary: The summariser's answer (cut to ``plan.max_chars``).
        checkpoint_id: Id of the new checkpoint.
        created_at: Unix time from the host's clock.
        tokenizer: Counts the tokens of the resulting view.
        summarizer: Who wrote the summary (see
            :func:`ctxledger.summarizers.describe_summarizer`); "" when unknown.
        summary_seconds: Wall time of the summariser call(s); 0.0 when not measured.

    Returns:
        The checkpoint to record with ``CheckpointCreated`` and the ``compacted`` result.

    Raises:
        ValueError: The plan is stale: another checkpoint became active since it was made.
    """
    active = state.active_checkpoint
    if (active.id if active else None) != plan.previous_checkpoint_id:
        raise ValueError(
            f"stale compaction plan: it extends checkpoint {plan.previous_checkpoint_id!r} but "
            f"{active.id if active else None!r} is active"
        )
    checkpoint = finish_checkpoint(
        state,
        Checkpoint(
            id=checkpoint_id,
            summary=summary[: plan.max_chars],
            retain_from_seq=plan.retain_from_seq,
            covers_through_seq=plan.covers_through_seq,
            reason=plan.reason,
            focus=plan.focus,
            created_at=created_at,
            previous_checkpoint_id=plan.previous_checkpoint_id,
            tokens_before=plan.estimated_tokens,
            input_hash=plan.input_hash,
            summarizer=summarizer,
            summary_seconds=summary_seconds,
            input_chars=plan.input_chars,
            summarizer_calls=plan.summarizer_calls,
        ),
        fact_chars=plan.fact_chars,
        tokenizer=tokenizer,
    )
    after = checkpoint.tokens_after
    return checkpoint, CompactionResult(
        compacted=True,
        reason="compacted",
        checkpoint_id=checkpoint_id,
        estimated_tokens=after,
        threshold=plan.threshold,
        retain_from_seq=plan.retain_from_seq,
        messages_compacted=len(plan.covered),
        tokens_before=plan.estimated_tokens,
    )


def finish_checkpoint(
    state: SessionState, checkpoint: Checkpoint, *, fact_chars: int, tokenizer: Tokenizer
) -> Checkpoint:
    """Add to a new checkpoint what it records of the view it makes: the fact block, the tokens
    (see :func:`finished_with_draft`, which takes the same arguments)."""
    return finished_with_draft(state, checkpoint, fact_chars=fact_chars, tokenizer=tokenizer)[0]


def finished_with_draft(
    state: SessionState, checkpoint: Checkpoint, *, fact_chars: int, tokenizer: Tokenizer
) -> tuple[Checkpoint, Draft]:
    """:func:`finish_checkpoint`, and the draft of the view the finished checkpoint gives (what
    ``draft_view(state, tokenizer=tokenizer, checkpoint=finished)`` returns: it was measured on
    the way, and a caller that plans from it need not draft it again).

    Add to a new checkpoint what it records of the view it makes: the fact block, the tokens.

    The fact block (:func:`ctxledger.domain.facts.checkpoint_fact_block`, when ``fact_chars``
    allows) lists facts of every message the checkpoint newly covers, from the active
    checkpoint's cut to its own (a summary prepared in the background and the delta after it
    alike), with those the active checkpoint's block carried; ``tokens_after`` is the size of
    the view it gives, and ``prefix_kept_tokens`` the part of it before the summary (system
    messages and pins), which the previous view shared.

    Args:
        state: The session, before the checkpoint is recorded.
        checkpoint: The new checkpoint, without a block and ``tokens_after``.
        fact_chars: The block's room (0: no block).
        tokenizer: Counts the tokens of the resulting view.
    """
    if fact_chars:
        shares = SHARES.get(state.config.schema_version)
        group_paths = shares is not None and shares.group_paths
        # The blocks of one checkpoint tried at the threshold (shorter ones, until the view
        # absorbs the growth) choose from the same candidates: made once (see SessionState).
        key = (state.shown_epoch, state.last_seq, checkpoint, group_paths)
        memo = state.fact_memo
        if memo is None or memo[0] != key:
            covered = newly_covered(state, checkpoint.retain_from_seq)
            candidates = block_candidates(state, checkpoint, covered, group_paths=group_paths)
            memo = (key, (*candidates, {}))  # and which texts the view shows (fact_block)
            state.fact_memo = memo
        # The kept first request's lines may come last in the block (``Shares.request_last``):
        # the view shows its head and tail, and the marker names its seq (a recall away).
        kept = kept_request_seq(state, checkpoint.retain_from_seq)
        last = kept is not None and shares is not None and shares.request_last
        facts_in, shown, in_shown = memo[1]
        facts = fact_block(
            facts_in,
            shown,
            fact_chars,
            shown_in_part=(kept,) if last and kept is not None else (),
            group_paths=group_paths,
            shown_memo=in_shown,
        )
        checkpoint = msgspec.structs.replace(checkpoint, facts=facts)
    # Measured, not hashed: the view's hash is made when it is served.
    view = draft_view(state, tokenizer=tokenizer, checkpoint=checkpoint)
    config = state.config
    # A one-mark Config did this under its floor guard only; no view of this schema is over.
    fits = config.floor_guard or not config.legacy
    if fits and view.view_tokens > config.context_window:
        checkpoint = _fit_window(state, checkpoint, tokenizer)
        view = draft_view(state, tokenizer=tokenizer, checkpoint=checkpoint)
    head = next(
        (i for i, message in enumerate(view.messages) if message.role == "summary"),
        len(view.messages),
    )
    # What the next call still shares with the last one (system messages, pins): the provider's
    # prompt cache serves it; the rest of the new view is written to the cache anew.
    kept = tokenizer.count_messages(list(view.messages[:head]))
    finished = msgspec.structs.replace(
        checkpoint, tokens_after=view.estimated_tokens, prefix_kept_tokens=kept
    )
    # The view does not read the two counts: it is the finished checkpoint's view.
    return finished, view._replace(checkpoint=finished)


def newly_covered(state: SessionState, cut: int) -> list[Message]:
    """The messages a new checkpoint retaining from ``cut`` covers that the active one did not
    (from the active cut, or the last clear), head system messages and withdrawn ones left out.
    """
    active = state.active_checkpoint
    start = active.retain_from_seq if active is not None else state.cleared_through + 1
    messages = state.history[start - 1 : cut - 1]
    first_user = state.first_user_seq
    if (
        state.cleared_through < start
        and first_user is not None
        and first_user <= start
        and not any(start <= seq < cut for seq in state.retracted)
    ):
        return list(messages)  # none is withdrawn, none before the first user message
    return [
        message
        for message in messages
        if not state.is_head(message) and not state.is_withdrawn(message.seq or 0)
    ]


def _fit_window(state: SessionState, checkpoint: Checkpoint, tokenizer: Tokenizer) -> Checkpoint:
    """Shorten the fact block, then the summary, until the view fits the window, if it can.

    The planner reserves the summary's and the block's room by their characters; a tokenizer
    that counts more tokens for the text actually written (one per word of a terse summary,
    say) could leave the new view over the window although a cut with a shorter summary fits.
    Each text keeps its head, at the longest length that fits (binary search); when even empty
    texts would not fit, both are kept whole.
    """
    window = state.config.context_window

    def fits(candidate: Checkpoint) -> bool:  # measured, not hashed: a draft, not a view
        draft = draft_view(state, tokenizer=tokenizer, checkpoint=candidate)
        return draft.view_tokens <= window

    if not fits(msgspec.structs.replace(checkpoint, facts="", summary="")):
        return checkpoint  # over the window whatever the texts: keep them whole
    for field in ("facts", "summary"):
        text: str = getattr(checkpoint, field)
        if not text:
            continue
        shortest = msgspec.structs.replace(checkpoint, **{field: ""})
        if not fits(shortest):
            checkpoint = shortest
            continue
        good, bad = 0, len(text)  # text[:good] fits, text[:bad] does not
        while bad - good > 1:
            middle = (good + bad) // 2
            if fits(msgspec.structs.replace(checkpoint, **{field: text[:middle]})):
                good = middle
            else:
                bad = middle
        return msgspec.structs.replace(checkpoint, **{field: text[:good]})
    return checkpoint
