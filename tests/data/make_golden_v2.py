"""Write the golden corpus of format-2 records: ``golden_v2.msgpack``, ``.json`` and ``.dict``.

Format 2 is what this release records on top of format 1 (``make_golden.py``): Configs with the
fields added since (``prepare_threshold``, ``fact_index_chars``), background compaction
(``summary_prepared``, background starts and failures, checkpoints activated from a prepared
summary), checkpoints with a fact block and compaction metadata, ``checkpoint_reverted``, and
the withdrawals ``message_retracted`` and ``history_cleared``; cost-aware budgets: usage reports
with cache figures, views with their characters, ``budget_exhausted``, ``tokenizer_calibrated``
and the Config fields ``max_total_tokens``, ``calibrate_after_reports``,
``min_compaction_gain_tokens``, ``floor_guard`` and ``summary_result_chars``, and checkpoints'
``prefix_kept_tokens``.
Run ONCE per released format; while format 2 is unreleased, ``--force`` rewrites it.

    .venv/bin/python tests/data/make_golden_v2.py            # refuses to overwrite
    .venv/bin/python tests/data/make_golden_v2.py --force    # only while format 2 is unreleased
"""

from __future__ import annotations

import sys
from pathlib import Path

from make_golden import _CONFIG, _SUMMARY, _TRACEBACK, write_corpus

from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config
from ctxledger.events.types import (
    BudgetExhausted,
    CheckpointCreated,
    CheckpointReverted,
    CompactionFailed,
    CompactionStarted,
    ConfigChanged,
    Event,
    HistoryCleared,
    MessageRetracted,
    SessionOpened,
    SummaryPrepared,
    TokenizerCalibrated,
    UsageReported,
    ViewServed,
)

HERE = Path(__file__).resolve().parent

_FACTS = (
    "Facts from compacted history (newest first; #N is the message seq; $ command, ! error, "
    "> user request, `name`):\n"
    + "\n".join(f"#{200 - n} src/pkg/module_{n:03d}.py" for n in range(40))
    + "\n#120 $ python -m pytest tests/test_dateparse.py -x\n"
    "#119 ! E AssertionError: assert parse('-P1D') == timedelta(days=-1)"
)
_PREVIOUS = Checkpoint(
    id="ckpt-0101",
    summary="Summary of messages 2-80\n## Errors\n- [#44] pytest: exit 1 | E IndexError",
    retain_from_seq=81,
    covers_through_seq=80,
    reason="threshold_exceeded",
    created_at=1795900200.0,
    tokens_before=30_000,
    tokens_after=9_000,
)


