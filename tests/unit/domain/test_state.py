"""The session fold: apply, check_append, indices, usage, snapshots and copies."""

from __future__ import annotations

import pytest

from ctxledger import Checkpoint, Config, InvalidMessageError, Message
from ctxledger.domain import SessionState
from ctxledger.errors import EventDecodeError, InvalidSeqError
from ctxledger.events import (
    CheckpointCreated,
    CompactionFailed,
    CompactionStarted,
    ConfigChanged,
    MessageAppended,
    MessagePinned,
    SessionForked,
    SessionOpened,
    ToolResultSynthesized,
    TranscriptExported,
    UsageReported,
    ViewServed,
)

from .builders import call, rounds, session, step


def _checkpoint(retain_from: int, cid: str = "cp1") -> Checkpoint:
    return Checkpoint(
        id=cid,
        summary="s",
        retain_from_seq=retain_from,
        covers_through_seq=retain_from - 1,
        reason="manual",
    )


def test_apply_appends_with_dense_seqs() -> None:
    """history[i].seq == i + 1 after appends."""
    s = session(Message.user("a"), Message.assistant("b"))
    assert [m.seq for m in s.state.history] == [1, 2]
    assert s.state.last_seq == 2


def test_apply_rejects_a_seq_gap() -> None:
    """A message carrying the wrong seq (a gap in the log) raises."""
    state = SessionState.new("s", Config())
    with pytest.raises(InvalidMessageError, match="expected 1"):
        state.apply(MessageAppended(message=Message.user("a").with_seq(2)))


def test_check_append_assigns_seqs_without_mutating() -> None:
    """Seqs continue from last_seq and the state is unchanged."""
    s = session(Message.user("a"))
    checked = s.state.check_append([Message.assistant("b"), Message.user("c")])
    assert [m.seq for m in checked] == [2, 3]
    assert s.state.last_seq == 1


def test_check_append_replaces_a_preset_seq() -> None:
    """A caller's seq is ignored."""
    checked = session().state.check_append([Message.user("a").with_seq(99)])
    assert checked[0].seq == 1


def test_check_append_rejects_summary_role() -> None:
    """Summaries exist only in views."""
    with pytest.raises(InvalidMessageError, match="summary"):
        session().state.check_append([Message(role="summary", content="x")])


def test_check_append_rejects_result_for_unknown_call() -> None:
    """A tool result must answer a call that was made."""
    with pytest.raises(InvalidMessageError, match="never made"):
        session(Message.user("a")).state.check_append([Message.tool("x", "nope")])


def test_check_append_rejects_second_result_for_a_call() -> None:
    """A call is answered once."""
    s = session(Message.user("a"), *step("c1", "out"))
    with pytest.raises(InvalidMessageError, match="already answered"):
        s.state.check_append([Message.tool("again", "c1")])


def test_check_append_accepts_result_for_call_in_same_batch() -> None:
    """A call opened earlier in the batch can be answered in it."""
    checked = session(Message.user("a")).state.check_append(step("c1", "out"))
    assert [m.role for m in checked] == ["assistant", "tool"]


def test_check_append_rejects_call_id_reused_in_session() -> None:
    """Tool-call ids are unique across the session."""
    s = session(Message.user("a"), *step("c1", "out"))
    with pytest.raises(InvalidMessageError, match="already used"):
        s.state.check_append([Message.assistant("", [call("c1")])])


def test_check_append_rejects_call_id_reused_in_batch() -> None:
    """Two messages of one batch cannot share a call id."""
    batch = [*step("c1", "out"), Message.assistant("", [call("c1")])]
    with pytest.raises(InvalidMessageError, match="already used"):
        session(Message.user("a")).state.check_append(batch)


def test_check_append_rejects_message_between_call_and_result() -> None:
    """Nothing but results may follow unanswered calls."""
    s = session(Message.user("a"), Message.assistant("", [call("c1")]))
    with pytest.raises(InvalidMessageError, match="unanswered tool calls"):
        s.state.check_append([Message.user("interrupt")])


def test_check_append_rejects_result_named_after_another_tool() -> None:
    """A result's name must be its call's tool."""
    s = session(Message.user("a"), Message.assistant("", [call("c1", "bash")]))
    with pytest.raises(InvalidMessageError, match="of tool 'bash'"):
        s.state.check_append([Message.tool("x", "c1", "python")])


