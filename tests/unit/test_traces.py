"""Reading, validating and writing trace files (the ../shared/traces JSONL format)."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from ctxledger.errors import InvalidMessageError, TraceFormatError
from ctxledger.messages import Message, ToolCall
from ctxledger.tooling.traces import iter_trace, read_trace, validate_trace, write_trace

# The same folder conftest's ``traces`` fixture reads (tests is not a package, so re-derived).
TRACES_DIR = Path(
    os.environ.get("CTXLEDGER_TRACES", Path(__file__).resolve().parents[3] / "shared" / "traces")
)

USER = {"role": "user", "content": "fix the failing test"}
CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [{"id": "c1", "name": "bash", "arguments": '{"command": "ls"}'}],
}
RESULT = {"role": "tool", "content": "README.md", "tool_call_id": "c1", "name": "bash"}


def _file(tmp_path: Path, *lines: object) -> Path:
    """Write one line per item: dicts as JSON, str and bytes verbatim."""
    path = tmp_path / "trace.jsonl"
    with path.open("wb") as out:
        for line in lines:
            if isinstance(line, dict):
                line = json.dumps(line)
            out.write((line.encode() if isinstance(line, str) else line) + b"\n")
    return path


def _error(path: Path, **kwargs: bool) -> TraceFormatError:
    with pytest.raises(TraceFormatError) as info:
        read_trace(path, **kwargs)
    return info.value


# --- the real traces ----------------------------------------------------------------------------


@pytest.mark.traces
def test_reader_agrees_with_a_plain_json_parse_on_every_real_trace(
    traces: dict[str, list[Message]],
) -> None:
    """read_trace gives the same messages as a plain line-by-line JSON parse on every trace."""
    for stem in traces:
        path = TRACES_DIR / f"{stem}.jsonl"
        assert read_trace(path) == _plain_parse(path), stem


@pytest.mark.traces
def test_every_real_trace_validates(traces: dict[str, list[Message]]) -> None:
    """validate_trace finds no problem in any real trace."""
    for stem in traces:
        assert validate_trace(TRACES_DIR / f"{stem}.jsonl") == [], stem


@pytest.mark.traces
def test_real_traces_round_trip_byte_for_byte(
    traces: dict[str, list[Message]], tmp_path: Path
) -> None:
    """write_trace reproduces every real trace file byte for byte."""
    for stem, messages in traces.items():
        out = write_trace(tmp_path / f"{stem}.jsonl", messages)
        assert out.read_bytes() == (TRACES_DIR / f"{stem}.jsonl").read_bytes(), stem


# --- reading ------------------------------------------------------------------------------------


def test_iter_trace_numbers_lines_counting_blank_ones(tmp_path: Path) -> None:
    """Line numbers are 1-based and count blank lines, as an editor shows them."""
    path = _file(tmp_path, USER, "", "   ", CALL, RESULT)
    assert [number for number, _ in iter_trace(path)] == [1, 4, 5]


def test_read_trace_builds_messages_with_tool_calls(tmp_path: Path) -> None:
    """Tool calls, tool_call_id and name are carried into the messages."""
    path = _file(tmp_path, USER, CALL, RESULT)
    assert read_trace(path) == [
        Message.user("fix the failing test"),
        Message.assistant("", [ToolCall("c1", "bash", '{"command": "ls"}')]),
        Message.tool("README.md", "c1", "bash"),
    ]


def test_error_names_file_and_line(tmp_path: Path) -> None:
    """The error carries path and line, and its message reads '<path>:<line>: <reason>'."""
    path = _file(tmp_path, USER, "{not json")
    error = _error(path)
    assert (error.path, error.line) == (path, 2)
    assert str(error).startswith(f"{path}:2: not valid JSON")


def test_trace_format_error_is_an_invalid_message_error(tmp_path: Path) -> None:
    """Callers that catch InvalidMessageError also catch bad trace lines."""
    assert isinstance(_error(_file(tmp_path, "[]")), InvalidMessageError)


def test_trace_format_error_survives_pickling() -> None:
    """A TraceFormatError keeps path, line and message through pickle (e.g. from a worker)."""
    error = pickle.loads(pickle.dumps(TraceFormatError("a.jsonl", 7, "bad")))
    assert (error.path, error.line, error.reason, str(error)) == (
        Path("a.jsonl"), 7, "bad", "a.jsonl:7: bad"
    )


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", "not valid JSON"),
        (b'{"role": "user", "content": "\xff"}', "UTF-8"),
        ('["user", "hi"]', "Expected `object`"),
        ({"role": "robot", "content": "x"}, "unknown role 'robot'"),
        ({"role": "summary", "content": "x"}, "unknown role 'summary'"),
        ({"role": "user"}, "missing required field `content`"),
        ({"role": "user", "content": 3}, "Expected `str`, got `int` - at `$.content`"),
        ({"role": "user", "content": "x", "tool_call": []}, "unknown field `tool_call`"),
        ({**CALL, "tool_calls": [{"id": "c", "name": "bash", "arguments": "{"}]}, "valid JSON"),
        ({**CALL, "tool_calls": [{"id": "c", "name": "bash", "arguments": "[1]"}]}, "JSON object"),
        ({**CALL, "tool_calls": [{"id": "c1", "name": "bash"}]}, "missing required field"),
        ({"role": "tool", "content": "x"}, "needs a tool_call_id"),
        ({"role": "user", "content": "x", "tool_calls": CALL["tool_calls"]}, "only assistant"),
    ],
)
def test_malformed_line_is_rejected(tmp_path: Path, line: object, reason: str) -> None:
    """Each kind of malformed line raises TraceFormatError naming that line and the problem."""
    error = _error(_file(tmp_path, USER, line))
    assert error.line == 2
    assert reason in error.reason


def test_tool_result_answering_no_earlier_call_is_rejected(tmp_path: Path) -> None:
    """A tool result whose call has not been made yet is a bad line."""
    error = _error(_file(tmp_path, USER, RESULT, CALL))
    assert (error.line, error.reason) == (
        2, "tool result answers no earlier tool call (tool_call_id 'c1')"
    )


def test_second_answer_to_one_call_is_rejected(tmp_path: Path) -> None:
    """A call is answered exactly once."""
    error = _error(_file(tmp_path, USER, CALL, RESULT, RESULT))
    assert (error.line, error.reason) == (
        4, "tool result answers call 'c1', already answered on line 3"
    )


def test_repeated_tool_call_id_is_rejected(tmp_path: Path) -> None:
    """Tool-call ids are unique within a file, across messages."""
    error = _error(_file(tmp_path, USER, CALL, RESULT, CALL))
    assert (error.line, error.reason) == (4, "tool call id 'c1' already used on line 2")


def test_tool_result_named_after_another_tool_is_rejected(tmp_path: Path) -> None:
    """A tool result's name must be the name of the tool that was called."""
    error = _error(_file(tmp_path, USER, CALL, {**RESULT, "name": "grep"}))
    assert error.line == 3
    assert "named 'grep' but call 'c1' (line 2) called 'bash'" in error.reason


