"""Where a message is in the view (place_message), and undoing a compaction (CheckpointReverted)."""

from __future__ import annotations

import json

import pytest

from ctxledger import Config, InvalidCheckpointError, InvalidSeqError, Message, ToolCall
from ctxledger.domain import (
    CharTokenizer,
    SessionState,
    build_view,
    place_message,
    revert_checkpoint,
)
from ctxledger.events import CheckpointReverted
from ctxledger.testing import DomainSession, check_view_invariants

TOKENS = CharTokenizer()
CONFIG = Config(
    context_window=3000,
    min_retain_rounds=1,
    micro_keep_recent=1,
    micro_batch=1,
    max_tool_result_chars=300,
    keep_first_request=True,
    min_compaction_gain_tokens=0,  # every result is masked once it ages (a placement kind)
)


def _session() -> DomainSession:
    """System, a task, then rounds of a call whose result is long (masked later)."""
    session = DomainSession(CONFIG)
    session.append_many(
        [Message.system("rules"), Message.user("the task: fix src/app.py " + "t" * 500)]
    )
    for n in range(8):
        call = ToolCall(f"c{n}", "bash", json.dumps({"command": f"cat src/mod_{n}.py"}))
        session.append_many(
            [
                Message.user(f"round {n}"),
                Message.assistant("ok", [call]),
                Message.tool(f"line {n}\n" * 30, call.id, "bash"),
                Message.assistant("done " + "d" * 200),
            ]
        )
    return session


def _compacted(times: int = 1) -> DomainSession:
    session = _session()
    for n in range(times):
        assert session.compact().compacted
        session.append_many([Message.user(f"more {n}"), Message.assistant("fine")])
    return session


def test_every_placement_kind_is_recognised() -> None:
    """Head raw, kept request pinned (cut), summarised, masked, truncated and raw tail."""
    session = _compacted()
    state = session.state
    cut = state.active_checkpoint.retain_from_seq  # type: ignore[union-attr]
    assert place_message(state, 1).kind == "raw"  # the system preamble
    kept = place_message(state, 2)
    assert (kept.kind, kept.pinned_by) == ("pinned", "first_request")
    assert kept.shown_chars < kept.total_chars  # cut to max_tool_result_chars
    summarised = place_message(state, 5)
    assert summarised.kind == "summarized" and summarised.checkpoint_id == state.checkpoints[0].id
    assert summarised.checkpoint_reason == "manual"
    for n in (20, 21):  # two more results in the tail: the older one is masked
        call = ToolCall(f"c{n}", "bash", json.dumps({"command": f"cat src/mod_{n}.py"}))
        session.append_many(
            [Message.assistant("ok", [call]), Message.tool(f"l {n}\n" * 60, call.id)]
        )
    tail_results = [m.seq for m in state.history[cut - 1 :] if m.role == "tool"]
    assert place_message(state, tail_results[-2]).kind == "masked"
    assert place_message(state, state.last_seq).kind == "raw"
    session.append(Message.user("x"))
    session.append_many(
        [
            Message.assistant("", [ToolCall("big", "bash", '{"command": "cat big.txt"}')]),
            Message.tool("y" * 2000, "big", "bash"),
        ]
    )
    truncated = place_message(session.state, session.state.last_seq)
    assert truncated.kind == "truncated" and 0 < truncated.shown_chars < 2000


def test_a_pin_is_reported_as_such() -> None:
    """An explicitly pinned message before the cut is in the pinned slot, by pin."""
    session = _compacted()
    session.pin(6)
    placement = place_message(session.state, 6)
    assert (placement.kind, placement.pinned_by) == ("pinned", "pin")


def test_the_first_covering_checkpoint_is_named() -> None:
    """A message summarised by the first checkpoint names it, not the active one."""
    session = _compacted(2)
    first, second = session.state.checkpoints[0], session.state.checkpoints[1]
    early = place_message(session.state, 4)
    late = place_message(session.state, first.retain_from_seq)
    assert early.checkpoint_id == first.id and early.active_checkpoint_id == second.id
    assert late.kind == "summarized" and late.checkpoint_id == second.id


@pytest.mark.parametrize("seq", [0, -1, 10_000, True])
def test_no_such_message(seq: int) -> None:
    """A seq that names no message raises InvalidSeqError."""
    with pytest.raises(InvalidSeqError):
        place_message(_session().state, seq)


# --- revert ---------------------------------------------------------------------------------


