"""Fact extraction, the fact block, and how the block keeps facts in the view."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from ctxledger import Config, Message, ToolCall
from ctxledger.domain import (
    CharTokenizer,
    CompactionPlan,
    _fact_extract,
    assemble,
    build_view,
    complete_compaction,
    fact_index_chars,
    plan_compaction,
)
from ctxledger.domain._fact_runs import Runs
from ctxledger.domain.facts import (
    BLOCK_HEADER,
    Fact,
    extract_facts,
    fact_block,
    merge_facts,
    parse_fact_block,
    shown_text,
)
from ctxledger.testing import DomainSession

TOKENS = CharTokenizer()


def _bash(call_id: str, command: str) -> ToolCall:
    return ToolCall(call_id, "bash", json.dumps({"command": command}))


def _facts(*messages: Message) -> set[tuple[str, str]]:
    return {(fact.kind, fact.text) for fact in extract_facts(messages)}


def test_each_kind_is_extracted() -> None:
    """Paths, commands, errors, identifiers, numbers and request lines are found."""
    call = _bash("c1", "cd /repo && python -m pytest tests/test_dur.py::test_sign -x")
    facts = _facts(
        Message.user("Fix parse() in src/dur.py; each run must stay under 30 s.").with_seq(2),
        Message.assistant("Running the test.", [call]).with_seq(3),
        Message.tool(
            "tests/test_dur.py F\nE   AssertionError: assert 3 == -3\n<returncode>1</returncode>",
            "c1",
            "bash",
        ).with_seq(4),
    )
    assert {
        ("path", "src/dur.py"),
        ("path", "tests/test_dur.py"),
        ("command", "cd /repo && python -m pytest tests/test_dur.py::test_sign -x"),
        ("error", "E AssertionError: assert 3 == -3"),
        ("identifier", "tests/test_dur.py::test_sign"),
        ("identifier", "parse()"),
        ("number", "30 s"),
        ("request", "Fix parse() in src/dur.py; each run must stay under 30 s."),
    } <= facts


def test_errors_in_a_file_view_are_code_not_failures() -> None:
    """Error lines in the output of ``cat`` are the file's text, not a failure."""
    call = _bash("c1", "cat src/errors.py")
    facts = _facts(
        Message.assistant("", [call]).with_seq(1),
        Message.tool("class ParseError(ValueError):\n    raise ParseError('x')", "c1", "bash"),
    )
    assert not any(kind == "error" for kind, _ in facts)


def test_a_failed_command_without_an_error_line_reports_its_last_line() -> None:
    """A non-zero exit that printed no error line counts its last line as the error."""
    call = _bash("c1", "make lint")
    facts = _facts(
        Message.assistant("", [call]).with_seq(1),
        Message.tool(
            "<returncode>2</returncode>\nchecking\nsrc/a.py:3:1: W291 trailing whitespace",
            "c1",
            "bash",
        ),
    )
    assert ("error", "src/a.py:3:1: W291 trailing whitespace") in facts


def test_code_written_by_a_tool_call_yields_its_definitions() -> None:
    """A file an editor call creates contributes its definitions and its path."""
    call = ToolCall(
        "c1",
        "str_replace_editor",
        json.dumps(
            {"command": "create", "path": "/repo/src/sign.py", "file_text": "def flip(x):\n  pass"}
        ),
    )
    facts = _facts(Message.assistant("", [call]).with_seq(5))
    assert {("identifier", "flip"), ("path", "/repo/src/sign.py")} <= facts
    assert not any(kind == "command" for kind, _ in facts)


def test_paths_seen_only_in_output_are_not_named() -> None:
    """A path only a listing shows is a fact with named=False; naming it elsewhere wins."""
    call = _bash("c1", "ls src")
    found = extract_facts(
        [
            Message.assistant("Look at src/b.py next.", [call]).with_seq(1),
            Message.tool("src/a.py\nsrc/b.py", "c1", "bash").with_seq(2),
        ]
    )
    named = {fact.text: fact.named for fact in found if fact.kind == "path"}
    assert named == {"src/a.py": False, "src/b.py": True}


def test_facts_carry_the_newest_seq_and_are_deterministic() -> None:
    """A repeated fact carries the newest message holding it; extraction is repeatable."""
    messages = [
        Message.user("edit src/app.py").with_seq(2),
        Message.assistant("done with src/app.py").with_seq(7),
    ]
    found = extract_facts(messages)
    assert next(f for f in found if f.text == "src/app.py").seq == 7
    assert extract_facts(messages) == found


