"""The :class:`Checkpoint`: a summary of old rounds plus where the raw tail of the view starts;
and a :class:`Remask`: old tool results masked anew in a served view."""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = ["Checkpoint", "CheckpointReason", "Remask"]

#: Why a checkpoint was made.
CheckpointReason = Literal["threshold_exceeded", "prompt_too_long", "manual"]


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A compaction result: history before ``retain_from_seq`` is shown as ``summary``.

    Checkpoints never alter history; the newest one is the active one.

    Attributes:
        id: Unique id of the checkpoint.
        summary: The summary text shown in place of the covered messages.
        retain_from_seq: The first message seq shown verbatim after the summary (a seq, never a
            list index).
        covers_through_seq: The last message seq the summary covers (``retain_from_seq - 1``
            unless the cut left nothing to retain).
        reason: ``threshold_exceeded``, ``prompt_too_long`` or ``manual``.
        focus: The focus text of a manual compaction, if any.
        created_at: Unix time at which the checkpoint was made (from the host's clock).
        previous_checkpoint_id: The checkpoint this one extends incrementally, if any.
        tokens_before: Estimated view tokens before the compaction.
        tokens_after: Estimated view tokens after it.
        input_hash: Content address of the summariser's input (covered messages, previous summary
            and focus), so that what-if replays can reuse a summary for an identical input.
        facts: The "facts from compacted history" block shown after the summary (see
            ``Config.fact_index_chars`` and :mod:`ctxledger.domain.facts`); ``""`` for none, and
            for every checkpoint recorded before the block existed.
        summarizer: Who wrote the summary: the summariser's class, and its model where it has
            one (``OpenAIChatSummarizer:gpt-4o-mini``); ``""`` when unknown.
        summary_seconds: Wall time of the summariser call(s), in seconds; 0.0 when unknown.
        input_chars: Characters the summariser was given (covered messages, previous summary and
            focus); 0 when unknown.
        summarizer_calls: Summariser calls made (one per chunk); 0 when unknown.
        prefix_kept_tokens: Estimated tokens at the head of the new view that the view before
            it shared (system messages and pins, before the summary): the provider's prompt
            cache still serves them on the next call, while the rest of the view is written to
            the cache anew. With ``tokens_before`` and ``tokens_after`` it gives the
            checkpoint's effect on the next calls' cost
            (:meth:`ctxledger.Pricing.compaction_effect`). 0 when unknown (checkpoints recorded
            before the field existed).
    """

    id: str
    summary: str
    retain_from_seq: int
    covers_through_seq: int
    reason: CheckpointReason
    focus: str | None = None
    created_at: float = 0.0
    previous_checkpoint_id: str | None = None
    tokens_before: int = 0
    tokens_after: int = 0
    input_hash: str = ""
    facts: str = ""
    summarizer: str = ""
    summary_seconds: float = 0.0
    input_chars: int = 0
    summarizer_calls: int = 0
    prefix_kept_tokens: int = 0

    @property
    def tokens_saved(self) -> int:
        """Estimated tokens each later call sends fewer: ``tokens_before - tokens_after``."""
        return self.tokens_before - self.tokens_after

    @property
    def output_chars(self) -> int:
        """Characters of the summary (the summariser's output, as recorded)."""
        return len(self.summary)


class Remask(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Old tool results a served view masks that the session's previous view showed, and what
    that costs or saves on the next calls.

    Micro masking moves its boundary in batches (``Config.micro_batch``, and under
    ``Config.min_compaction_gain_tokens`` only when the batch saves enough); when it moves, the
    view is rewritten from the first newly masked result on, so the provider's prompt cache
    serves only the part before it on the next call. Recorded on ``ViewServed.remask`` (None
    when the boundary did not move since the previous view of the same checkpoint, and in logs
    written before the field existed). With ``tokens_before``, ``tokens_after`` and
    ``prefix_kept_tokens`` it prices like a checkpoint
    (:meth:`ctxledger.Pricing.compaction_effect`).

    Attributes:
        results: Tool results newly shown masked.
        first_seq: The seq of the first of them: the cached prefix ends before it.
        tokens_before: Estimated tokens of the view had those results been shown as before.
        tokens_after: Estimated tokens of the view served.
        prefix_kept_tokens: Estimated tokens of the view before the first of them (the part the
            prompt cache still serves).
    """

    results: int
    first_seq: int
    tokens_before: int
    tokens_after: int
    prefix_kept_tokens: int

    @property
    def tokens_saved(self) -> int:
        """Estimated tokens each later call sends fewer: ``tokens_before - tokens_after``."""
        return self.tokens_before - self.tokens_after
