"""Compaction: decide whether and where to cut, run the summariser, build the checkpoint.

The host's flow per step: :func:`plan_compaction` (pure; a :class:`CompactionResult` when nothing
should run, else a :class:`CompactionPlan`), :func:`run_summarizer` (the only call out, made off
the hot path), :func:`complete_compaction` (pure; the checkpoint to record). Outcome reasons are
checked in DESIGN §2 order: ``messages_not_enough``, ``checkpoint_current``, ``below_threshold``,
``rounds_not_enough``, ``no_progress``; then ``compacted`` or ``summary_unavailable``.
"""

from __future__ import annotations

import hashlib
from typing import Literal

import msgspec

from ctxledger.checkpoints import Checkpoint
from ctxledger.domain.budget import estimate_tokens, threshold_for
from ctxledger.domain.cuts import STEP_CUT_FILL, CutMeasure
from ctxledger.domain.limits import CHARS_PER_TOKEN, summary_chunk_chars, summary_max_chars
from ctxledger.domain.projection import assemble
from ctxledger.domain.render import truncate_text
from ctxledger.domain.state import SessionState
from ctxledger.domain.tokenizer import Tokenizer, message_chars
from ctxledger.domain.view import preview_view
from ctxledger.events.types import CompactionStarted
from ctxledger.messages import Message
from ctxledger.summarizers.base import Summarizer, SummaryRequest

__all__ = [
    "STEP_CUT_FILL",
    "TRIGGERS",
    "CompactionPlan",
    "CompactionResult",
    "Trigger",
    "complete_compaction",
    "fail_compaction",
    "plan_compaction",
    "run_summarizer",
]

Trigger = Literal["threshold_exceeded", "manual", "prompt_too_long"]
#: The triggers :func:`plan_compaction` accepts.
TRIGGERS: tuple[str, ...] = ("threshold_exceeded", "manual", "prompt_too_long")

_hash_encoder = msgspec.msgpack.Encoder(order="deterministic")


