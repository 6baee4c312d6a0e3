"""The head and tail of a view under a checkpoint that is not active, kept for one decision."""

from __future__ import annotations

from ctxledger import Checkpoint, Message
from ctxledger.domain import assemble
from ctxledger.domain.projection import assemble_counted

from .builders import checkpoint, rounds, session, step


def _checkpoint(retain_from: int, summary: str = "SUMMARY") -> Checkpoint:
    return checkpoint(retain_from, summary, reason="threshold_exceeded", cid="next")


def test_drafts_of_one_state_share_the_cut_parts() -> None:
    """Two views of one state with one cut show the same head and tail messages, and each has
    its own summary."""
    s = session(Message.system("s"), *rounds(4), *step("c1", "out " * 50))
    first = assemble(s.state, _checkpoint(4, "one"))
    second = assemble(s.state, _checkpoint(4, "two"))
    assert [m.content for m in first if m.role == "summary"] == ["one"]
    assert [m.content for m in second if m.role == "summary"] == ["two"]
    assert [m for m in first if m.role != "summary"] == [m for m in second if m.role != "summary"]
    assert assemble_counted(s.state, _checkpoint(4, "two")) == assemble_counted(
        s.state.copy(), _checkpoint(4, "two")
    )


def test_the_cut_parts_follow_the_state() -> None:
    """A view drafted again after an append or a pin shows them: what was kept for the state
    before is not served for the state after."""
    s = session(Message.system("s"), *rounds(4), keep_first_request=False)
    checkpoint = _checkpoint(6)
    before = assemble_counted(s.state, checkpoint)
    s.append(Message.user("appended since"))
    after = assemble_counted(s.state, checkpoint)
    assert after == assemble_counted(s.state.copy(), checkpoint)
    assert after != before
    assert after[0][-1].content == "appended since"
    s.pin(2)
    pinned = assemble_counted(s.state, checkpoint)
    assert pinned == assemble_counted(s.state.copy(), checkpoint)
    assert [m.seq for m in pinned[0]][:2] == [1, 2]


def test_another_cut_is_drafted_anew() -> None:
    """One state, two cuts: each view retains from its own cut."""
    s = session(Message.system("s"), *rounds(4), keep_first_request=False)
    early = assemble(s.state, _checkpoint(4))
    late = assemble(s.state, _checkpoint(6))
    assert next(m.seq for m in early if m.seq is not None and m.seq > 1) == 4
    assert next(m.seq for m in late if m.seq is not None and m.seq > 1) == 6
