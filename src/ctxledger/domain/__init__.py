"""The pure heart of ctxledger: rounds, budget, compaction planning, masking and projection.

No threads and no I/O: given a session's events (folded into a :class:`SessionState`), decide
when to compact, plan the cut and build the model view. Actors and the host call these functions.
"""

from ctxledger.domain.adapters import to_anthropic, to_openai
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
    complete_compaction,
    fail_compaction,
    plan_compaction,
    run_summarizer,
)
from ctxledger.domain.limits import (
    base_threshold_tokens,
    max_tool_result_chars,
    summary_chunk_chars,
    summary_max_chars,
)
from ctxledger.domain.overflow import is_prompt_too_long
from ctxledger.domain.projection import assemble, summary_message
from ctxledger.domain.render import (
    TRUNCATION_MARKER,
    RenderPolicy,
    mask_text,
    render_message,
    render_policy,
    truncate_text,
)
from ctxledger.domain.state import SNAPSHOT_VERSION, SessionState, Usage
from ctxledger.domain.tokenizer import CharTokenizer, Tokenizer, message_chars
from ctxledger.domain.view import (
    COMPACT_CHECKPOINT,
    FULL_HISTORY,
    ModelView,
    build_view,
    preview_view,
    view_hash,
)
from ctxledger.domain.withdrawal import clear_event, retraction_events, shown_messages

__all__ = [
    "COMPACT_CHECKPOINT",
    "FULL_HISTORY",
    "SNAPSHOT_VERSION",
    "STEP_CUT_FILL",
    "TRIGGERS",
    "TRUNCATION_MARKER",
    "CharTokenizer",
    "CompactionPlan",
    "CompactionResult",
    "DynamicThreshold",
    "FixedThreshold",
    "ModelView",
    "RenderPolicy",
    "SessionState",
    "ThresholdPolicy",
    "Tokenizer",
    "Trigger",
    "Usage",
    "assemble",
    "base_threshold_tokens",
    "build_view",
    "clear_event",
    "complete_compaction",
    "estimate_tokens",
    "fail_compaction",
    "is_prompt_too_long",
    "looks_failed",
    "mask_text",
    "max_tool_result_chars",
    "message_chars",
    "plan_compaction",
    "preview_view",
    "render_message",
    "render_policy",
    "retraction_events",
    "run_summarizer",
    "shown_messages",
    "summary_chunk_chars",
    "summary_max_chars",
    "summary_message",
    "threshold_for",
    "to_anthropic",
    "to_openai",
    "truncate_text",
    "view_hash",
]