def test_shown_text_includes_decoded_commands() -> None:
    """A command JSON-escaped in a call's arguments is found in the view text."""
    call = _bash("c1", 'grep -n "def parse" src/dur.py')
    text = shown_text([Message.assistant("", [call])])
    assert 'grep -n "def parse" src/dur.py' in text


def test_block_lists_what_the_view_lacks_newest_first_within_the_limit() -> None:
    """Shown facts are left out; lines are newest first; the block fits its limit."""
    facts = [
        Fact(kind="path", text="src/old.py", seq=3),
        Fact(kind="error", text="E KeyError: 'x'", seq=9),
        Fact(kind="command", text="pytest -x", seq=5),
        Fact(kind="path", text="src/shown.py", seq=8),
    ]
    block = fact_block(facts, "the view shows src/shown.py", 1000)
    assert block.splitlines() == [
        BLOCK_HEADER,
        "#9 ! E KeyError: 'x'",
        "#5 $ pytest -x",
        "#3 src/old.py",
    ]
    assert len(block) <= 1000
    assert fact_block(facts, "", len(BLOCK_HEADER)) == ""


def test_a_short_block_chooses_errors_and_commands_before_paths() -> None:
    """When not all fit, errors and commands go first, then named paths, output paths last."""
    facts = [
        Fact(kind="path", text="src/listing_only.py", seq=10, named=False),
        Fact(kind="path", text="src/named.py", seq=9),
        Fact(kind="error", text="E ValueError: bad", seq=2),
    ]
    room = len(BLOCK_HEADER) + len("\n#2 ! E ValueError: bad") + len("\n#9 src/named.py")
    block = fact_block(facts, "", room)
    assert "E ValueError: bad" in block and "src/named.py" in block
    assert "listing_only" not in block and len(block) <= room


def test_a_fact_inside_a_chosen_line_is_not_listed_twice() -> None:
    """A path written out in a listed command needs no line of its own."""
    facts = [
        Fact(kind="command", text="pytest tests/test_a.py", seq=4),
        Fact(kind="path", text="tests/test_a.py", seq=4),
    ]
    assert fact_block(facts, "", 500).count("tests/test_a.py") == 1


def test_block_parses_back_to_its_facts() -> None:
    """parse_fact_block reads kinds, texts and seqs back (what later checkpoints carry)."""
    facts = [
        Fact(kind="error", text="E KeyError: 'x'", seq=9),
        Fact(kind="command", text="pytest -x", seq=5),
        Fact(kind="request", text="please fix the sign", seq=4),
        Fact(kind="identifier", text="test_sign", seq=4),
        Fact(kind="path", text="src/old.py", seq=3),
    ]
    assert parse_fact_block(fact_block(facts, "", 2000)) == facts


def test_merge_keeps_one_fact_per_text_with_the_newest_seq() -> None:
    """Carried and new facts merge; the newest seq and any named occurrence win."""
    merged = merge_facts(
        [Fact(kind="path", text="a.py", seq=3, named=False)],
        [Fact(kind="path", text="a.py", seq=7)],
    )
    assert merged == [Fact(kind="path", text="a.py", seq=7, named=True)]


# --- the block in a checkpoint ----------------------------------------------------------------


def _forgetful(request: Any) -> str:
    """A summariser that keeps nothing but a title (every fact is left to the block)."""
    return "Summary."


def _session(**config: Any) -> DomainSession:
    base = {"context_window": 4000, "min_retain_rounds": 1, "micro_keep_recent": 1000}
    session = DomainSession(Config(**{**base, **config}), summarizer=_forgetful)
    session.append(Message.system("rules"))
    for n in range(14):
        call = _bash(f"c{n}", f"python -m pytest tests/test_case_{n}.py -x")
        session.append(Message.user(f"round {n}: fix src/pkg/mod_{n}.py " + "u" * 300))
        session.append(Message.assistant("running", [call]))
        session.append(Message.tool(f"E   AssertionError: case {n} failed\n" + "o" * 300, call.id))
        session.append(Message.assistant("next " + "a" * 300))
    return session


