"""Config.keep_first_request: the session's first user message stays in the view after a cut."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from ctxledger import Checkpoint, Config, ConfigError, Message
from ctxledger.domain import (
    CharTokenizer,
    CompactionPlan,
    SessionState,
    build_view,
    max_tool_result_chars,
    plan_compaction,
    truncate_text,
)
from ctxledger.events import CheckpointCreated
from ctxledger.testing import DomainSession, check_view_invariants

from .builders import session, step

TOKENS = CharTokenizer()
# threshold 800 tokens, target 600; tool results are cut to 750 chars (a quarter of the window),
# the kept request to 180 (a tenth of the target; schema 4: half of it, at most a tool result,
# 750); masking off; no fact block (its reserve would move the cuts these tests size)
SMALL: dict[str, Any] = {
    "context_window": 1000,
    "compaction_target": 0.6,
    "min_retain_rounds": 2,
    "micro_keep_recent": 1000,
    "fact_index_chars": 0,
}
TASK = "Fix the bug in src/app/models.py: " + "details " * 15


def _one_round(task: str = TASK, steps: int = 12, **config: Any) -> DomainSession:
    """A system preamble, the task, then one long round of tool steps (seq 3 on)."""
    messages = [Message.system("rules"), Message.user(task)]
    for index in range(steps):
        messages += step(f"c{index}", f"{index}" + "o" * 299)
    return session(*messages, **{**SMALL, **config})


def _checkpoint(s: DomainSession, retain_from: int) -> None:
    checkpoint = Checkpoint(
        id="cp",
        summary="SUMMARY",
        retain_from_seq=retain_from,
        covers_through_seq=retain_from - 1,
        reason="manual",
    )
    s.record(CheckpointCreated(compaction_id="c", checkpoint=checkpoint))


def _shown(s: DomainSession) -> list[tuple[str, int | None]]:
    return [(m.role, m.seq) for m in build_view(s.state, tokenizer=TOKENS).messages]


def _check(s: DomainSession) -> None:
    state = s.state
    check_view_invariants(
        state.history,
        build_view(state, tokenizer=TOKENS),
        state.config,
        checkpoint=state.active_checkpoint,
        pins=state.pins,
    )


def test_first_request_is_kept_verbatim_before_the_summary_after_a_step_cut() -> None:
    """A step-level cut covers the task: the view shows it whole between head and summary."""
    s = _one_round()
    result = s.compact_if_needed()
    assert result.compacted and result.retain_from_seq > 2
    view = build_view(s.state, tokenizer=TOKENS)
    assert [(m.role, m.seq) for m in view.messages[:3]] == [
        ("system", 1),
        ("user", 2),
        ("summary", None),
    ]
    assert view.messages[1] == s.state.message(2)
    _check(s)


def test_first_request_stays_through_later_compactions() -> None:
    """Every later checkpoint keeps showing it, once."""
    s = _one_round()
    for index in range(12, 40):
        s.extend(step(f"c{index}", "o" * 300))
        s.step()
    assert len(s.state.checkpoints) >= 2
    assert [seq for _, seq in _shown(s)].count(2) == 1
    assert _shown(s)[1] == ("user", 2)
    _check(s)


@pytest.mark.parametrize(("schema", "limit"), [(5, 180), (4, 750)])
def test_huge_first_request_is_truncated_with_a_marker_naming_its_seq(
    schema: int, limit: int
) -> None:
    """Longer than its limit (a tenth of the target; a Config of schema 4: half of it, at
    most ``max_tool_result_chars``): head, marker, tail, like an oversize tool result."""
    task = "HEAD " + "x" * 5000 + " TAIL"
    s = _one_round(task, schema_version=schema)
    s.compact_if_needed()
    assert s.state.config.sizes().request_chars == limit
    if schema == 4:
        assert limit == max_tool_result_chars(s.state.config)
    shown = build_view(s.state, tokenizer=TOKENS).messages[1]
    assert shown.seq == 2
    assert shown.content == truncate_text(task, limit, 2)
    assert len(shown.content) <= limit
    assert "message seq 2" in shown.content
    assert shown.content.startswith("HEAD") and shown.content.endswith("TAIL")
    _check(s)


def test_first_request_in_the_tail_is_shown_there_only() -> None:
    """While the cut has not passed it, it is shown in the tail, once, whole."""
    s = _one_round("y" * 5000)
    _checkpoint(s, 2)
    shown = _shown(s)
    assert shown[:3] == [("system", 1), ("summary", None), ("user", 2)]
    assert [seq for _, seq in shown].count(2) == 1
    assert build_view(s.state, tokenizer=TOKENS).messages[2].content == "y" * 5000


def test_pinned_first_request_is_shown_once_as_pins_are() -> None:
    """Pinned explicitly, it is shown once, whole: the pin wins over the cap."""
    task = "z" * 5000
    s = _one_round(task)
    s.pin(2)
    _checkpoint(s, 9)
    view = build_view(s.state, tokenizer=TOKENS)
    assert [m.seq for m in view.messages].count(2) == 1
    assert view.messages[1].content == task
    _check(s)


def test_later_user_messages_are_not_kept() -> None:
    """Only the session's first user message is kept; a later covered one is summarised."""
    s = session(
        Message.user("first"),
        Message.assistant("a"),
        Message.user("second"),
        Message.assistant("b"),
        Message.user("third"),
    )
    _checkpoint(s, 5)
    assert _shown(s) == [("user", 1), ("summary", None), ("user", 5)]