class CompactionResult(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of a compaction request.

    Attributes:
        compacted: Whether a new checkpoint was made.
        reason: ``compacted``, ``summary_unavailable`` or why none was attempted
            (``messages_not_enough``, ``checkpoint_current``, ``below_threshold``,
            ``rounds_not_enough``, ``no_progress``).
        checkpoint_id: The new checkpoint's id, or the active one's when nothing was made.
        estimated_tokens: The estimate after the compaction (before, when nothing was made).
        threshold: The threshold in force.
        retain_from_seq: The new cut, or the active checkpoint's.
        messages_compacted: Messages newly covered by the summary.
        tokens_before: The estimate before the compaction.
    """

    compacted: bool
    reason: str
    checkpoint_id: str | None
    estimated_tokens: int
    threshold: int
    retain_from_seq: int | None
    messages_compacted: int
    tokens_before: int = 0


class CompactionPlan(msgspec.Struct, frozen=True, kw_only=True):
    """A planned compaction, ready for the summariser.

    Attributes:
        reason: The trigger (``threshold_exceeded``, ``manual`` or ``prompt_too_long``).
        retain_from_seq: The cut: the first seq kept raw.
        covers_through_seq: The last seq the summary will cover (``retain_from_seq - 1``).
        messages: The newly covered messages: after the active checkpoint's coverage (or the
            last clear) and before the cut, head system messages and retracted ones excluded.
            Pinned messages and the kept first request (``Config.keep_first_request``) are
            included although the view still shows them: a summary must stand alone once the
            Config that keeps the request changes, and the kept request may be shown truncated.
        previous_summary: The active checkpoint's summary, merged incrementally.
        previous_checkpoint_id: The active checkpoint's id.
        focus: What to keep, for a manual compaction.
        max_chars: Room reserved for the summary (``SummaryRequest.max_chars``).
        chunk_chars: Largest summariser input per call.
        estimated_tokens: The estimate before the compaction.
        threshold: The threshold in force.
        target_tokens: The view must end up below this (the threshold, or less on reactive
            retries) unless the retained minimum alone is larger.
        planned_tokens: Upper bound of the view's tokens after the compaction, with a summary of
            ``max_chars`` characters.
        attempt: Reactive retry number.
        step_level: Whether the cut lies inside the retained rounds (at a step boundary).
        input_hash: Content address of the summariser's input.
    """

    reason: Trigger
    retain_from_seq: int
    covers_through_seq: int
    messages: tuple[Message, ...]
    previous_summary: str | None
    previous_checkpoint_id: str | None
    focus: str | None
    max_chars: int
    chunk_chars: int
    estimated_tokens: int
    threshold: int
    target_tokens: int
    planned_tokens: int
    attempt: int = 0
    step_level: bool = False
    input_hash: str = ""

    @property
    def trigger(self) -> Trigger:
        """Alias of :attr:`reason`."""
        return self.reason

    def started(self, compaction_id: str) -> CompactionStarted:
        """Return the ``CompactionStarted`` event that records this plan."""
        return CompactionStarted(
            compaction_id=compaction_id,
            reason=self.reason,
            retain_from_seq=self.retain_from_seq,
            covers_through_seq=self.covers_through_seq,
            estimated_tokens=self.estimated_tokens,
            focus=self.focus,
            attempt=self.attempt,
        )

    def chunks(self) -> list[tuple[Message, ...]]:
        """Split :attr:`messages` into summariser inputs of at most :attr:`chunk_chars`.

        Room for the running summary and the focus is kept in every chunk; a single message
        larger than a chunk is truncated (head, tail and a marker naming its seq).
        """
        capacity = max(
            self.chunk_chars - self.max_chars - len(self.focus or ""), self.chunk_chars // 2, 1
        )
        chunks: list[tuple[Message, ...]] = []
        current: list[Message] = []
        size = 0
        for message in self.messages:
            chars = message_chars(message)
            if chars > capacity:
                limit = max(capacity - (chars - len(message.content)), 1)
                message = msgspec.structs.replace(
                    message, content=truncate_text(message.content, limit, message.seq or 0)
                )
                chars = message_chars(message)
            if current and size + chars > capacity:
                chunks.append(tuple(current))
                current, size = [], 0
            current.append(message)
            size += chars
        if current:
            chunks.append(tuple(current))
        return chunks


def plan_compaction(
    state: SessionState,
    *,
    tokenizer: Tokenizer,
    trigger: Trigger = "threshold_exceeded",
    pending: str = "",
    focus: str | None = None,
    attempt: int = 0,
) -> CompactionPlan | CompactionResult:
    """Decide whether to compact and where to cut.

    Rounds: the cut keeps the last ``min_retain_rounds`` rounds raw. When those rounds alone do
    not fit below the target (measured by the tokenizer over the view they would make, never by
    the provider's usage figure), the cut moves to a step boundary inside them. ``manual`` and
    ``prompt_too_long`` skip the threshold check. ``prompt_too_long`` also skips
    ``checkpoint_current`` (the provider just rejected the current view) and cuts harder on each
    ``attempt``: it keeps ``min_retain_rounds >> (attempt + 1)`` rounds and targets
    ``min(threshold, view tokens) >> (attempt + 1)`` tokens.

    Args:
        state: The session.
        tokenizer: Counts tokens.
        trigger: Why compaction is considered.
        pending: Text about to be sent with the view.
        focus: What the summary should keep (manual compaction).
        attempt: Reactive retry number, from 0.

    Returns:
        A plan, or a not-compacted result with the reason.

    Raises:
        ValueError: ``trigger`` is unknown or ``attempt`` is negative.
    """
    if trigger not in TRIGGERS:
        raise ValueError(f"unknown compaction trigger {trigger!r}; expected one of {TRIGGERS}")
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    config = state.config
    active = state.active_checkpoint
    view = assemble(state, active)
    estimate = estimate_tokens(state, tokenizer=tokenizer, pending=pending, view_messages=view)
    threshold = threshold_for(state)

    def skip(reason: str) -> CompactionResult:
        return CompactionResult(
            compacted=False,
            reason=reason,
            checkpoint_id=active.id if active else None,
            estimated_tokens=estimate,
            threshold=threshold,
            retain_from_seq=active.retain_from_seq if active else None,
            messages_compacted=0,
            tokens_before=estimate,
        )

    if state.last_seq < 3:
        return skip("messages_not_enough")
    if (
        active is not None
        and trigger != "prompt_too_long"
        and state.checkpoint_seq == state.last_seq
    ):
        return skip("checkpoint_current")
    if trigger == "threshold_exceeded" and estimate < threshold:
        return skip("below_threshold")

    keep_rounds = config.min_retain_rounds
    target = threshold
    max_chars = summary_max_chars(config)
    if trigger == "prompt_too_long":
        keep_rounds >>= attempt + 1
        target = max(1, min(threshold, tokenizer.count_messages(view)) >> (attempt + 1))
        # The summary may take at most a quarter of a shrunken target.
        max_chars = max(1, min(max_chars, target * CHARS_PER_TOKEN // 4))
    cutter = CutMeasure(state, tokenizer, trigger, max_chars, pending)
    room = target - 1  # equality compacts, so the view must end strictly below the target

    base = active.retain_from_seq if active else state.cleared_through + 1
    round_cut: int | None = None
    if keep_rounds == 0:
        round_cut = state.boundary_at_or_before(state.last_seq + 1)
    elif len(state.user_seqs) > keep_rounds:
        round_cut = state.boundary_at_or_before(state.user_seqs[-keep_rounds])
    lower = max(round_cut, base) if round_cut is not None else base

    step_level = False
    cut: int | None
    if cutter.exact(lower) <= room:
        if round_cut is None:
            return skip("rounds_not_enough")
        cut = lower
    else:
        fill = 1.0 if trigger == "prompt_too_long" else STEP_CUT_FILL
        cut = cutter.step_cut(max(lower, base + 1), room, fill)
        step_level = cut is not None and (round_cut is None or cut > round_cut)
    if cut is None or cut <= base:
        return skip("no_progress")
    covered = tuple(
        m
        for m in state.history[base - 1 : cut - 1]
        if not state.is_head(m) and m.seq not in state.retracted
    )
    if not covered:
        return skip("no_progress")

    previous = active.summary if active else None
    return CompactionPlan(
        reason=trigger,
        retain_from_seq=cut,
        covers_through_seq=cut - 1,
        messages=covered,
        previous_summary=previous,
        previous_checkpoint_id=active.id if active else None,
        focus=focus,
        max_chars=max_chars,
        chunk_chars=summary_chunk_chars(config),
        estimated_tokens=estimate,
        threshold=threshold,
        target_tokens=target,
        planned_tokens=cutter.exact(cut),
        attempt=attempt,
        step_level=step_level,
        input_hash=_input_hash(covered, previous, focus, max_chars),
    )


def _input_hash(
    messages: tuple[Message, ...], previous: str | None, focus: str | None, max_chars: int
) -> str:
    payload = _hash_encoder.encode((messages, previous, focus, max_chars))
    return hashlib.sha256(payload).hexdigest()


def run_summarizer(plan: CompactionPlan, summarizer: Summarizer) -> str | None:
    """Summarise ``plan``'s messages incrementally, in chunks when they exceed the budget.

    Chunk 1 is summarised with the previous summary, chunk 2 with that result as the previous
    summary, and so on. Exceptions from the summariser propagate (the caller records
    ``summary_unavailable``).

    Returns:
        The summary cut to ``plan.max_chars``, or ``None`` when any call returned None or "".

    Raises:
        TypeError: The summariser returned something other than a string or None.
    """
    running = plan.previous_summary
    for chunk in plan.chunks():
        answer = summarizer(
            SummaryRequest(
                messages=chunk,
                previous_summary=running,
                focus=plan.focus,
                max_chars=plan.max_chars,
            )
        )
        if answer is None or answer == "":
            return None
        if not isinstance(answer, str):
            raise TypeError(f"a summariser must return str or None, not {type(answer).__name__}")
        running = answer[: plan.max_chars]
    return running


def complete_compaction(
    state: SessionState,
    plan: CompactionPlan,
    summary: str,
    *,
    checkpoint_id: str,
    created_at: float,
    tokenizer: Tokenizer,
) -> tuple[Checkpoint, CompactionResult]:
    """Build the checkpoint for a finished plan (pure; the caller records it).

    Args:
        state: The session; messages appended since the plan are fine, a newer checkpoint is not.
        plan: The plan the summary answers.
        summary: The summariser's answer (cut to ``plan.max_chars``).
        checkpoint_id: Id of the new checkpoint.
        created_at: Unix time from the host's clock.
        tokenizer: Counts the tokens of the resulting view.

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
    checkpoint = Checkpoint(
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
    )
    after = preview_view(state, checkpoint, tokenizer=tokenizer).estimated_tokens
    checkpoint = msgspec.structs.replace(checkpoint, tokens_after=after)
    return checkpoint, CompactionResult(
        compacted=True,
        reason="compacted",
        checkpoint_id=checkpoint_id,
        estimated_tokens=after,
        threshold=plan.threshold,
        retain_from_seq=plan.retain_from_seq,
        messages_compacted=len(plan.messages),
        tokens_before=plan.estimated_tokens,
    )


def fail_compaction(plan: CompactionPlan, reason: str = "summary_unavailable") -> CompactionResult:
    """Return the not-compacted result of a plan whose summary did not arrive."""
    return CompactionResult(
        compacted=False,
        reason=reason,
        checkpoint_id=plan.previous_checkpoint_id,
        estimated_tokens=plan.estimated_tokens,
        threshold=plan.threshold,
        retain_from_seq=plan.retain_from_seq,
        messages_compacted=0,
        tokens_before=plan.estimated_tokens,
    )
