"""ExtractiveSummarizer: what it keeps, how it merges, and how it stays within budget."""

from __future__ import annotations

import json

from ctxledger.messages import Message, ToolCall
from ctxledger.summarizers import ExtractiveSummarizer, SummaryRequest

summarize = ExtractiveSummarizer()


def bash(call_id: str, command: str) -> ToolCall:
    """A bash tool call running ``command``."""
    return ToolCall(call_id, "bash", json.dumps({"command": command}))


def numbered(*messages: Message, start: int = 1) -> list[Message]:
    """Give ``messages`` consecutive seqs from ``start``."""
    return [message.with_seq(start + i) for i, message in enumerate(messages)]


def session() -> list[Message]:
    """A small coding session: a request, a failing run, a fix, a passing run."""
    return numbered(
        Message.system("You are a coding agent."),
        Message.user("Fix issue #412: parse_config() crashes on empty files in src/app/config.py"),
        Message.assistant(
            "I'll reproduce it first.", [bash("c1", "python -m pytest tests/test_config.py -x")]
        ),
        Message.tool(
            "<returncode>1</returncode>\nTraceback (most recent call last):\n"
            '  File "src/app/config.py", line 12, in parse_config\n'
            "    return data['name']\nKeyError: 'name'\n",
            "c1", "bash",
        ),
        Message.assistant(
            "I decided to return an empty Config instead of raising. "
            "TODO: document the empty-file behaviour in README.md.",
            [ToolCall("c2", "str_replace_editor", json.dumps(
                {"command": "str_replace", "path": "src/app/config.py",
                 "old_str": "return data['name']", "new_str": "return data.get('name')"}))],
        ),
        Message.tool("The file src/app/config.py has been edited.", "c2", "str_replace_editor"),
        Message.assistant(
            "Running the tests again.", [bash("c3", "python -m pytest tests/test_config.py -x")]
        ),
        Message.tool("<returncode>0</returncode>\n3 passed in 0.02s", "c3", "bash"),
        Message.assistant("All tests pass now; the fix is verified."),
    )


def test_header_names_the_covered_seq_range() -> None:
    """The first line states which messages the summary covers."""
    text = summarize(SummaryRequest.of(session()))
    assert text.splitlines()[0] == "Summary of messages 1-9"


def test_header_without_seqs_counts_the_messages() -> None:
    """Messages without seqs are counted instead."""
    text = summarize(SummaryRequest.of([Message.user("hello there")]))
    assert text.splitlines()[0] == "Summary of 1 messages"


def test_keeps_the_user_request_verbatim() -> None:
    """A user request appears word for word, labelled with its seq."""
    text = summarize(SummaryRequest.of(session()))
    assert (
        "- [#2] Fix issue #412: parse_config() crashes on empty files in src/app/config.py"
        in text
    )


def test_multiline_request_continues_on_indented_lines() -> None:
    """Continuation lines of a request are indented, so the format stays parseable."""
    text = summarize(SummaryRequest.of(numbered(Message.user("first line\nsecond line"))))
    assert "- [#1] first line\n  second line" in text


def test_huge_request_keeps_head_and_tail() -> None:
    """A request far larger than the budget keeps its beginning and end and names the gap."""
    request = "BEGIN " + "filler words " * 2000 + " END"
    text = summarize(SummaryRequest.of(numbered(Message.user(request)), max_chars=3000))
    assert "[#1] BEGIN filler" in text and text.rstrip().endswith("END")
    assert "chars…]" in text and len(text) <= 3000


def test_keeps_shell_commands_from_tool_calls() -> None:
    """The command of each shell tool call is listed, repeats counted once."""
    text = summarize(SummaryRequest.of(session()))
    assert "- python -m pytest tests/test_config.py -x (x2)" in text


def test_keeps_paths_from_text_and_arguments() -> None:
    """Paths named in requests, arguments and commands all stay in the summary."""
    text = summarize(SummaryRequest.of(session()))
    for path in ("src/app/config.py", "tests/test_config.py", "README.md"):
        assert path in text


def test_path_already_in_a_command_is_not_listed_again() -> None:
    """A path spelled out in a kept command needs no line of its own under Files."""
    messages = numbered(
        Message.user("go"), Message.assistant("", [bash("c1", "cat setup.py")]),
        Message.tool("ok", "c1", "bash"),
    )
    text = summarize(SummaryRequest.of(messages))
    assert "- cat setup.py" in text and "- setup.py" not in text


def test_editor_call_is_an_action_not_a_shell_command() -> None:
    """An editor's ``command`` sub-command is shown with its path, and the edit text is not."""
    text = summarize(SummaryRequest.of(session()))
    assert "- str_replace_editor str_replace src/app/config.py" in text
    assert "data.get('name')" not in text


