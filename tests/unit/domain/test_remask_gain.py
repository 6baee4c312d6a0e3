"""Micro masking under the gain rule: a re-mask waits until it saves enough (issue 17).

The rule (with its clamp to a tenth of the threshold) is retired for Configs built now (schema
4: masking depends on the masking settings alone); Configs recorded before carry it and must
replay as served, so these tests run on recorded Configs (schema 3).
"""

from __future__ import annotations

from ctxledger import Message
from ctxledger.domain import (
    CharTokenizer,
    SessionState,
    build_view,
    min_gain_tokens,
    render_policy,
    retraction_events,
)
from ctxledger.events import MessageRetracted

from .builders import recorded_session, session, step

TOKENS = CharTokenizer()


def _results(s, sizes: list[int]) -> None:  # type: ignore[no-untyped-def]
    for n, size in enumerate(sizes):
        s.append_many(step(f"c{len(s.state.tool_seqs)}-{n}", "r" * size))


def _gained(sizes: list[int], gain: int = 500):  # type: ignore[no-untyped-def]
    """A session of results of ``sizes`` characters; 2 kept whole, masked by 2, under ``gain``."""
    s = recorded_session(
        Message.user("go"),
        context_window=100_000,
        micro_keep_recent=2,
        micro_batch=2,
        min_compaction_gain_tokens=gain,
    )
    _results(s, sizes)
    return s


def test_without_the_rule_masking_moves_by_batch() -> None:
    """Gain 0: the oldest ((n - keep) // batch) * batch results are candidates, as before."""
    s = _gained([300] * 6, gain=0)
    assert s.state.mask_target() == 4
    assert render_policy(s.state).mask_before_seq == s.state.tool_seqs[3] + 1


def test_a_small_re_mask_waits_until_it_saves_the_gain() -> None:
    """Gain 500 tokens: each aged 300-char result would save 279 chars (93 tokens); the boundary
    waits until the results it would newly mask save 500 tokens, then jumps over them all."""
    config = {"context_window": 100_000, "micro_keep_recent": 2, "micro_batch": 2}
    s = recorded_session(Message.user("go"), **config, min_compaction_gain_tokens=500)
    assert min_gain_tokens(s.state.config) == 500
    _results(s, [300] * 6)
    assert (s.state.mask_target(), s.state.mask_count) == (4, 0)  # 4 * 279 // 3 = 372 < 500
    assert render_policy(s.state).mask_before_seq == 0  # nothing masked yet
    _results(s, [300] * 2)
    assert (s.state.mask_target(), s.state.mask_count) == (6, 6)  # 558 >= 500: all at once
    assert render_policy(s.state).mask_before_seq == s.state.tool_seqs[5] + 1
    _results(s, [300] * 2)
    assert (s.state.mask_target(), s.state.mask_count) == (8, 6)  # held again


def test_the_gain_is_capped_by_a_tenth_of_the_threshold() -> None:
    """A gain chosen for large windows does not stop masking in a small one."""
    s = recorded_session(Message.user("go"), context_window=1_000, min_compaction_gain_tokens=3_000)
    assert min_gain_tokens(s.state.config) == 80  # 800 // 10


def test_the_boundary_is_folded_and_survives_snapshots() -> None:
    """Replay and snapshot + tail rebuild the same boundary (it is part of the fold)."""
    config = {"context_window": 100_000, "micro_keep_recent": 1, "micro_batch": 1}
    s = recorded_session(Message.user("go"), **config, min_compaction_gain_tokens=150)
    _results(s, [200, 900, 200, 200, 200, 1_200, 200])
    assert s.replay() == s.state
    for split in range(1, len(s.events)):
        resumed = SessionState.from_snapshot(s.replay(s.events[:split]).to_snapshot())
        for event in s.events[split:]:
            resumed.apply(event)
        assert resumed.mask_count == s.state.mask_count
        assert resumed.to_snapshot() == s.state.to_snapshot()


def test_retracting_the_result_that_moved_the_boundary_moves_it_back() -> None:
    """The result whose append let the boundary jump is retracted: the boundary, and the view,
    are as they were before the append (MessageRetracted records it)."""
    s = _gained([300, 300, 2_000, 300, 300])  # 2 candidates save 186 tokens < 500: held at 0
    assert (s.state.mask_target(), s.state.mask_count) == (2, 0)
    before = build_view(s.state, tokenizer=TOKENS).view_hash
    s.append_many(step("next", "n" * 300))  # target 4: the 2,000-character result is a candidate
    assert s.state.mask_count == 4
    assert s.state.mask_after_retraction() == 0
    events = retraction_events(s.state)
    assert isinstance(events[0], MessageRetracted) and events[0].mask_count == 0
    for event in events:
        s.record(event)
    assert s.state.mask_count == 0 and s.state.mask_undo == []
    for event in retraction_events(s.state):  # and the call it answered
        s.record(event)
    assert build_view(s.state, tokenizer=TOKENS).view_hash == before


def test_a_retraction_recorded_before_the_field_leaves_the_boundary() -> None:
    """A MessageRetracted without ``mask_count`` (older logs) leaves the boundary where it is,
    as the views of those logs were served."""
    s = _gained([300, 300, 2_000, 300, 300])
    s.append_many(step("next", "n" * 300))
    s.record(MessageRetracted(seq=s.state.retraction_target()))
    assert s.state.mask_count == 4


def test_a_retraction_that_did_not_move_the_boundary_records_nothing() -> None:
    """Retracting a result whose append left the boundary alone records no boundary."""
    s = _gained([300] * 5)
    assert s.state.mask_after_retraction() is None
    assert retraction_events(s.state)[0].mask_count is None  # type: ignore[attr-defined]


def test_a_config_built_now_masks_by_its_masking_settings_alone() -> None:
    """Schema 4: the gain rule is retired (setting it is refused), and the masking boundary is
    the same whatever the threshold: the threshold never changes a view it does not reach."""
    import pytest

    from ctxledger import Config, ConfigError

    with pytest.raises(ConfigError) as info:
        Config(min_compaction_gain_tokens=500)
    assert info.value.field == "min_compaction_gain_tokens"
    hashes = set()
    for threshold in (0.5, 0.7, 0.9):
        s = session(
            Message.user("go"),
            context_window=100_000,
            compression_threshold=threshold,
            micro_keep_recent=2,
            micro_batch=2,
        )
        _results(s, [300, 2_000, 300, 300, 300, 300, 300])
        assert min_gain_tokens(s.state.config) == 0
        assert s.state.masked_results() == s.state.mask_target() == 4
        hashes.add(build_view(s.state, tokenizer=TOKENS).view_hash)
    assert len(hashes) == 1
