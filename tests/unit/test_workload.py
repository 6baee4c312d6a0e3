"""The built-in workload generator: deterministic, valid, realistically sized conversations."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from ctxledger.domain.tokenizer import message_chars
from ctxledger.messages import Message
from ctxledger.tooling.traces import read_trace, write_trace
from ctxledger.tooling.workload import (
    MAX_MESSAGE_CHARS,
    MIN_MESSAGE_CHARS,
    generate_conversation,
    iter_agent_steps,
    take_messages,
    workload_stats,
)

STEPS = 400


@pytest.fixture(scope="module")
def conversation() -> list[Message]:
    """A long conversation shared by the read-only tests of this module."""
    return generate_conversation(7, steps=STEPS)


def _results(messages: list[Message], tool: str) -> list[str]:
    names = {call.id: call.name for m in messages for call in m.tool_calls}
    return [m.content for m in messages if m.role == "tool" and names[m.tool_call_id] == tool]


def test_same_seed_gives_the_same_conversation() -> None:
    """Generation is a function of the seed."""
    assert generate_conversation(3, steps=60) == generate_conversation(3, steps=60)


def test_different_seeds_give_different_conversations() -> None:
    """Seeds select different conversations."""
    assert generate_conversation(3, steps=20) != generate_conversation(4, steps=20)


def test_shorter_conversation_is_a_prefix_of_a_longer_one() -> None:
    """The first N steps do not depend on how many steps are asked for."""
    short, long = generate_conversation(5, steps=50), generate_conversation(5, steps=90)
    assert long[: len(short)] == short


def test_generation_uses_no_global_random_state() -> None:
    """Generating leaves the global random state alone and is not affected by it."""
    state = random.getstate()
    first = generate_conversation(9, steps=30)
    assert random.getstate() == state
    random.seed(12345)
    generate_conversation(10, steps=30)
    assert generate_conversation(9, steps=30) == first


def test_steps_concatenate_to_the_conversation() -> None:
    """iter_agent_steps yields the conversation's messages, step by step."""
    steps = list(iter_agent_steps(11, steps=70))
    assert len(steps) == 70
    assert [m for step in steps for m in step] == generate_conversation(11, steps=70)


def test_each_step_is_what_an_agent_appends_before_a_model_call() -> None:
    """Steps are [system, user], [assistant with calls, its results], or [assistant, user]."""
    steps = list(iter_agent_steps(12, steps=200))
    assert [m.role for m in steps[0]] == ["system", "user"]
    for step in steps[1:]:
        head, rest = step[0], step[1:]
        assert head.role == "assistant"
        if head.tool_calls:
            assert [m.tool_call_id for m in rest] == [call.id for call in head.tool_calls]
            assert [m.name for m in rest] == [call.name for call in head.tool_calls]
        else:
            assert [m.role for m in rest] == ["user"]


def test_every_call_is_answered_and_ids_are_unique(conversation: list[Message]) -> None:
    """Tool-call ids never repeat and each is answered by exactly one tool result."""
    call_ids = [call.id for m in conversation for call in m.tool_calls]
    answers = [m.tool_call_id for m in conversation if m.role == "tool"]
    assert len(set(call_ids)) == len(call_ids)
    assert sorted(answers) == sorted(call_ids)


def test_conversation_is_a_valid_trace(conversation: list[Message], tmp_path: Path) -> None:
    """The trace writer's pairing checks accept the conversation, and it reads back equal."""
    path = write_trace(tmp_path / "workload.jsonl", conversation)
    assert read_trace(path) == conversation


def test_tool_call_arguments_are_json_objects(conversation: list[Message]) -> None:
    """Every call's arguments decode to a JSON object."""
    for message in conversation:
        for call in message.tool_calls:
            assert isinstance(json.loads(call.arguments), dict)


@pytest.mark.parametrize("seed", range(8))
def test_message_sizes_stay_in_the_documented_range(seed: int) -> None:
    """Every message is between MIN_MESSAGE_CHARS and MAX_MESSAGE_CHARS."""
    sizes = [message_chars(m) for m in generate_conversation(seed, steps=150)]
    assert min(sizes) >= MIN_MESSAGE_CHARS
    assert max(sizes) <= MAX_MESSAGE_CHARS