def test_revert_makes_the_previous_checkpoint_active_again() -> None:
    """After a revert the view is the restored checkpoint's view for the current history."""
    session = _compacted(2)
    first, second = session.state.checkpoints[0], session.state.checkpoints[1]
    event = revert_checkpoint(session.state, reason="bad summary")
    assert (event.checkpoint_id, event.restored, event.reason) == (second.id, first, "bad summary")
    expected = session.replay(session.events).copy()
    session.record(event)
    assert session.state.active_checkpoint == first and session.state.active_restored
    view = build_view(session.state, tokenizer=TOKENS)
    assert view.checkpoint_id == first.id and view.retain_from_seq == first.retain_from_seq
    check_view_invariants(
        session.state.history, view, CONFIG, checkpoint=first, pins=session.state.pins
    )
    assert expected.active_checkpoint == second  # history and the log's checkpoints unchanged


def test_the_next_compaction_extends_the_restored_checkpoint_and_may_take_a_focus() -> None:
    """Right after a revert a manual compaction runs (no message needed) and extends it."""
    session = _compacted(2)
    first = session.state.checkpoints[0]
    session.record(revert_checkpoint(session.state))
    result = session.compact(focus="keep the file names")
    assert result.compacted
    made = session.state.active_checkpoint
    assert made is not None and made.previous_checkpoint_id == first.id
    assert made.focus == "keep the file names" and not session.state.active_restored


def test_reverting_twice_or_without_a_checkpoint_raises() -> None:
    """Only the newest compaction is undone, once; with no checkpoint nothing is."""
    session = _compacted(2)
    session.record(revert_checkpoint(session.state))
    with pytest.raises(InvalidCheckpointError, match="cannot be reverted in turn"):
        revert_checkpoint(session.state)
    with pytest.raises(InvalidCheckpointError, match="no checkpoint"):
        revert_checkpoint(_session().state)


def test_reverting_the_only_checkpoint_serves_the_view_before_it() -> None:
    """The first compaction is undone too (it used to raise): the view is the full history
    again, byte for byte the view the same history gives with no compaction; replay and a
    snapshot rebuild it; reverting again raises, and a compaction may follow at once."""
    session = _compacted(1)
    only = session.state.active_checkpoint
    assert only is not None
    uncompacted = _session()
    uncompacted.extend(session.state.history[uncompacted.state.last_seq :])
    event = revert_checkpoint(session.state)
    assert (event.checkpoint_id, event.restored) == (only.id, None)
    session.record(event)
    assert session.state.active_checkpoint is None and session.state.active_restored
    view = build_view(session.state, tokenizer=TOKENS)
    assert view.view_hash == build_view(uncompacted.state, tokenizer=TOKENS).view_hash
    assert view.checkpoint_id is None and view.retain_from_seq == 1
    assert session.replay().to_snapshot() == session.state.to_snapshot()
    resumed = SessionState.from_snapshot(
        session.state.to_snapshot(), checkpoints=lambda: list(session.state.checkpoints)
    )
    assert build_view(resumed, tokenizer=TOKENS) == view
    with pytest.raises(InvalidCheckpointError, match="no checkpoint"):
        revert_checkpoint(session.state)
    result = session.compact()
    assert result.compacted
    made = session.state.active_checkpoint
    assert made is not None and made.previous_checkpoint_id is None


def test_only_the_active_checkpoint_can_be_named() -> None:
    """Naming another checkpoint, or an unknown id, raises and says which is active."""
    session = _compacted(2)
    first, second = session.state.checkpoints[0], session.state.checkpoints[1]
    with pytest.raises(InvalidCheckpointError, match="is not the active one"):
        revert_checkpoint(session.state, first.id)
    with pytest.raises(InvalidCheckpointError, match="not a checkpoint of this session"):
        revert_checkpoint(session.state, "nope")
    assert revert_checkpoint(session.state, second.id).checkpoint_id == second.id


def test_a_revert_survives_snapshot_and_replay() -> None:
    """The fold of a revert is the same from the events and from a snapshot."""
    session = _compacted(2)
    session.record(revert_checkpoint(session.state))
    replayed = session.replay()
    assert replayed.to_snapshot() == session.state.to_snapshot()
    resumed = SessionState.from_snapshot(
        session.state.to_snapshot(),
        checkpoints=lambda: list(session.state.checkpoints),
    )
    assert resumed.active_restored and resumed.active_checkpoint == session.state.checkpoints[0]
    assert isinstance(session.events[-1], CheckpointReverted)
    assert build_view(resumed, tokenizer=TOKENS) == build_view(session.state, tokenizer=TOKENS)
