"""Compaction: the plan, the summariser's run and the checkpoint it makes.

The host's flow per step: :func:`ctxledger.domain.policy.plan_compaction` (pure; a
:class:`CompactionResult` when nothing should run, else a :class:`CompactionPlan`),
:func:`run_summarizer` (the only call out, made off the hot path), :func:`complete_compaction`
(pure; the checkpoint to record). Outcome reasons are checked in DESIGN §2 order:
``messages_not_enough``, ``checkpoint_current``, ``below_threshold``,
``floor_above_threshold``, ``rounds_not_enough``, ``no_progress``, ``gain_too_small`` (a
one-mark Config only); then ``compacted`` or ``summary_unavailable``.
"""

from __future__ import annotations

import hashlib

import msgspec

from ctxledger.checkpoints import Checkpoint
from ctxledger.config import SHARES
from ctxledger.domain.cuts import STEP_CUT_FILL, TRIGGERS, Trigger
from ctxledger.domain.facts import checkpoint_fact_block
from ctxledger.domain.projection import kept_request_seq
from ctxledger.domain.render import truncate_text
from ctxledger.domain.state import SessionState
from ctxledger.domain.summary import AsyncSummarizer, Summarizer, SummaryRequest
from ctxledger.domain.tokenizer import Tokenizer, message_chars
from ctxledger.domain.view import draft_view, preview_view
from ctxledger.events.types import CompactionStarted, SummaryPrepared
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
    "prepared_checkpoint",
    "run_summarizer",
]

_hash_encoder = msgspec.msgpack.Encoder(order="deterministic")