def test_tool_results_span_hundreds_of_bytes_to_tens_of_kilobytes(
    conversation: list[Message],
) -> None:
    """Tool results range from under 1 KB to over 20 KB, with a median of a few KB or less."""
    sizes = sorted(message_chars(m) for m in conversation if m.role == "tool")
    assert sizes[0] < 1000
    assert sizes[-1] > 20_000
    assert 500 <= sizes[len(sizes) // 2] <= 5000


def test_every_tool_kind_parallel_calls_and_new_user_turns_occur(
    conversation: list[Message],
) -> None:
    """The mix has all five tools, some parallel calls, and several user turns."""
    stats = workload_stats(conversation)
    assert set(stats.tool_calls) == {"bash", "edit_file", "grep", "read_file", "run_tests"}
    assert stats.parallel_steps > 0
    assert stats.user_turns > 5


def test_content_holds_file_paths(conversation: list[Message]) -> None:
    """Grep results name source files with line numbers, and reads name their file."""
    grep_hit = re.compile(r"^src/\w+/\w+/\w+\.py:\d+:")
    assert all(grep_hit.search(out) for out in _results(conversation, "grep"))
    paths = [json.loads(c.arguments)["path"] for m in conversation for c in m.tool_calls
             if c.name == "read_file"]
    assert all(re.fullmatch(r"src/\w+/\w+/\w+\.py", path) for path in paths)


def test_content_holds_shell_commands(conversation: list[Message]) -> None:
    """Bash calls carry commands such as git, ls, sed and python."""
    commands = [json.loads(c.arguments)["command"] for m in conversation for c in m.tool_calls
                if c.name == "bash"]
    assert {command.split()[0] for command in commands} >= {"git", "ls", "sed", "python"}


def test_content_holds_error_lines(conversation: list[Message]) -> None:
    """Failing pytest runs show 'E   SomeError: ...' lines and tracebacks end in error lines."""
    logs = "\n".join(_results(conversation, "run_tests"))
    assert re.search(r"^E   \w+Error: .+$", logs, re.MULTILINE)
    assert re.search(r"^FAILED tests/\S+::test_\w+ - \w+Error", logs, re.MULTILINE)
    shell = "\n".join(_results(conversation, "bash"))
    assert re.search(r'^  File "/workspace/\S+\.py", line \d+, in \w+$', shell, re.MULTILINE)


def test_take_messages_returns_a_prefix_of_the_requested_length() -> None:
    """take_messages cuts the endless conversation after exactly count messages."""
    taken = take_messages(2, 333)
    assert len(taken) == 333
    assert generate_conversation(2, steps=300)[:333] == taken


def test_zero_steps_give_an_empty_conversation() -> None:
    """No steps, no messages."""
    assert generate_conversation(1, steps=0) == []


def test_negative_steps_are_rejected() -> None:
    """A negative step count is a caller error."""
    with pytest.raises(ValueError, match="steps must be >= 0"):
        generate_conversation(1, steps=-1)


def test_stats_count_messages_by_role(conversation: list[Message]) -> None:
    """workload_stats counts every message once per role and once under 'all'."""
    stats = workload_stats(conversation)
    per_role = sum(row[0] for role, row in stats.sizes.items() if role != "all")
    assert per_role == stats.sizes["all"][0] == stats.messages == len(conversation)
    assert stats.total_chars == sum(message_chars(m) for m in conversation)


def test_stats_print_as_a_table(conversation: list[Message]) -> None:
    """str() of the stats is a table with a row per role and the tool-call counts."""
    table = str(workload_stats(conversation))
    assert table.splitlines()[0].split() == ["role", "count", "min", "p50", "p90", "p99", "max"]
    assert all(role in table for role in ("system", "user", "assistant", "tool", "all"))
    assert "tool calls: bash" in table


def test_stats_of_no_messages_are_zero() -> None:
    """An empty list has zero counts rather than raising."""
    stats = workload_stats([])
    assert (stats.messages, stats.total_chars, stats.sizes["all"]) == (0, 0, (0, 0, 0, 0, 0, 0))