def test_unanswered_call_is_reported_at_the_line_that_made_it(tmp_path: Path) -> None:
    """A call never answered by the end of the file is reported on the assistant's line."""
    error = _error(_file(tmp_path, USER, CALL, USER))
    assert (error.line, error.reason) == (2, "tool call 'c1' (bash) is never answered")


def test_allow_pending_accepts_a_trailing_unanswered_call(tmp_path: Path) -> None:
    """allow_pending=True reads a trace cut off after a call was made."""
    assert len(read_trace(_file(tmp_path, USER, CALL), allow_pending=True)) == 2


def test_iter_trace_yields_good_lines_before_raising(tmp_path: Path) -> None:
    """The streaming reader yields every line before the bad one, then raises."""
    seen = []
    with pytest.raises(TraceFormatError):
        for number, _ in iter_trace(_file(tmp_path, USER, CALL, RESULT, "oops")):
            seen.append(number)
    assert seen == [1, 2, 3]


def test_validate_trace_collects_every_bad_line(tmp_path: Path) -> None:
    """validate_trace returns all problems, sorted by line, instead of stopping at the first."""
    path = _file(tmp_path, "oops", USER, {"role": "robot", "content": ""}, RESULT, USER, "[]")
    assert [(error.line, error.reason[:20]) for error in validate_trace(path)] == [
        (1, "not valid JSON: JSON"),
        (3, "unknown role 'robot'"),
        (4, "tool result answers "),
        (6, "bad message: Expecte"),
    ]