class CompactionResult(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of a compaction request.

    Attributes:
        compacted: Whether a new checkpoint was made.
        reason: ``compacted``, ``summary_unavailable`` or why none was attempted, in the
            order checked: ``messages_not_enough`` (fewer than 3 messages),
            ``checkpoint_current`` (nothing appended since the active checkpoint and the view's
            messages fit the window), ``below_threshold``,
            ``floor_above_threshold`` (what no compaction can shrink is above the threshold and
            the view still fits the window: ``Config.floor_guard``), ``rounds_not_enough``,
            ``no_progress``, ``gain_too_small`` (the cut would save fewer tokens than
            ``Config.min_compaction_gain_tokens`` and the view still fits the window).
        checkpoint_id: The new checkpoint's id, or the active one's when nothing was made.
        estimated_tokens: The estimate after the compaction (before, when nothing was made).
        threshold: The threshold in force.
        retain_from_seq: The new cut, or the active checkpoint's.
        messages_compacted: Messages newly covered by the summary.
        tokens_before: The estimate before the compaction.
        prepared: The checkpoint came from a summary prepared in the background (no summariser
            ran for it in this call).
        waited_seconds: How long the caller waited on a summariser in this call (0 when the
            summary was prepared in time, or none was needed).
        floor_tokens: The part of the view no compaction can shrink (system messages, pins,
            the summary's reserved room, the newest step), when it was measured (the floor
            guard); when even an empty summary leaves no room (the caller then raises
            :class:`~ctxledger.errors.ContextOverflowError`), that part without the summary's
            room; 0 otherwise.
        planned_tokens: The view the planned cut would give (with the summary's room), when a
            cut was planned; 0 otherwise.
    """

    compacted: bool
    reason: str
    checkpoint_id: str | None
    estimated_tokens: int
    threshold: int
    retain_from_seq: int | None
    messages_compacted: int
    tokens_before: int = 0
    prepared: bool = False
    waited_seconds: float = 0.0
    floor_tokens: int = 0
    planned_tokens: int = 0


class CompactionPlan(msgspec.Struct, frozen=True, kw_only=True):
    """A planned compaction, ready for the summariser.

    Attributes:
        reason: The trigger (``threshold_exceeded``, ``manual`` or ``prompt_too_long``).
        retain_from_seq: The cut: the first seq kept raw.
        covers_through_seq: The last seq the summary will cover (``retain_from_seq - 1``).
        messages: The newly covered messages: after the active checkpoint's coverage (or the
            last clear) and before the cut, head system messages and retracted ones excluded,
            as the summariser is to see them (``Config.summary_result_chars``:
            :func:`~ctxledger.domain.digest.summary_input`).
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
        fact_chars: Room reserved for the checkpoint's fact block after the summary
            (``Config.fact_index_chars``; 0: no block).
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
    fact_chars: int = 0

    @property
    def input_chars(self) -> int:
        """Characters the summariser is given: the messages, the previous summary, the focus."""
        chars = sum(message_chars(message) for message in self.messages)
        return chars + len(self.previous_summary or "") + len(self.focus or "")

    def started(self, compaction_id: str, *, background: bool = False) -> CompactionStarted:
        """Return the ``CompactionStarted`` event that records this plan."""
        return CompactionStarted(
            compaction_id=compaction_id,
            reason=self.reason,
            retain_from_seq=self.retain_from_seq,
            covers_through_seq=self.covers_through_seq,
            estimated_tokens=self.estimated_tokens,
            focus=self.focus,
            attempt=self.attempt,
            background=background,
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


def prepared_checkpoint(prepared: SummaryPrepared) -> Checkpoint:
    """The checkpoint a prepared summary stands for, as planning and views measure it.

    Its id is the background compaction's; :func:`activate_prepared` makes the real one.
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


def input_hash(
    messages: tuple[Message, ...], previous: str | None, focus: str | None, max_chars: int
) -> str:
    """The content address of a summariser input (what a summary of it can be reused for)."""
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
    steps = _SummarySteps(plan)
    request = steps.first()
    while request is not None:
        request = steps.answer(summarizer(request))
    return steps.summary


async def arun_summarizer(plan: CompactionPlan, summarizer: AsyncSummarizer) -> str | None:
    """:func:`run_summarizer` for a summariser that is a coroutine function (awaited per chunk)."""
    steps = _SummarySteps(plan)
    request = steps.first()
    while request is not None:
        request = steps.answer(await summarizer(request))
    return steps.summary


class _SummarySteps:
    """The chunk-by-chunk protocol of :func:`run_summarizer`, apart from how a chunk is asked."""

    def __init__(self, plan: CompactionPlan) -> None:
        self._plan = plan
        self._chunks = iter(plan.chunks())
        self.summary: str | None = plan.previous_summary

    def first(self) -> SummaryRequest | None:
        return self._next()

    def answer(self, answer: object) -> SummaryRequest | None:
        """Take the summariser's answer to the last request; return the next request, if any."""
        if answer is None or answer == "":
            self.summary = None
            return None
        if not isinstance(answer, str):
            raise TypeError(f"a summariser must return str or None, not {type(answer).__name__}")
        self.summary = answer[: self._plan.max_chars]
        return self._next()

    def _next(self) -> SummaryRequest | None:
        chunk = next(self._chunks, None)
        if chunk is None:
            return None
        plan = self._plan
        return SummaryRequest(
            messages=chunk,
            previous_summary=self.summary,
            focus=plan.focus,
            max_chars=plan.max_chars,
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
            summarizer_calls=len(plan.chunks()),
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
        messages_compacted=len(plan.messages),
        tokens_before=plan.estimated_tokens,
    )


def finish_checkpoint(
    state: SessionState, checkpoint: Checkpoint, *, fact_chars: int, tokenizer: Tokenizer
) -> Checkpoint:
    """Add to a new checkpoint what it records of the view it makes: the fact block, the tokens.

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
        active = state.active_checkpoint
        start = active.retain_from_seq if active is not None else state.cleared_through + 1
        covered = [
            message
            for message in state.history[start - 1 : checkpoint.retain_from_seq - 1]
            if not state.is_head(message) and not state.is_withdrawn(message.seq or 0)
        ]
        # The kept first request's lines may come last in the block (``Shares.request_last``):
        # the view shows its head and tail, and the marker names its seq (a recall away).
        kept = kept_request_seq(state, checkpoint.retain_from_seq)
        shares = SHARES.get(state.config.schema_version)
        last = kept is not None and shares is not None and shares.request_last
        facts = checkpoint_fact_block(
            state,
            checkpoint,
            covered,
            fact_chars,
            shown_in_part=(kept,) if last and kept is not None else (),
            group_paths=shares is not None and shares.group_paths,
        )
        checkpoint = msgspec.structs.replace(checkpoint, facts=facts)
    view = preview_view(state, checkpoint, tokenizer=tokenizer)
    config = state.config
    # A one-mark Config did this under its floor guard only; no view of this schema is over.
    fits = config.floor_guard or not config.legacy
    if fits and view.view_tokens > config.context_window:
        checkpoint = _fit_window(state, checkpoint, tokenizer)
        view = preview_view(state, checkpoint, tokenizer=tokenizer)
    head = next(
        (i for i, message in enumerate(view.messages) if message.role == "summary"),
        len(view.messages),
    )
    # What the next call still shares with the last one (system messages, pins): the provider's
    # prompt cache serves it; the rest of the new view is written to the cache anew.
    kept = tokenizer.count_messages(list(view.messages[:head]))
    return msgspec.structs.replace(
        checkpoint, tokens_after=view.estimated_tokens, prefix_kept_tokens=kept
    )


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