def test_open_tool_calls_lists_unanswered_calls_in_order() -> None:
    """Parallel calls answered out of order leave the rest open, oldest first."""
    s = session(Message.user("a"), Message.assistant("", [call("c1"), call("c2"), call("c3")]))
    s.append(Message.tool("two", "c2"))
    assert list(s.state.open_tool_calls()) == ["c1", "c3"]


def test_synthesized_result_closes_its_call() -> None:
    """ToolResultSynthesized appends like a message and answers the call."""
    s = session(Message.user("a"), Message.assistant("", [call("c1")]))
    (synthetic,) = s.state.check_append([Message.tool("[interrupted]", "c1")])
    s.record(ToolResultSynthesized(message=synthetic))
    assert s.state.open_tool_calls() == {}
    assert s.state.last_seq == 3


def test_usage_through_seq_zero_means_current_seq() -> None:
    """A usage report without through_seq describes the prompt at the newest message."""
    s = session(Message.user("a"), Message.assistant("b"))
    s.record(UsageReported(prompt_tokens=10))
    assert s.state.usage is not None and s.state.usage.through_seq == 2


def test_usage_is_stale_after_a_checkpoint() -> None:
    """A checkpoint recorded after the report makes it stale."""
    s = session(*rounds(3))
    s.record_usage(100)
    assert s.state.usage_is_current
    s.record(CheckpointCreated(compaction_id="c", checkpoint=_checkpoint(3)))
    assert not s.state.usage_is_current


def test_usage_is_current_again_after_a_new_report() -> None:
    """The next report after a checkpoint is current."""
    s = session(*rounds(3))
    s.record(CheckpointCreated(compaction_id="c", checkpoint=_checkpoint(3)))
    s.record_usage(50)
    assert s.state.usage_is_current


def test_checkpoint_created_activates_and_remembers_seq() -> None:
    """The newest checkpoint is active; checkpoint_seq is last_seq when it was recorded."""
    s = session(*rounds(3))
    s.record(CheckpointCreated(compaction_id="c", checkpoint=_checkpoint(3, "one")))
    s.record(CheckpointCreated(compaction_id="d", checkpoint=_checkpoint(5, "two")))
    assert s.state.active_checkpoint is not None and s.state.active_checkpoint.id == "two"
    assert s.state.checkpoint_seq == 6


def test_compaction_failed_keeps_the_active_checkpoint() -> None:
    """A failed compaction changes no checkpoint."""
    s = session(*rounds(3))
    s.record(CheckpointCreated(compaction_id="c", checkpoint=_checkpoint(3)))
    s.record(
        CompactionStarted(
            compaction_id="d", reason="manual", retain_from_seq=5, covers_through_seq=4
        )
    )
    s.record(CompactionFailed(compaction_id="d"))
    assert s.state.active_checkpoint == _checkpoint(3)
    assert (s.state.compactions_started, s.state.compactions_failed) == (1, 1)


def test_config_changed_applies_from_then_on() -> None:
    """ConfigChanged replaces the Config in force."""
    s = session()
    s.record(ConfigChanged(config=Config(context_window=500)))
    assert s.state.config.context_window == 500


def test_session_opened_after_history_keeps_it() -> None:
    """A fork's own SessionOpened after its parent's prefix keeps the prefix."""
    s = session(Message.user("a"))
    s.record(SessionOpened(session_id="fork", config=Config(context_window=900)))
    assert s.state.last_seq == 1 and s.state.config.context_window == 900


def test_rebase_renames_and_reconfigures() -> None:
    """rebase makes a parent's prefix the start of a fork."""
    s = session(Message.user("a"))
    s.state.rebase("fork", Config(context_window=700))
    assert (s.state.session_id, s.state.config.context_window, s.state.last_seq) == ("fork", 700, 1)


def test_session_forked_records_parent_and_point() -> None:
    """SessionForked names the parent and the fork seq."""
    s = session(Message.user("a"))
    s.record(SessionForked(parent_id="p", at_seq=1, parent_event_seq=2))
    assert (s.state.forked_from, s.state.fork_seq) == ("p", 1)