def test_heredoc_command_keeps_its_first_line_and_what_follows() -> None:
    """A long heredoc is shortened to its opening line, a line count and the trailing command."""
    command = "cat <<'EOF' > repro.py\n" + "print(1)\n" * 30 + "EOF\npython repro.py"
    messages = numbered(
        Message.user("go"), Message.assistant("", [bash("c1", command)]),
        Message.tool("1", "c1", "bash"),
    )
    text = summarize(SummaryRequest.of(messages))
    assert "- cat <<'EOF' > repro.py …30 lines… EOF python repro.py" in text


def test_keeps_the_exception_line_of_a_traceback_with_its_command() -> None:
    """A failed run is listed under Errors with its command, exit code and exception line."""
    text = summarize(SummaryRequest.of(session()))
    assert "- [#4] python -m pytest tests/test_config.py -x: exit 1 | KeyError: 'name'" in text


def test_keeps_a_non_zero_exit_code_without_error_text() -> None:
    """A command that failed silently is still an error."""
    messages = numbered(
        Message.user("go"), Message.assistant("", [bash("c1", "grep -q needle hay.txt")]),
        Message.tool("Exit code 1", "c1", "bash"),
    )
    text = summarize(SummaryRequest.of(messages))
    assert "- [#3] grep -q needle hay.txt: exit 1" in text


def test_silent_failure_keeps_the_last_output_line() -> None:
    """A failed command without an error line is explained by its last line of output."""
    messages = numbered(
        Message.user("go"), Message.assistant("", [bash("c1", "python3 -m pytest")]),
        Message.tool(
            "<returncode>1</returncode>\n<output>\n/usr/bin/python3: No module named pytest\n"
            "</output>", "c1", "bash",
        ),
    )
    text = summarize(SummaryRequest.of(messages))
    assert "- [#3] python3 -m pytest: exit 1 | /usr/bin/python3: No module named pytest" in text


def test_error_words_in_a_viewed_file_are_not_errors() -> None:
    """``ValueError:`` inside a file that was only displayed is code, not a failure."""
    messages = numbered(
        Message.user("go"), Message.assistant("", [bash("c1", "cat src/errors.py")]),
        Message.tool("<returncode>0</returncode>\nValueError: shown in a docstring", "c1", "bash"),
    )
    text = summarize(SummaryRequest.of(messages))
    assert "## Errors" not in text


def test_keeps_identifiers_and_issue_numbers() -> None:
    """Function names, CamelCase names and issue numbers are listed."""
    messages = numbered(
        Message.user("Issue 77: `load_settings` breaks ConfigLoader, see #1234"),
        Message.assistant("model_to_dict() is called by ConfigLoader.load()."),
    )
    text = summarize(SummaryRequest.of(messages))
    identifiers = text.split("## Identifiers")[1]
    for name in ("load_settings", "ConfigLoader", "#1234", "model_to_dict", "ConfigLoader.load"):
        assert f"- {name}" in identifiers


def test_keeps_decisions() -> None:
    """An explicit decision of the assistant is listed under Decisions."""
    text = summarize(SummaryRequest.of(session()))
    assert "- I decided to return an empty Config instead of raising." in text


def test_keeps_open_todos() -> None:
    """A TODO of the assistant is listed under Open TODOs."""
    text = summarize(SummaryRequest.of(session()))
    assert "## Open TODOs\n- TODO: document the empty-file behaviour in README.md." in text


def test_latest_assistant_text_is_the_current_state() -> None:
    """The last thing the assistant said is marked as the latest state."""
    text = summarize(SummaryRequest.of(session()))
    assert "- Latest: All tests pass now; the fix is verified." in text


def test_system_messages_are_not_summarised() -> None:
    """System messages head every view, so the summary does not repeat them."""
    text = summarize(SummaryRequest.of(session()))
    assert "coding agent" not in text


def test_focus_is_stated_and_lines_about_it_are_kept() -> None:
    """The focus is named under the header and lines mentioning its keywords are collected."""
    messages = numbered(
        Message.user("refactor the client"),
        Message.assistant("", [bash("c1", "grep -n 'def ' client.py")]),
        Message.tool("12:def fetch(url: str, timeout: float) -> Response:\n40:x = 1", "c1", "bash"),
    )
    text = summarize(SummaryRequest.of(messages, focus="keep the fetch signature"))
    assert text.splitlines()[1] == "Focus: keep the fetch signature"
    assert "## Focus\n- [#3] 12:def fetch(url: str, timeout: float) -> Response:" in text


def test_focus_items_survive_a_tight_budget() -> None:
    """Under a small budget, items about the focus outrank the others in their section."""
    commands = [bash(f"c{i}", f"ls dir{i}") for i in range(30)]
    messages = numbered(
        Message.user("look around"),
        Message.assistant("", [*commands[:15], bash("cz", "pytest tests/test_zebra.py"),
                                *commands[15:]]),
        *(Message.tool("ok", call.id, "bash") for call in [*commands, bash("cz", "x")]),
    )
    text = summarize(SummaryRequest.of(messages, focus="zebra", max_chars=400))
    assert "pytest tests/test_zebra.py" in text
    assert len(text) <= 400


