"""The pure heart of ctxledger: rounds, budget, compaction planning, masking and projection.

No threads and no I/O: given a session's events (folded into a :class:`SessionState`), decide
when to compact, plan the cut and build the model view. :func:`decide` is the one decision step
that the runtime, the testing driver, what-if and transcript import all call.
"""

from ctxledger.domain.adapters import to_anthropic, to_openai
from ctxledger.domain.audit import KindCount, LossReport, audit_checkpoint
from ctxledger.domain.budget import (
    DynamicThreshold,
    FixedThreshold,
    ThresholdPolicy,
    estimate_tokens,
    looks_failed,
    threshold_for,
)
from ctxledger.domain.compaction import (
    STEP_CUT_FILL,
    TRIGGERS,
    CompactionPlan,
    CompactionResult,
    Trigger,
    arun_summarizer,
    complete_compaction,
    fail_compaction,
    plan_compaction,
    prepared_checkpoint,
    run_summarizer,
)
from ctxledger.domain.decide import (
    INTERRUPTED_RESULT,
    Adopt,
    Background,
    Compact,
    Decision,
    Job,
    Recover,
    Request,
    Serve,
    Summarized,
    decide,
    served,
    usable_prepared,
)
from ctxledger.domain.facts import (
    FACT_KINDS,
    Fact,
    FactKind,
    checkpoint_fact_block,
    extract_facts,
    shown_text,
)
from ctxledger.domain.limits import (
    base_threshold_tokens,
    fact_index_chars,
    max_tool_result_chars,
    summary_chunk_chars,
    summary_max_chars,
)
from ctxledger.domain.overflow import is_prompt_too_long
from ctxledger.domain.placement import PLACEMENT_KINDS, Placement, PlacementKind, place_message
from ctxledger.domain.projection import assemble, summary_message
from ctxledger.domain.render import (
    TRUNCATION_MARKER,
    RenderPolicy,
    mask_text,
    render_message,
    render_policy,
    truncate_text,
)
from ctxledger.domain.revert import revert_checkpoint
from ctxledger.domain.state import BACKGROUND_BACKOFF, SNAPSHOT_VERSION, SessionState, Usage
from ctxledger.domain.summary import (
    AsyncSummarizer,
    Summarizer,
    SummaryRequest,
    describe_summarizer,
    is_async_summarizer,
)
from ctxledger.domain.tokenizer import CharTokenizer, Tokenizer, message_chars
from ctxledger.domain.view import (
    COMPACT_CHECKPOINT,
    FULL_HISTORY,
    Draft,
    ModelView,
    build_view,
    draft_view,
    preview_view,
    view_hash,
)
from ctxledger.domain.withdrawal import clear_event, retraction_events, shown_messages

__all__ = [
    "BACKGROUND_BACKOFF",
    "COMPACT_CHECKPOINT",
    "FACT_KINDS",
    "FULL_HISTORY",
    "INTERRUPTED_RESULT",
    "PLACEMENT_KINDS",
    "SNAPSHOT_VERSION",
    "STEP_CUT_FILL",
    "TRIGGERS",
    "TRUNCATION_MARKER",
    "Adopt",
    "AsyncSummarizer",
    "Background",
    "CharTokenizer",
    "Compact",
    "CompactionPlan",
    "CompactionResult",
    "Decision",
    "Draft",
    "DynamicThreshold",
    "Fact",
    "FactKind",
    "FixedThreshold",
    "Job",
    "KindCount",
    "LossReport",
    "ModelView",
    "Placement",
    "PlacementKind",
    "Recover",
    "RenderPolicy",
    "Request",
    "Serve",
    "SessionState",
    "Summarized",
    "Summarizer",
    "SummaryRequest",
    "ThresholdPolicy",
    "Tokenizer",
    "Trigger",
    "Usage",
    "arun_summarizer",
    "assemble",
    "audit_checkpoint",
    "base_threshold_tokens",
    "build_view",
    "checkpoint_fact_block",
    "clear_event",
    "complete_compaction",
    "decide",
    "describe_summarizer",
    "draft_view",
    "estimate_tokens",
    "extract_facts",
    "fact_index_chars",
    "fail_compaction",
    "is_async_summarizer",
    "is_prompt_too_long",
    "looks_failed",
    "mask_text",
    "max_tool_result_chars",
    "message_chars",
    "place_message",
    "plan_compaction",
    "prepared_checkpoint",
    "preview_view",
    "render_message",
    "render_policy",
    "retraction_events",
    "revert_checkpoint",
    "run_summarizer",
    "served",
    "shown_messages",
    "shown_text",
    "summary_chunk_chars",
    "summary_max_chars",
    "summary_message",
    "threshold_for",
    "to_anthropic",
    "to_openai",
    "truncate_text",
    "usable_prepared",
    "view_hash",
]