def test_a_checkpoint_lists_the_facts_its_summary_lost() -> None:
    """With a summary that keeps nothing, the block brings the lost facts back into the view."""
    session = _session()
    assert session.compact_if_needed().compacted
    checkpoint = session.state.active_checkpoint
    assert checkpoint is not None and checkpoint.facts.startswith(BLOCK_HEADER)
    view = build_view(session.state, tokenizer=TOKENS)
    summary = next(m for m in view.messages if m.role == "summary")
    assert summary.content == "Summary.\n\n" + checkpoint.facts
    assert "$ python -m pytest tests/test_case_0.py -x" in checkpoint.facts
    assert len(checkpoint.facts) <= fact_index_chars(session.state.config)


def test_without_room_the_checkpoint_has_no_block_and_renders_as_before() -> None:
    """fact_index_chars=0: no block; the summary message is the summary alone."""
    session = _session(fact_index_chars=0)
    assert session.compact_if_needed().compacted
    checkpoint = session.state.active_checkpoint
    assert checkpoint is not None and checkpoint.facts == ""
    view = build_view(session.state, tokenizer=TOKENS)
    assert next(m for m in view.messages if m.role == "summary").content == "Summary."


def test_the_planner_reserves_the_block_and_the_view_stays_below_the_threshold() -> None:
    """The cut is sized with the block at full size: the compacted view fits."""
    on, off = _session(), _session(fact_index_chars=0)
    plan_on = plan_compaction(on.state, tokenizer=TOKENS)
    plan_off = plan_compaction(off.state, tokenizer=TOKENS)
    assert isinstance(plan_on, CompactionPlan) and isinstance(plan_off, CompactionPlan)
    assert plan_on.fact_chars > 0 == plan_off.fact_chars
    assert plan_on.retain_from_seq >= plan_off.retain_from_seq
    result = on.compact_if_needed()
    assert result.compacted and result.estimated_tokens < result.threshold
    assert plan_on.planned_tokens >= build_view(on.state, tokenizer=TOKENS).view_tokens


def test_a_later_checkpoint_carries_the_earlier_block() -> None:
    """Facts of an earlier checkpoint's block stay listed while they have room."""
    session = _session(fact_index_chars=3000, context_window=8000)
    assert session.compact().compacted
    first = parse_fact_block(session.state.active_checkpoint.facts)  # type: ignore[union-attr]
    for n in range(14, 18):
        session.append_many(
            [Message.user(f"round {n}: more"), Message.assistant("ok " + "b" * 300)]
        )
    assert session.compact().compacted
    later = {(f.kind, f.text) for f in parse_fact_block(session.state.active_checkpoint.facts)}  # type: ignore[union-attr]
    assert first and {(f.kind, f.text) for f in first if f.kind == "error"} <= later


def test_the_block_is_recomputed_identically() -> None:
    """complete_compaction is pure: the same state, plan and summary give the same block."""
    session = _session()
    plan = plan_compaction(session.state, tokenizer=TOKENS)
    assert isinstance(plan, CompactionPlan)
    made = [
        complete_compaction(
            session.state, plan, "Summary.", checkpoint_id="x", created_at=1.0, tokenizer=TOKENS
        )[0]
        for _ in range(2)
    ]
    assert made[0] == made[1] and made[0].facts


_COMMANDS = ["python -m pytest -x", "make lint", "git diff --stat", "ls src/pkg", "tox -e py311"]
_ERRORS = ["E KeyError: 'sign'", "E AssertionError: assert 3 == -3", "ValueError: bad duration"]


@st.composite
def _rounds(draw: st.DrawFn) -> list[list[Message]]:
    """A few user turns, each with a command, its output (maybe an error) and a reply."""
    rounds = []
    for n in range(draw(st.integers(2, 8))):
        command = f"{draw(st.sampled_from(_COMMANDS))} src/pkg/mod_{n}.py"
        call = _bash(f"c{n}", command)
        output = draw(st.sampled_from(_ERRORS)) if draw(st.booleans()) else "ok"
        rounds.append(
            [
                Message.user(f"round {n}: look at src/pkg/mod_{n}.py " + "u" * 200),
                Message.assistant(f"test_case_{n} next", [call]),
                Message.tool(output + "\n" + "o" * 200, call.id, "bash"),
                Message.assistant("done " + "a" * 200),
            ]
        )
    return rounds