def test_flag_off_shows_head_summary_tail_only() -> None:
    """keep_first_request=False: the covered task is left to the summary, as before."""
    s = _one_round(keep_first_request=False)
    result = s.compact_if_needed()
    assert result.compacted
    assert _shown(s)[:2] == [("system", 1), ("summary", None)]
    assert 2 not in [seq for _, seq in _shown(s)]
    _check(s)


def test_flag_off_view_equals_the_view_without_the_slot() -> None:
    """Flag off, the same checkpoint gives the flag-on view minus the kept request."""
    on, off = _one_round(), _one_round(keep_first_request=False)
    for s in (on, off):
        _checkpoint(s, 9)
    kept = build_view(on.state, tokenizer=TOKENS).messages
    assert build_view(off.state, tokenizer=TOKENS).messages == (kept[0], *kept[2:])


@pytest.mark.parametrize(
    ("schema", "window", "steps", "task"), [(5, 4000, 48, 710), (4, 1000, 12, 590)]
)
def test_planner_counts_the_kept_request_in_the_fixed_part(
    schema: int, window: int, steps: int, task: int
) -> None:
    """The cut is sized with the task in the view (shown whole: shorter than its limit): the
    result fits, with a shorter raw tail."""
    sized: dict[str, Any] = {"context_window": window, "steps": steps, "schema_version": schema}
    on = _one_round("t" * task, **sized)
    off = _one_round("t" * task, keep_first_request=False, **sized)
    assert task <= on.state.config.sizes().request_chars
    plan_on = plan_compaction(on.state, tokenizer=TOKENS)
    plan_off = plan_compaction(off.state, tokenizer=TOKENS)
    assert isinstance(plan_on, CompactionPlan) and isinstance(plan_off, CompactionPlan)
    assert plan_on.retain_from_seq > plan_off.retain_from_seq
    result = on.compact_if_needed()
    view = build_view(on.state, tokenizer=TOKENS)
    assert view.messages[1].seq == 2
    assert result.estimated_tokens == view.estimated_tokens < result.threshold
    assert plan_on.planned_tokens >= view.view_tokens


def test_kept_request_is_still_sent_to_the_summariser() -> None:
    """Like a pinned message, it is part of the covered input (the summary stands alone)."""
    plan = plan_compaction(_one_round().state, tokenizer=TOKENS)
    assert isinstance(plan, CompactionPlan)
    assert [m.seq for m in plan.messages][:1] == [2]


def test_turning_the_flag_off_later_leaves_the_task_to_the_summary() -> None:
    """A ConfigChanged applies from then on: the next view drops the kept request."""
    s = _one_round()
    s.compact_if_needed()
    assert _shown(s)[1] == ("user", 2)
    s.change_config(s.state.config.replace(keep_first_request=False))
    assert _shown(s)[1] == ("summary", None)
    _check(s)


def test_kept_request_replays_and_snapshots_to_the_same_view() -> None:
    """A pure function of state: replay and snapshot + tail give the same view hash."""
    s = _one_round("w" * 5000)
    s.step()
    expected = build_view(s.state, tokenizer=TOKENS)
    assert expected.messages[1].seq == 2
    replayed = build_view(s.replay(), tokenizer=TOKENS)
    restored = SessionState.from_snapshot(s.state.to_snapshot())
    assert replayed.view_hash == expected.view_hash
    assert build_view(restored, tokenizer=TOKENS).view_hash == expected.view_hash
    assert msgspec.msgpack.encode(replayed) == msgspec.msgpack.encode(expected)


def test_keep_first_request_must_be_a_bool() -> None:
    """Anything but True or False raises ConfigError naming the field."""
    with pytest.raises(ConfigError) as info:
        Config(keep_first_request=1)  # type: ignore[arg-type]
    assert info.value.field == "keep_first_request"
    assert Config().keep_first_request is True


@pytest.mark.parametrize(("raw", "expected"), [("false", False), ("0", False), ("Yes", True)])
def test_keep_first_request_reads_from_the_environment(raw: str, expected: bool) -> None:
    """CTXLEDGER_KEEP_FIRST_REQUEST takes the usual boolean spellings."""
    config = Config.from_env({"CTXLEDGER_KEEP_FIRST_REQUEST": raw})
    assert config.keep_first_request is expected


def test_unparsable_keep_first_request_in_the_environment_is_refused() -> None:
    """A value that is no boolean spelling raises ConfigError naming the field."""
    with pytest.raises(ConfigError) as info:
        Config.from_env({"CTXLEDGER_KEEP_FIRST_REQUEST": "maybe"})
    assert info.value.field == "keep_first_request"