def test_never_longer_than_max_chars() -> None:
    """The summary fits the request's max_chars even when the input is much larger."""
    text = summarize(SummaryRequest.of(session() * 20, max_chars=500))
    assert 0 < len(text) <= 500


def test_own_max_chars_caps_every_request() -> None:
    """The summariser's own max_chars applies when it is below the request's."""
    text = ExtractiveSummarizer(max_chars=300)(SummaryRequest.of(session(), max_chars=5000))
    assert len(text) <= 300


def test_zero_budget_gives_an_empty_summary() -> None:
    """No room means an empty summary (compaction then reports summary_unavailable)."""
    assert summarize(SummaryRequest.of(session(), max_chars=0)) == ""


def test_budget_smaller_than_the_header_cuts_the_header() -> None:
    """Even a budget smaller than the header is respected."""
    text = summarize(SummaryRequest.of(session(), max_chars=10))
    assert text == "Summary o…"


def test_requests_are_kept_before_anything_else() -> None:
    """With room for one section only, it is the user requests (dropped last)."""
    expected = (
        "Summary of messages 1-9\n## User requests\n"
        "- [#2] Fix issue #412: parse_config() crashes on empty files in src/app/config.py"
    )
    assert summarize(SummaryRequest.of(session(), max_chars=len(expected))) == expected


def test_is_deterministic() -> None:
    """The same request gives the same bytes, from the same or a new summariser."""
    request = SummaryRequest.of(session(), focus="config", max_chars=1200)
    assert summarize(request) == summarize(request) == ExtractiveSummarizer()(request)


def test_merges_the_previous_summary_without_duplicates() -> None:
    """Items of the previous summary appear once, next to the new ones."""
    first = summarize(SummaryRequest.of(session()[:5]))
    later = numbered(
        Message.user("Also handle missing files in src/app/loader.py"),
        Message.assistant("", [bash("c9", "python -m pytest tests/test_config.py -x")]),
        Message.tool("<returncode>0</returncode>\n4 passed", "c9", "bash"),
        start=10,
    )
    text = summarize(SummaryRequest.of(later, previous_summary=first))
    assert text.splitlines()[0] == "Summary of messages 1-12"
    assert text.count("Fix issue #412") == 1
    assert "- [#10] Also handle missing files in src/app/loader.py" in text
    commands = text.split("## Commands")[1].split("##")[0]
    assert commands.count("python -m pytest tests/test_config.py -x") == 1
    assert "- python -m pytest tests/test_config.py -x (x2)" in commands
    assert "KeyError: 'name'" in text


def test_summary_of_nothing_new_is_the_previous_summary() -> None:
    """Merging a summary with no new messages gives it back unchanged."""
    previous = summarize(SummaryRequest.of(session(), max_chars=900))
    assert summarize(SummaryRequest.of([], previous_summary=previous, max_chars=900)) == previous


def test_previous_focus_is_kept_as_an_earlier_focus() -> None:
    """A later compaction without focus keeps the earlier focus as an item."""
    previous = summarize(SummaryRequest.of(session(), focus="the config parser"))
    text = summarize(SummaryRequest.of([], previous_summary=previous))
    assert "- Earlier focus: the config parser" in text


def test_newest_items_win_when_the_merged_summary_is_too_long() -> None:
    """When old and new items do not both fit, the old commands are dropped first."""
    old = numbered(
        Message.user("start"),
        Message.assistant("", [bash(f"o{i}", f"echo old-{i}") for i in range(20)]),
        *(Message.tool("ok", f"o{i}", "bash") for i in range(20)),
    )
    previous = summarize(SummaryRequest.of(old))
    new = numbered(
        Message.assistant("", [bash(f"n{i}", f"echo new-{i}") for i in range(20)]),
        *(Message.tool("ok", f"n{i}", "bash") for i in range(20)),
        start=30,
    )
    text = summarize(SummaryRequest.of(new, previous_summary=previous, max_chars=450))
    assert "echo new-19" in text and "echo old-0" not in text


def test_unstructured_previous_summary_is_mined_for_facts() -> None:
    """A free-text previous summary (another summariser's) keeps its paths and its gist."""
    previous = "We refactored src/db/pool.py and decided to use asyncpg instead of psycopg2."
    request = SummaryRequest.of(numbered(Message.user("next step")), previous_summary=previous)
    text = summarize(request)
    assert "src/db/pool.py" in text
    assert "Earlier summary: We refactored src/db/pool.py" in text


def test_compact_summary_message_is_mined_not_quoted_as_a_request() -> None:
    """Claude Code's /compact summary (a user message) is treated as an earlier summary."""
    compact = Message(role="user", name="compact_summary", content="Worked on api/server.ts.")
    text = summarize(SummaryRequest.of(numbered(compact)))
    assert "## User requests" not in text
    assert "Earlier summary: Worked on api/server.ts." in text
