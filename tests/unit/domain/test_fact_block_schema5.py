"""The fact block under Config schema 5: paths grouped per message, the kept request's lines last.

A listing's paths take the room of their own text (one line per message, not per path), and the
lines of the kept first request that its head-and-tail excerpt leaves out come after every other
fact (the marker names its seq: a recall away). A Config of schema 4 writes its blocks as it did.
"""

from __future__ import annotations

from ctxledger import Config, Message, ToolCall
from ctxledger.domain.facts import (
    BLOCK_HEADER,
    Fact,
    fact_block,
    parse_fact_block,
)
from ctxledger.testing import DomainSession


def _paths(seq: int, count: int) -> list[Fact]:
    return [
        Fact(kind="path", text=f"src/pkg/module_{seq}_{k}.py", seq=seq, named=False)
        for k in range(count)
    ]


def test_paths_of_one_message_share_a_line_and_read_back() -> None:
    """Grouped: one line per message; parse(grouped=True) gives every path back, in order."""
    facts = [*_paths(7, 3), *_paths(5, 2), Fact(kind="error", text="E boom", seq=6)]
    block = fact_block(facts, "", 2_000, group_paths=True)
    lines = block.split("\n")
    assert lines[0] == BLOCK_HEADER
    assert lines[1] == "#7 src/pkg/module_7_0.py src/pkg/module_7_1.py src/pkg/module_7_2.py"
    assert lines[2] == "#6 ! E boom"
    assert lines[3] == "#5 src/pkg/module_5_0.py src/pkg/module_5_1.py"
    back = parse_fact_block(block, grouped=True)
    assert [(f.kind, f.text, f.seq) for f in back] == [
        (f.kind, f.text, f.seq) for f in (*_paths(7, 3), facts[-1], *_paths(5, 2))
    ]


def test_grouping_fits_more_paths_in_the_same_room_and_keeps_the_limit() -> None:
    """The room a line prefix took is left for more paths; the block never exceeds its limit."""
    facts = _paths(9, 200)
    for limit in (300, 1_000, 3_000):
        grouped = fact_block(facts, "", limit, group_paths=True)
        plain = fact_block(facts, "", limit)
        assert len(grouped) <= limit and len(plain) <= limit
        assert len(parse_fact_block(grouped, grouped=True)) > len(parse_fact_block(plain))


def test_an_ungrouped_block_reads_the_same_either_way() -> None:
    """A block written before the grouping (one path a line) parses alike with grouped=True."""
    block = fact_block([*_paths(3, 4), Fact(kind="identifier", text="parse", seq=2)], "", 2_000)
    assert parse_fact_block(block, grouped=True) == parse_fact_block(block)


def test_the_kept_requests_lines_come_after_the_paths() -> None:
    """With little room, a request line of a message shown in part loses to paths; a request
    line of another user message still comes first."""
    kept = [Fact(kind="request", text=f"step {k} of the task statement", seq=2) for k in range(5)]
    later = Fact(kind="request", text="and also fix the docs please", seq=40)
    facts = [*kept, later, *_paths(30, 6)]
    block = fact_block(facts, "", 300, shown_in_part=(2,), group_paths=True)
    listed = parse_fact_block(block, grouped=True)
    assert later in listed
    shown = {(fact.kind, fact.text, fact.seq) for fact in listed}
    assert all((path.kind, path.text, path.seq) in shown for path in _paths(30, 6))
    assert not any(fact.seq == 2 for fact in listed)
    # Without the exception the task's lines come before the paths.
    first = parse_fact_block(fact_block(facts, "", 300, group_paths=True), grouped=True)
    assert any(fact.seq == 2 for fact in first)


TASK = "\n".join(
    f"Requirement {k}: keep the sign of negative values in case {k}." for k in range(120)
)


def _session(schema: int) -> DomainSession:
    """A long task, then tool steps listing paths until a compaction covers the task."""
    config = Config(
        context_window=6_000, min_retain_rounds=1, micro_keep_recent=1_000, schema_version=schema
    )
    session = DomainSession(config)
    session.append_many([Message.system("You are a coding agent."), Message.user(TASK)])
    for n in range(200):
        call = ToolCall(f"call-{n}", "bash", '{"command": "find src"}')
        listing = "\n".join(f"src/pkg_{n}/module_{k}.py" for k in range(12))
        session.append_many(
            [Message.assistant(f"step {n}", [call]), Message.tool(listing, call.id)]
        )
        session.step()
        if session.state.checkpoints:
            break
    assert session.state.checkpoints
    return session


def test_a_schema_5_checkpoint_lists_paths_before_the_tasks_omitted_lines() -> None:
    """The first checkpoint of a schema-5 session: the task is shown in part (a tenth of the
    target), its omitted lines yield to the listings' paths, grouped per message; schema 4
    lists the task's lines first, one path a line."""
    new = _session(5).state.active_checkpoint
    old = _session(4).state.active_checkpoint
    assert new is not None and old is not None
    new_facts = parse_fact_block(new.facts, grouped=True)
    old_facts = parse_fact_block(old.facts)
    new_paths = [f for f in new_facts if f.kind == "path"]
    assert new_paths and any(" " in line for line in new.facts.split("\n")[1:])
    assert not any(" " in f.text for f in old_facts if f.kind == "path")
    old_requests = [f for f in old_facts if f.kind == "request" and f.seq == 2]
    assert old_requests  # schema 4: the task's lines go first
    new_requests = [f for f in new_facts if f.kind == "request" and f.seq == 2]
    assert len(new_requests) < len(old_requests)
