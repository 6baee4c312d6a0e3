"""The facts of a run of messages extracted once, found again for the same run or a chain of runs.

A prepared summary is often a chain of background jobs, each covering what the session grew
since the last; each job extracts the facts of its own messages where nobody waits (its
compaction thread, or its worker process: ``remember_facts``). When the summary is activated the
checkpoint's fact block asks for the facts of all of them at once, on the history actor:
:class:`~ctxledger.domain._fact_runs.Runs` answers from the kept runs, exactly what one reading
of the messages gives, and reads no message; it answers nothing it cannot answer exactly (other
objects, a run whose tool result answers a call of the run before).
"""

from __future__ import annotations

import itertools

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxledger import Message, ToolCall
from ctxledger.domain import _fact_extract, _fact_runs
from ctxledger.domain._fact_runs import RUNS, closed
from ctxledger.domain.facts import extract_facts, remember_facts
from ctxledger.tooling.workload import take_messages


def _session(seed: int, count: int) -> list[Message]:
    """A seeded conversation's first ``count`` messages, with seqs as a session gives them."""
    return [
        msgspec.structs.replace(message, seq=seq)
        for seq, message in enumerate(take_messages(seed, count), start=1)
    ]


def _fresh(messages: list[Message]) -> list:
    """The facts of ``messages`` read afresh (nothing kept, nothing found)."""
    return extract_facts([msgspec.structs.replace(m) for m in messages], keep=False)


def _cuts(messages: list[Message]) -> list[int]:
    """Where a compaction may cut: before a message that is no tool result."""
    return [index for index, message in enumerate(messages) if message.role != "tool"]


def test_a_chain_of_runs_is_answered_without_reading_a_message(
    fact_reads: list[tuple[str, int]],
) -> None:
    messages = _session(4, 160)
    cuts = [0, *[c for c in _cuts(messages) if c % 40 < 3][1:], len(messages)]
    runs = [messages[a:b] for a, b in itertools.pairwise(cuts) if b > a]
    assert len(runs) >= 3
    for run in runs:
        extract_facts(run)  # as each job's compaction thread does
    fact_reads.clear()
    found = extract_facts(list(messages))  # another list of the same messages
    assert fact_reads == []
    assert found == _fresh(messages)


def test_facts_made_elsewhere_are_kept_for_their_messages(
    fact_reads: list[tuple[str, int]],
) -> None:
    messages = _session(5, 80)
    copies = msgspec.msgpack.decode(msgspec.msgpack.encode(messages), type=list[Message])
    remember_facts(messages, extract_facts(copies))  # as a worker process answers
    expected = _fresh(messages)
    fact_reads.clear()
    assert extract_facts(messages) == expected
    assert fact_reads == []
    assert extract_facts(messages[:-1]) == _fresh(messages[:-1])  # not a kept run: read
    assert fact_reads != []


def test_other_objects_with_equal_content_are_read() -> None:
    messages = _session(6, 40)
    extract_facts(messages)
    copies = [msgspec.structs.replace(m) for m in messages]
    assert _fact_extract._memo.runs.find(copies) is None
    assert _fact_extract._memo.runs.find(messages) == [tuple(_fresh(messages))]


def test_a_run_whose_tool_result_answers_a_call_before_it_is_not_joined() -> None:
    """Read together, the result is read as the output of `python run.py` (an error); read on
    its own, as an unknown tool's (no error line is taken): the runs are not joined."""
    call = Message.assistant("", [ToolCall("c1", "bash", '{"command": "python run.py"}')])
    call = msgspec.structs.replace(call, seq=1)
    result = msgspec.structs.replace(
        Message.tool("Traceback (most recent call last):\nValueError: bad", "c1", "bash"), seq=2
    )
    follow = msgspec.structs.replace(Message.user("go on"), seq=3)
    assert not closed([result, follow])
    extract_facts([call])
    extract_facts([result, follow])
    assert _fact_extract._memo.runs.find([call, result, follow]) is None
    together = extract_facts([call, result, follow])
    assert any(fact.kind == "error" for fact in together)
    assert together == _fresh([call, result, follow])


def test_only_the_latest_runs_are_kept() -> None:
    messages = _session(7, RUNS + 10)
    for message in messages:
        extract_facts([message])
    assert _fact_extract._memo.runs.find(messages[:1]) is None
    assert _fact_extract._memo.runs.find(messages[-1:]) == [tuple(_fresh(messages[-1:]))]


@pytest.fixture(autouse=True)
def _empty_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_fact_extract, "_memo", _fact_extract._Memo())


@given(
    seed=st.integers(min_value=0, max_value=20),
    count=st.integers(min_value=1, max_value=90),
    picks=st.lists(st.integers(min_value=0, max_value=89), max_size=6),
    start=st.integers(min_value=0, max_value=89),
    numbered=st.booleans(),
)
def test_whatever_runs_were_kept_a_reading_gives_the_facts_of_one_reading(
    seed: int, count: int, picks: list[int], start: int, numbered: bool
) -> None:
    """Runs cut anywhere (a call apart from its result too), of messages with seqs or without
    (all count as seq 0: then whether a fact is named decides the merge)."""
    _fact_extract._memo = _fact_extract._Memo()
    messages = _session(seed, count) if numbered else take_messages(seed, count)
    bounds = sorted({0, len(messages), *(p for p in picks if p < len(messages))})
    for a, b in itertools.pairwise(bounds):
        extract_facts(messages[a:b])
    asked = messages[min(start, len(messages) - 1) :]
    assert extract_facts(asked) == _fresh(asked)
    assert extract_facts(messages) == _fresh(messages)


def test_the_runs_hold_messages_of_a_bounded_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run holds its messages: the characters they hold are bounded as the memo's are."""
    monkeypatch.setattr(_fact_runs, "RUN_CHARS", 5_000)
    messages = _session(8, 60)
    sizes = [len(m.content) + sum(len(c.arguments) for c in m.tool_calls) for m in messages]
    for message in messages:
        extract_facts([message])
    runs = _fact_extract._memo.runs
    assert 0 < runs.chars <= 5_000
    kept = [m for m in messages if runs.find([m]) is not None]
    assert sum(sizes[messages.index(m)] for m in kept) == runs.chars
    assert kept == messages[len(messages) - len(kept) :]  # the newest
    whole = sum(sizes)
    assert whole > 5_000
    extract_facts(messages)  # too large to keep: nothing else goes
    assert runs.find(messages) is None
    assert [m for m in messages if runs.find([m]) is not None] == kept