def test_validate_trace_does_not_blame_results_of_a_bad_call_line(tmp_path: Path) -> None:
    """The results of an unreadable assistant line are not reported a second time."""
    bad_call = {**CALL, "content": 5}
    path = _file(tmp_path, USER, bad_call, RESULT)
    assert [error.line for error in validate_trace(path)] == [2]


def test_validate_trace_of_a_good_file_is_empty(tmp_path: Path) -> None:
    """A valid file has no problems."""
    assert validate_trace(_file(tmp_path, USER, CALL, RESULT)) == []


def test_missing_file_raises_os_error(tmp_path: Path) -> None:
    """A missing file is an OSError, not a format error."""
    with pytest.raises(FileNotFoundError):
        read_trace(tmp_path / "absent.jsonl")


# --- writing ------------------------------------------------------------------------------------


def test_write_then_read_gives_equal_messages_without_seq(tmp_path: Path) -> None:
    """write_trace drops seq and metadata; reading back gives the same messages otherwise."""
    messages = [
        Message.system("be brief"),
        Message.user("héllo ✓").with_seq(2),
        Message.assistant("", [ToolCall("a", "grep", '{"pattern": "x"}'), ToolCall("b", "ls")]),
        Message.tool("b-out", "b", "ls"),
        Message.tool("a-out", "a"),
        Message(role="user", content="summary", name="compact_summary", metadata={"k": 1}),
    ]
    out = write_trace(tmp_path / "out.jsonl", messages)
    expected = [
        Message(role=m.role, content=m.content, tool_calls=m.tool_calls,
                tool_call_id=m.tool_call_id, name=m.name)
        for m in messages
    ]
    assert read_trace(out) == expected


def test_write_refuses_unpaired_messages_and_leaves_file_untouched(tmp_path: Path) -> None:
    """An invalid sequence raises at the line it would have had, and nothing is written."""
    target = tmp_path / "t.jsonl"
    target.write_text("old\n")
    with pytest.raises(TraceFormatError) as info:
        write_trace(target, [Message.user("x"), Message.tool("y", "nope")])
    assert info.value.line == 2
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


def test_write_refuses_summary_messages(tmp_path: Path) -> None:
    """Summary messages exist only in model views and are not part of the trace format."""
    with pytest.raises(TraceFormatError, match="role 'summary'"):
        write_trace(tmp_path / "t.jsonl", [Message(role="summary", content="s")])


def test_write_refuses_unanswered_calls_unless_pending_allowed(tmp_path: Path) -> None:
    """A trailing unanswered call needs allow_pending, as on reading."""
    messages = [Message.user("x"), Message.assistant("", [ToolCall("c", "bash")])]
    with pytest.raises(TraceFormatError, match="never answered"):
        write_trace(tmp_path / "t.jsonl", messages)
    out = write_trace(tmp_path / "t.jsonl", messages, allow_pending=True)
    assert read_trace(out, allow_pending=True) == messages


def _plain_parse(path: Path) -> list[Message]:
    """The oracle: each line parsed with json and turned into a Message, nothing checked."""
    messages = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        raw = json.loads(line)
        messages.append(
            Message(
                role=raw["role"],
                content=raw.get("content", ""),
                tool_calls=tuple(
                    ToolCall(call["id"], call["name"], call["arguments"])
                    for call in raw.get("tool_calls", ())
                ),
                tool_call_id=raw.get("tool_call_id"),
                name=raw.get("name"),
            )
        )
    return messages