@given(_rounds(), st.integers(1, 4), st.integers(2500, 6000))
def test_a_covered_fact_is_in_the_view_when_the_block_has_room(
    rounds: list[list[Message]], keep_every: int, room: int
) -> None:
    """Property: when the block has room for every fact the view lacks, every fact of the
    covered messages is shown (by the summary, the block or the rest of the view)."""

    def partial(request: Any) -> str:  # keeps the first line of every keep_every-th message
        kept = [m.content.splitlines()[0] for m in request.messages[::keep_every] if m.content]
        return "\n".join(kept)[: request.max_chars] or "Summary."

    config = Config(context_window=40_000, min_retain_rounds=1, fact_index_chars=room)
    session = DomainSession(config, summarizer=partial)
    for messages in rounds:
        session.extend(messages)
    plan = plan_compaction(session.state, tokenizer=TOKENS, trigger="manual")
    assert isinstance(plan, CompactionPlan)
    assert session.compact().compacted
    checkpoint = session.state.active_checkpoint
    assert checkpoint is not None and len(checkpoint.facts) <= plan.fact_chars
    covered = [f for f in extract_facts(plan.messages) if f.kind != "number"]
    without_block = msgspec.structs.replace(checkpoint, facts="")
    lacking = shown_text(assemble(session.state, without_block))
    shown = shown_text(build_view(session.state, tokenizer=TOKENS).messages)
    if len(fact_block(covered, lacking, 10**9)) <= plan.fact_chars:
        event("the block has room for every lacking fact")
        assert [f.text for f in covered if f.text not in shown] == []
    else:  # no room for all: whatever the block lists is shown, newest first
        listed = parse_fact_block(checkpoint.facts)
        assert all(fact.text in shown for fact in listed)
        assert [f.seq for f in listed] == sorted((f.seq for f in listed), reverse=True)


def test_the_memo_reads_one_result_by_the_call_it_answers() -> None:
    """One tool result object read under a viewer call and under a command: the memo keeps the
    facts of each apart (keyed by the call), so the error counts only after the command."""
    output = Message.tool("Traceback (most recent call last):\nValueError: bad", "c1", "bash")
    viewed = extract_facts([Message.assistant("", [_bash("c1", "cat log.txt")]), output])
    run = extract_facts([Message.assistant("", [_bash("c1", "python run.py")]), output])
    again = extract_facts([Message.assistant("", [_bash("c1", "cat log.txt")]), output])
    assert not any(fact.kind == "error" for fact in viewed)
    assert any(fact.kind == "error" for fact in run)
    assert again == viewed


def test_the_memo_changes_no_fact_and_stays_within_its_bounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Facts read from the memo equal those made afresh (seqs and order included), the memo
    holds no more than its bounds, and a message equal to a remembered one but not the same
    object is read afresh."""
    messages = [Message.user("Fix parse() in src/dur.py; it must stay under 30 s.").with_seq(1)]
    for n in range(40):
        messages += [
            Message.assistant(f"run {n}", [_bash(f"c{n}", f"pytest tests/t{n}.py")]).with_seq(
                2 * n + 2
            ),
            Message.tool(f"E   AssertionError: {n}\nsee src/m{n}.py", f"c{n}", "bash").with_seq(
                2 * n + 3
            ),
        ]
    made: list[int] = []
    real = _fact_extract._compute_adds

    def counted(message: Message, name: str | None, command: str | None) -> Any:
        made.append(message.seq or 0)
        return real(message, name, command)

    monkeypatch.setattr(_fact_extract, "_compute_adds", counted)
    monkeypatch.setattr(_fact_extract, "_memo", _fact_extract._Memo())
    monkeypatch.setattr(_fact_extract, "MEMO_SIZE", 50)
    first = extract_facts(messages)
    assert len(made) == len(messages)
    assert len(_fact_extract._memo.entries) == 50
    made.clear()
    assert extract_facts(messages[-50:]) == extract_facts(messages[-50:])
    assert made == []  # the newest 50 were remembered
    copies = [msgspec.structs.replace(m, seq=m.seq) for m in messages]
    assert extract_facts(copies) == first
    assert len(made) == len(messages)
    monkeypatch.setattr(_fact_extract, "MEMO_CHARS", 100)
    _fact_extract._memo.runs = Runs()  # the whole result is kept too: read the messages
    assert extract_facts(messages) == first
    assert _fact_extract._memo.chars <= 100
