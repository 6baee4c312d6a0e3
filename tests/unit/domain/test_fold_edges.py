"""Edges of masking and of the fold: the exact value, one below and one above."""

from __future__ import annotations

from typing import Any

import pytest

from ctxledger import Config, Message
from ctxledger.domain import (
    CharTokenizer,
    base_threshold_tokens,
    build_view,
    retraction_events,
    summary_max_chars,
)
from ctxledger.events import CompactionStarted, SummaryPrepared
from ctxledger.testing import DomainSession

from .builders import recorded, recorded_session, session, step

TOKENS = CharTokenizer()


@pytest.mark.parametrize(("extra", "masked"), [(-1, False), (0, False), (1, True)])
def test_a_tool_result_is_masked_only_when_longer_than_micro_min_chars(
    extra: int, masked: bool
) -> None:
    """A result of ``micro_min_chars`` characters (or one fewer) is shown whole once it has
    aged; one character more and it is masked."""
    s = session(
        Message.user("go"),
        context_window=100_000,
        micro_keep_recent=1,
        micro_batch=1,
        micro_min_chars=50,
        min_compaction_gain_tokens=0,
    )
    s.append_many(step("old", "r" * (50 + extra)))
    s.append_many(step("new", "n" * 10))
    shown = {m.seq: m.content for m in build_view(s.state, tokenizer=TOKENS).messages}
    old_seq = s.state.tool_seqs[0]
    assert (shown[old_seq] == "[Previous: used bash]") is masked


def _gain_session() -> DomainSession:
    """Under the gain rule every aged 300-character result moves the masking boundary, one
    result at a time, so each append of a result leaves an undo entry counting the results.
    The gain rule is a recorded Config's (schema 3): a Config built now masks by its masking
    settings alone and keeps no undo entries."""
    return recorded_session(
        Message.user("round 1"),
        context_window=1_000_000,
        min_retain_rounds=1,
        micro_keep_recent=2,
        micro_batch=1,
        min_compaction_gain_tokens=1,
        keep_first_request=False,
        prepare_threshold=0.0,
    )


def test_re_mask_undo_entries_are_pruned_exactly_at_the_checkpoint_floor() -> None:
    """At a checkpoint, undo entries that count no more results than the previous
    checkpoint's index floor (``tool_seqs.before``) are dropped; one more result is kept."""
    s = _gain_session()
    for n in range(80):
        s.append_many(step(f"a{n}", "r" * 300))
    s.append(Message.user("round 2"))
    for n in range(5):
        s.append_many(step(f"b{n}", "r" * 300))
    assert s.compact().compacted
    floor = s.state.tool_seqs.before
    assert floor > 3, "the first checkpoint must move index entries out of memory"
    counts = [count for count, _ in s.state.mask_undo]
    assert floor in counts and floor + 1 in counts  # both sides of the edge exist
    s.append(Message.user("round 3"))
    for n in range(5):
        s.append_many(step(f"c{n}", "r" * 300))
    assert s.compact().compacted
    counts = [count for count, _ in s.state.mask_undo]
    assert floor not in counts
    assert min(counts) == floor + 1


def _with_prepared(cut: int) -> DomainSession:
    s = session(
        *[m for n in range(4) for m in (Message.user(f"u{n}"), Message.assistant(f"a{n}"))],
        context_window=100_000,
        keep_first_request=False,
    )
    s.record(
        CompactionStarted(
            compaction_id="bg",
            reason="threshold_exceeded",
            retain_from_seq=cut,
            covers_through_seq=cut - 1,
            estimated_tokens=10,
            background=True,
        )
    )
    s.record(
        SummaryPrepared(
            compaction_id="bg",
            retain_from_seq=cut,
            covers_through_seq=cut - 1,
            summary="the first rounds",
            max_chars=100,
        )
    )
    return s


def _retract_down_to(s: DomainSession, seq: int) -> None:
    while s.state.retraction_target() >= seq:
        for event in retraction_events(s.state):
            s.record(event)


def test_retracting_the_message_after_a_prepared_summary_keeps_it() -> None:
    """Retracting every message after the prepared summary's coverage leaves it prepared."""
    s = _with_prepared(5)
    _retract_down_to(s, 5)
    assert s.state.prepared is not None


def test_retracting_the_last_message_a_prepared_summary_covers_drops_it() -> None:
    """Retracting the newest message it covers (``covers_through_seq``) drops it."""
    s = _with_prepared(5)
    _retract_down_to(s, 4)
    assert s.state.prepared is None


@pytest.mark.parametrize(("threshold", "base"), [(0.2, 2_000), (0.3, 3_000), (0.4, 3_000)])
def test_the_dynamic_thresholds_base_is_never_above_the_fixed_threshold(
    threshold: float, base: int
) -> None:
    """Under the dynamic policy the base is 0.3 of the window, or the fixed threshold when that
    is lower; the sizes derived from it follow (a recorded one-mark Config: a tenth of it for
    the summary; a Config built now: its marks' sizes)."""
    config: dict[str, Any] = {"context_window": 10_000, "threshold_policy": "dynamic"}
    built = Config(**config, compression_threshold=threshold)
    assert base_threshold_tokens(built) == built.sizes().threshold_tokens == base
    assert built.sizes().target_tokens < base
    old = recorded(**config, compression_threshold=threshold)
    assert base_threshold_tokens(old) == base
    assert summary_max_chars(old) == base * 3 // 10
