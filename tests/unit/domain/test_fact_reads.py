"""What each message gives the fact block, read in one place and kept in another.

A summary worker process reads the facts of the messages its summary covers
(:func:`message_reads`, on copies decoded from the plan it was sent) and the host keeps them
(:func:`remember_reads`): the checkpoint's fact block, made on the history actor when the summary
is activated, then reads no message again, and lists exactly what it lists when it reads them.
"""

from __future__ import annotations

import msgspec
import pytest

from ctxledger import Message, ToolCall
from ctxledger.domain import _fact_extract
from ctxledger.domain.facts import extract_facts, message_reads, remember_reads
from ctxledger.tooling.workload import take_messages


def _copies(messages: list[Message]) -> list[Message]:
    """The messages as another process decodes them: equal, not the same objects."""
    encoded = msgspec.msgpack.encode(messages)
    return msgspec.msgpack.decode(encoded, type=list[Message])


@pytest.fixture
def made(fact_reads: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The messages read afresh (the memo starts empty)."""
    return fact_reads


def test_reads_made_elsewhere_give_the_same_facts_and_no_message_is_read_again(
    made: list[tuple[str, int]],
) -> None:
    messages = list(take_messages(3, 120))
    elsewhere = message_reads(_copies(messages))
    assert len(made) == len(messages)
    made.clear()
    assert remember_reads(messages, elsewhere)
    kept = extract_facts(messages)
    assert made == []
    _fact_extract._memo = _fact_extract._Memo()
    assert kept == extract_facts(messages)  # read afresh: the same facts, seqs and order
    assert len(made) == len(messages)


def test_a_tool_result_is_kept_under_the_call_it_answers(made: list[tuple[str, int]]) -> None:
    """The reads follow the calls among the messages: a result answering a command keeps its
    error, and the same result object answering a file viewer is read afresh."""
    output = Message.tool("Traceback (most recent call last):\nValueError: bad", "c1", "bash")
    run = [Message.assistant("", [ToolCall("c1", "bash", '{"command": "python run.py"}')]), output]
    assert remember_reads(run, message_reads(_copies(run)))
    made.clear()
    assert any(fact.kind == "error" for fact in extract_facts(run))
    assert made == []
    viewed = [Message.assistant("", [ToolCall("c1", "bash", '{"command": "cat log.txt"}')]), output]
    assert not any(fact.kind == "error" for fact in extract_facts(viewed))
    assert [seq for _, seq in made] == [0, 0]  # the new call, and the result under it


def test_reads_of_other_messages_are_not_kept(made: list[tuple[str, int]]) -> None:
    messages = list(take_messages(1, 30))
    reads = message_reads(messages)
    assert not remember_reads(messages[:-1], reads)
    assert not remember_reads(messages, reads[:-1])
    assert _fact_extract._memo.entries == {}
    summary = Message(role="summary", content="Summary of messages 1-9", seq=None)
    assert remember_reads([summary, *messages], reads)  # summaries give nothing: skipped
