"""The projection fold: order, head, pins, summary, hash and purity."""

from __future__ import annotations

import msgspec

from ctxledger import Message
from ctxledger.domain import (
    COMPACT_CHECKPOINT,
    FULL_HISTORY,
    CharTokenizer,
    build_view,
)
from ctxledger.events import CheckpointCreated

from .builders import call, rounds, session, step
from .builders import checkpoint as _checkpoint

TOKENS = CharTokenizer()


def _with_checkpoint(s: object, retain_from: int) -> None:
    s.record(CheckpointCreated(compaction_id="c", checkpoint=_checkpoint(retain_from)))  # type: ignore[attr-defined]


def _roles_and_seqs(s: object) -> list[tuple[str, int | None]]:
    view = build_view(s.state, tokenizer=TOKENS)  # type: ignore[attr-defined]
    return [(m.role, m.seq) for m in view.messages]


def test_view_without_checkpoint_is_history() -> None:
    """No checkpoint: the view is history in order, mode full_history."""
    s = session(Message.system("s"), *rounds(2))
    view = build_view(s.state, tokenizer=TOKENS)
    assert list(view.messages) == s.state.history
    assert (view.mode, view.checkpoint_id, view.retain_from_seq) == (FULL_HISTORY, None, 1)


def test_view_with_checkpoint_is_head_summary_tail() -> None:
    """[system] + [summary] + [seq >= retain_from_seq]."""
    s = session(Message.system("s"), *rounds(3), keep_first_request=False)
    _with_checkpoint(s, 4)
    view = build_view(s.state, tokenizer=TOKENS)
    assert [(m.role, m.seq) for m in view.messages] == [
        ("system", 1),
        ("summary", None),
        ("user", 4),
        ("assistant", 5),
        ("user", 6),
        ("assistant", 7),
    ]
    assert (view.mode, view.checkpoint_id, view.retain_from_seq) == (COMPACT_CHECKPOINT, "cp1", 4)


def test_summary_message_carries_the_checkpoint_range() -> None:
    """The summary is shown once with its checkpoint id and coverage in metadata."""
    s = session(*rounds(3))
    _with_checkpoint(s, 3)
    summaries = [m for m in build_view(s.state, tokenizer=TOKENS).messages if m.role == "summary"]
    assert len(summaries) == 1
    assert summaries[0].content == "SUMMARY"
    assert summaries[0].metadata == {
        "checkpoint_id": "cp1",
        "covers_through_seq": 2,
        "retain_from_seq": 3,
    }


def test_head_leads_even_when_a_system_message_follows_assistant_output() -> None:
    """With no user message, later system messages are head too and lead the view."""
    s = session(Message.system("a"), Message.assistant("x"), Message.system("b"))
    assert _roles_and_seqs(s) == [("system", 1), ("system", 3), ("assistant", 2)]


def test_mid_conversation_system_message_stays_in_place() -> None:
    """A system message after the first user message is part of its round."""
    s = session(Message.user("u"), Message.system("note"), Message.assistant("a"))
    assert _roles_and_seqs(s) == [("user", 1), ("system", 2), ("assistant", 3)]


def test_pinned_covered_message_is_shown_before_the_summary() -> None:
    """[system] + [pinned] + [summary] + [tail]."""
    s = session(Message.system("s"), *rounds(3))
    s.pin(2)
    _with_checkpoint(s, 4)
    assert _roles_and_seqs(s)[:3] == [("system", 1), ("user", 2), ("summary", None)]


def test_pinned_message_in_the_tail_is_shown_once() -> None:
    """A pin at or after the cut appears only in the tail."""
    s = session(*rounds(3))
    s.pin(5)
    _with_checkpoint(s, 3)
    assert [seq for _, seq in _roles_and_seqs(s)].count(5) == 1


def test_pinned_tool_result_brings_its_whole_exchange() -> None:
    """Pinning a covered result shows its call and sibling results, so the view stays valid."""
    s = session(
        Message.user("u"),
        Message.assistant("", [call("c1"), call("c2")]),
        keep_first_request=False,
    )
    s.append_many([Message.tool("one", "c1"), Message.tool("two", "c2"), *rounds(2)])
    s.pin(3)
    _with_checkpoint(s, 5)
    assert _roles_and_seqs(s)[:4] == [("assistant", 2), ("tool", 3), ("tool", 4), ("summary", None)]


def test_view_hash_is_stable_across_builds_and_replays() -> None:
    """Same state, same bytes and hash; a replayed state gives the same hash."""
    s = session(Message.system("s"), *rounds(3), *step("c1", "out" * 100))
    _with_checkpoint(s, 4)
    first = build_view(s.state, tokenizer=TOKENS)
    second = build_view(s.replay(), tokenizer=TOKENS)
    assert msgspec.msgpack.encode(first) == msgspec.msgpack.encode(second)
    assert first.view_hash == second.view_hash
    assert len(first.view_hash) == 64


def test_view_hash_changes_with_content() -> None:
    """A different message makes a different hash."""
    one = build_view(session(Message.user("a")).state, tokenizer=TOKENS)
    two = build_view(session(Message.user("b")).state, tokenizer=TOKENS)
    assert one.view_hash != two.view_hash


def test_view_reports_seq_and_tokens() -> None:
    """through_seq is the newest seq; view_tokens counts the messages; estimate adds pending."""
    s = session(Message.user("a" * 30), Message.assistant("b" * 30))
    view = build_view(s.state, tokenizer=TOKENS, pending="p" * 30)
    assert (view.through_seq, view.view_tokens, view.estimated_tokens) == (2, 20, 30)


def test_building_a_view_leaves_the_state_alone() -> None:
    """Projection is pure: the state's snapshot is unchanged."""
    s = session(*rounds(3), *step("c1", "x" * 100_000))
    _with_checkpoint(s, 3)
    before = s.state.to_snapshot()
    build_view(s.state, tokenizer=TOKENS)
    assert s.state.to_snapshot() == before


def test_large_history_view_holds_only_the_tail() -> None:
    """With a checkpoint near the end, the view holds the head, summary and tail only."""
    s = session(Message.system("s"), *rounds(500))
    _with_checkpoint(s, 995)
    view = build_view(s.state, tokenizer=TOKENS)
    assert [m.seq for m in view.messages] == [1, 2, None, *range(995, 1002)]