def test_message_pinned_adds_a_pin() -> None:
    """Pins are events."""
    s = session(Message.user("a"))
    s.pin(1)
    assert s.state.pins == {1}


def test_check_pin_rejects_unknown_seq() -> None:
    """Pinning a seq that names no message raises InvalidSeqError."""
    with pytest.raises(InvalidSeqError):
        session(Message.user("a")).state.check_pin(2)


def test_view_served_is_remembered() -> None:
    """The last served view's seq and hash are kept for recovery checks."""
    s = session(Message.user("a"))
    s.record(ViewServed(through_seq=1, estimated_tokens=0, view_hash="h"))
    assert (s.state.last_view_seq, s.state.last_view_hash) == (1, "h")


def test_unknown_to_domain_events_change_nothing_but_the_count() -> None:
    """TranscriptExported is ignored by the fold."""
    s = session(Message.user("a"))
    before = s.state.copy()
    s.record(TranscriptExported(path="x", messages=1))
    assert s.state.events_applied == before.events_applied + 1
    assert s.state.history == before.history


def test_head_is_system_before_first_user() -> None:
    """System messages before the first user message are the head; later ones are not."""
    s = session(Message.system("a"), Message.user("u"), Message.system("b"))
    assert [m.content for m in s.state.head] == ["a"]
    assert not s.state.is_head(s.state.history[2])


def test_every_system_message_is_head_without_a_user() -> None:
    """With no user message yet, every system message is before the first user message."""
    s = session(Message.system("a"), Message.assistant("x"), Message.system("b"))
    assert [m.content for m in s.state.head] == ["a", "b"]


def test_boundaries_are_user_and_assistant_messages() -> None:
    """Cuts are allowed at user and assistant messages, never at tool or system messages."""
    s = session(Message.system("s"), Message.user("u"), *step("c1", "o"), Message.assistant("d"))
    assert s.state.boundaries == [2, 3, 5]
    assert s.state.user_seqs == [2]


def test_pin_group_of_a_result_holds_the_whole_exchange() -> None:
    """A pinned result brings its call and the call's sibling results."""
    s = session(Message.user("u"), Message.assistant("", [call("c1"), call("c2")]))
    s.append_many([Message.tool("one", "c1"), Message.tool("two", "c2")])
    assert s.state.pin_group(4) == (2, 3, 4)
    assert s.state.pin_group(1) == (1,)


def test_copy_is_independent() -> None:
    """Changing a copy leaves the original alone."""
    s = session(Message.user("a"))
    other = s.state.copy()
    other.apply(MessageAppended(message=Message.assistant("b").with_seq(2)))
    other.apply(MessagePinned(seq=1))
    assert s.state.last_seq == 1 and s.state.pins == set()
    assert s.state.boundaries == [1]


def test_snapshot_round_trips() -> None:
    """from_snapshot(to_snapshot()) encodes to the same bytes and compares equal."""
    s = session(Message.system("s"), *rounds(2), *step("c1", "out"))
    s.pin(2)
    s.record_usage(40)
    restored = SessionState.from_snapshot(s.state.to_snapshot())
    assert restored.to_snapshot() == s.state.to_snapshot()
    assert restored == s.state
    assert restored.boundaries == s.state.boundaries


def test_snapshot_plus_tail_equals_full_replay() -> None:
    """Folding the tail onto a snapshot gives the full replay, byte for byte."""
    s = session(*rounds(3))
    s.record_usage(10)
    s.extend(step("c1", "out"))
    middle = 4
    partial = s.replay(s.events[:middle])
    resumed = SessionState.from_snapshot(partial.to_snapshot())
    for event in s.events[middle:]:
        resumed.apply(event)
    assert resumed.to_snapshot() == s.replay().to_snapshot() == s.state.to_snapshot()


def test_snapshot_of_another_version_is_refused() -> None:
    """A snapshot with an unknown version raises EventDecodeError."""
    import msgspec

    data = msgspec.msgpack.encode({"version": 999})
    with pytest.raises(EventDecodeError, match="version 999"):
        SessionState.from_snapshot(data)


def test_garbage_snapshot_is_refused() -> None:
    """Bytes that are not a snapshot raise EventDecodeError."""
    with pytest.raises(EventDecodeError):
        SessionState.from_snapshot(b"\xc1not msgpack")