def golden_events() -> list[tuple[str, Event]]:
    """Every event type or field that format 2 added, small and, where natural, large."""
    config = _CONFIG.replace(prepare_threshold=0.7)
    return [
        (
            "usage_reported.anthropic_cache",
            UsageReported(
                prompt_tokens=48_213,
                completion_tokens=912,
                through_seq=140,
                cached_tokens=41_000,
                cache_write_tokens=7_100,
            ),
        ),
        (
            "usage_reported.openai_cache",
            UsageReported(
                prompt_tokens=30_500, completion_tokens=420, through_seq=141, cached_tokens=28_160
            ),
        ),
        (
            "view_served.chars",
            ViewServed(
                through_seq=141,
                estimated_tokens=30_100,
                view_hash="9e2f" * 16,
                checkpoint_id="ckpt-0102",
                message_count=57,
                view_chars=108_377,
            ),
        ),
        ("budget_exhausted", BudgetExhausted(cap=2_000_000, total=2_003_512)),
        (
            "tokenizer_calibrated",
            TokenizerCalibrated(
                samples=4,
                mean_chars=81_234.25,
                mean_tokens=24_901.5,
                m2_chars=1.234e9,
                m2_tokens=1.1e8,
                co_moment=3.61e8,
                chars_per_token=3.548,
            ),
        ),
        (
            "session_opened.cost",
            SessionOpened(
                session_id="sess-9d2f",
                config=Config(
                    context_window=200_000,
                    max_total_tokens=5_000_000,
                    calibrate_after_reports=5,
                    min_compaction_gain_tokens=2_000,
                    floor_guard=True,
                    summary_result_chars=1_500,
                ),
                created_at=1796100000.0,
            ),
        ),
        ("message_retracted", MessageRetracted(seq=78)),
        ("history_cleared", HistoryCleared(through_seq=77)),
        (
            "session_opened.fact_index",
            SessionOpened(
                session_id="sess-9b1c",
                config=Config(context_window=32_000, fact_index_chars=2500),
                created_at=1795900300.5,
            ),
        ),
        (
            "checkpoint_created.metadata.large",
            CheckpointCreated(
                compaction_id="cmp-0102",
                checkpoint=Checkpoint(
                    id="ckpt-0102",
                    summary="Summary of messages 2-200\n## Commands\n- python -m pytest (x12)",
                    retain_from_seq=201,
                    covers_through_seq=200,
                    reason="threshold_exceeded",
                    created_at=1795900400.25,
                    previous_checkpoint_id="ckpt-0101",
                    tokens_before=31_000,
                    tokens_after=12_500,
                    input_hash="7c1e" * 16,
                    facts=_FACTS,
                    summarizer="OpenAIChatSummarizer:gpt-4o-mini",
                    summary_seconds=12.75,
                    input_chars=184_233,
                    summarizer_calls=2,
                    prefix_kept_tokens=4_100,
                ),
            ),
        ),
        (
            "checkpoint_reverted",
            CheckpointReverted(
                checkpoint_id="ckpt-0102", restored=_PREVIOUS, reason="the summary lost the task"
            ),
        ),
        (
            "session_opened.v2",
            SessionOpened(session_id="sess-9c1e", config=config, created_at=1796000000.5),
        ),
        ("config_changed.v2", ConfigChanged(config=config.replace(prepare_threshold=0.0))),
        (
            "compaction_started.background",
            CompactionStarted(
                compaction_id="cmp-0101",
                reason="threshold_exceeded",
                retain_from_seq=120,
                covers_through_seq=119,
                estimated_tokens=86_000,
                background=True,
            ),
        ),
        (
            "summary_prepared",
            SummaryPrepared(
                compaction_id="cmp-0101",
                retain_from_seq=120,
                covers_through_seq=119,
                summary="Parsed ISO durations; negative signs fixed; two tests left.",
                input_hash="5d41" * 16,
                previous_checkpoint_id="ckpt-0002",
                max_chars=9000,
            ),
        ),
        (
            "summary_prepared.large",
            SummaryPrepared(
                compaction_id="cmp-0102",
                retain_from_seq=180,
                covers_through_seq=179,
                summary=_SUMMARY,
                input_hash="7c4a" * 16,
                max_chars=24_000,
            ),
        ),
        (
            "checkpoint_created.prepared",
            CheckpointCreated(
                compaction_id="cmp-0101",
                checkpoint=Checkpoint(
                    id="ckpt-0003",
                    summary="Parsed ISO durations; negative signs fixed; two tests left.",
                    retain_from_seq=120,
                    covers_through_seq=119,
                    reason="threshold_exceeded",
                    created_at=1796000300.0,
                    previous_checkpoint_id="ckpt-0002",
                    tokens_before=96_100,
                    tokens_after=31_000,
                    input_hash="5d41" * 16,
                ),
                prepared=True,
            ),
        ),
        (
            "compaction_failed.background",
            CompactionFailed(compaction_id="cmp-0103", detail=_TRACEBACK, background=True),
        ),
        (
            "compaction_failed.interrupted",
            CompactionFailed(
                compaction_id="cmp-0104",
                reason="interrupted",
                detail="the process stopped before the background summary was recorded",
                background=True,
            ),
        ),
    ]


if __name__ == "__main__":
    sys.exit(write_corpus("golden_v2", golden_events(), sys.argv[1:]))
