"""The pure heart of ctxledger: rounds, budget, compaction planning, masking and projection.

No threads and no I/O: given a session's events (folded into a :class:`SessionState`), decide
when to compact (the two-mark policy, :mod:`ctxledger.domain.policy`), plan the cut and build
the model view. :func:`decide` is the one decision step that the runtime, the testing driver,
what-if and transcript import all call.

The names are imported on first use (PEP 562, see :mod:`ctxledger._lazy`): a summary worker
process, which needs the summariser and the facts of messages, does not load the fold,
the projection and the policy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxledger._lazy import lazy_exports

if TYPE_CHECKING:  # what each name is, for type checkers and readers
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
    from ctxledger.domain.calibration import (
        CalibratedTokenizer,
        calibrate,
        session_tokenizer,
        usage_events,
        view_chars,
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
        prepared_checkpoint,
        run_summarizer,
    )
    from ctxledger.domain.cost import PRICING_PRESETS, Pricing
    from ctxledger.domain.cuts import Marks
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
        background_estimate,
        decide,
        extension_due,
        over_budget,
        served,
        usable_prepared,
    )
    from ctxledger.domain.estimate import current_estimate, tail_chars
    from ctxledger.domain.facts import (
        FACT_KINDS,
        Fact,
        FactKind,
        checkpoint_fact_block,
        extract_facts,
        shown_text,
    )
    from ctxledger.domain.fold import BACKGROUND_BACKOFF
    from ctxledger.domain.limits import (
        base_threshold_tokens,
        fact_index_chars,
        max_tool_result_chars,
        min_gain_tokens,
        summary_chunk_chars,
        summary_max_chars,
    )
    from ctxledger.domain.overflow import is_prompt_too_long
    from ctxledger.domain.placement import PLACEMENT_KINDS, Placement, PlacementKind, place_message
    from ctxledger.domain.policy import (
        absorbs,
        background_on,
        marks,
        overflow_error,
        plan_compaction,
        prepare_due,
        ready_in_time,
        should_compact,
        unshrinkable_tokens,
    )
    from ctxledger.domain.projection import assemble, summary_message
    from ctxledger.domain.record import Usage
    from ctxledger.domain.render import (
        TRUNCATION_MARKER,
        RenderPolicy,
        mask_text,
        render_message,
        render_policy,
        render_unmasked,
        truncate_text,
    )
    from ctxledger.domain.revert import revert_checkpoint
    from ctxledger.domain.snapshot import SNAPSHOT_VERSION
    from ctxledger.domain.state import SessionState
    from ctxledger.domain.summary import (
        AsyncSummarizer,
        Summarizer,
        SummaryRequest,
        describe_summarizer,
        is_async_summarizer,
    )
    from ctxledger.domain.tokenizer import CharTokenizer, Tokenizer, message_chars
    from ctxledger.domain.usage import (
        Accounting,
        Calibration,
        ReportedUsage,
        UsageTotals,
        parse_usage,
        usage_from_counts,
    )
    from ctxledger.domain.view import (
        COMPACT_CHECKPOINT,
        FULL_HISTORY,
        VIEW_HASH_VERSION,
        Draft,
        ModelView,
        build_view,
        draft_view,
        preview_view,
        remask_of,
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
    "PRICING_PRESETS",
    "SNAPSHOT_VERSION",
    "STEP_CUT_FILL",
    "TRIGGERS",
    "TRUNCATION_MARKER",
    "VIEW_HASH_VERSION",
    "Accounting",
    "Adopt",
    "AsyncSummarizer",
    "Background",
    "CalibratedTokenizer",
    "Calibration",
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
    "Marks",
    "ModelView",
    "Placement",
    "PlacementKind",
    "Pricing",
    "Recover",
    "RenderPolicy",
    "ReportedUsage",
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
    "UsageTotals",
    "absorbs",
    "arun_summarizer",
    "assemble",
    "audit_checkpoint",
    "background_estimate",
    "background_on",
    "base_threshold_tokens",
    "build_view",
    "calibrate",
    "checkpoint_fact_block",
    "clear_event",
    "complete_compaction",
    "current_estimate",
    "decide",
    "describe_summarizer",
    "draft_view",
    "estimate_tokens",
    "extension_due",
    "extract_facts",
    "fact_index_chars",
    "fail_compaction",
    "is_async_summarizer",
    "is_prompt_too_long",
    "looks_failed",
    "marks",
    "mask_text",
    "max_tool_result_chars",
    "message_chars",
    "min_gain_tokens",
    "over_budget",
    "overflow_error",
    "parse_usage",
    "place_message",
    "plan_compaction",
    "prepare_due",
    "prepared_checkpoint",
    "preview_view",
    "ready_in_time",
    "remask_of",
    "render_message",
    "render_policy",
    "render_unmasked",
    "retraction_events",
    "revert_checkpoint",
    "run_summarizer",
    "served",
    "session_tokenizer",
    "should_compact",
    "shown_messages",
    "shown_text",
    "summary_chunk_chars",
    "summary_max_chars",
    "summary_message",
    "tail_chars",
    "threshold_for",
    "to_anthropic",
    "to_openai",
    "truncate_text",
    "unshrinkable_tokens",
    "usable_prepared",
    "usage_events",
    "usage_from_counts",
    "view_chars",
    "view_hash",
]

#: The module each public name is imported from.
_HOMES = {
    name: f"ctxledger.domain.{module}"
    for module, names in {
        "adapters": "to_anthropic to_openai",
        "audit": "KindCount LossReport audit_checkpoint",
        "budget": (
            "DynamicThreshold FixedThreshold ThresholdPolicy estimate_tokens looks_failed "
            "threshold_for"
        ),
        "calibration": "CalibratedTokenizer calibrate session_tokenizer usage_events view_chars",
        "compaction": (
            "CompactionPlan CompactionResult STEP_CUT_FILL TRIGGERS Trigger arun_summarizer "
            "complete_compaction fail_compaction prepared_checkpoint run_summarizer"
        ),
        "cost": "PRICING_PRESETS Pricing",
        "cuts": "Marks",
        "decide": (
            "Adopt Background Compact Decision INTERRUPTED_RESULT Job Recover Request Serve "
            "Summarized background_estimate decide extension_due over_budget served usable_prepared"
        ),
        "estimate": "current_estimate tail_chars",
        "facts": "FACT_KINDS Fact FactKind checkpoint_fact_block extract_facts shown_text",
        "fold": "BACKGROUND_BACKOFF",
        "limits": (
            "base_threshold_tokens fact_index_chars max_tool_result_chars min_gain_tokens "
            "summary_chunk_chars summary_max_chars"
        ),
        "overflow": "is_prompt_too_long",
        "placement": "PLACEMENT_KINDS Placement PlacementKind place_message",
        "policy": (
            "absorbs background_on marks overflow_error plan_compaction prepare_due ready_in_time "
            "should_compact unshrinkable_tokens"
        ),
        "projection": "assemble summary_message",
        "record": "Usage",
        "render": (
            "RenderPolicy TRUNCATION_MARKER mask_text render_message render_policy render_unmasked "
            "truncate_text"
        ),
        "revert": "revert_checkpoint",
        "snapshot": "SNAPSHOT_VERSION",
        "state": "SessionState",
        "summary": (
            "AsyncSummarizer Summarizer SummaryRequest describe_summarizer is_async_summarizer"
        ),
        "tokenizer": "CharTokenizer Tokenizer message_chars",
        "usage": "Accounting Calibration ReportedUsage UsageTotals parse_usage usage_from_counts",
        "view": (
            "COMPACT_CHECKPOINT Draft FULL_HISTORY VIEW_HASH_VERSION ModelView build_view "
            "draft_view preview_view remask_of view_hash"
        ),
        "withdrawal": "clear_event retraction_events shown_messages",
    }.items()
    for name in names.split()
}


if not TYPE_CHECKING:  # type checkers see the imports above, and no name of any other kind
    __getattr__, __dir__ = lazy_exports(__name__, _HOMES)
