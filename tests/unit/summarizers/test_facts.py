"""The fact extractors behind the extractive summariser: paths, commands, errors, prose."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ctxledger.domain import extract as ex
from ctxledger.summarizers import _prose


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("edit src/app/config.py now", ["src/app/config.py"]),
        ("ran ./manage.py and ../tools/run.sh", ["./manage.py", "../tools/run.sh"]),
        ("at /testbed/django/forms/models.py:86: in f", ["/testbed/django/forms/models.py"]),
        ("config in ~/.config/app/settings.toml.", ["~/.config/app/settings.toml"]),
        ("open setup.py, then README.md", ["setup.py", "README.md"]),
        ("--- a/src/x.py\n+++ b/src/x.py", ["src/x.py", "src/x.py"]),
        ("docs at https://example.com/docs/page?x=1", ["https://example.com/docs/page"]),
    ],
)
def test_paths_are_found(text: str, expected: list[str]) -> None:
    """Rooted, relative and bare file paths and web links are found, without trailing dots."""
    assert list(ex.paths(text)) == expected


@pytest.mark.parametrize(
    "text",
    [
        "and/or input/output",
        "<output>done</output>",
        "sed -i 's/old_name/new_name/g'",
        "cd /path/to/your/project",
        "django.conf is a module",
        "version 1/2",
    ],
)
def test_non_paths_are_skipped(text: str) -> None:
    """Prose slashes, closing tags, sed expressions, placeholders and modules are no paths."""
    assert list(ex.paths(text)) == []


def test_shell_command_is_read_from_arguments() -> None:
    """``command``, ``cmd`` and argv lists are shell commands."""
    assert ex.command_of("bash", {"command": "ls -la"}) == "ls -la"
    assert ex.command_of("shell", {"cmd": ["git", "status"]}) == "git status"


def test_editor_sub_command_is_not_a_shell_command() -> None:
    """A one-word ``command`` next to a ``path`` belongs to an editor tool."""
    assert ex.command_of("str_replace_editor", {"command": "view", "path": "a.py"}) is None


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("ls -la", "ls -la"),
        ("cat <<'EOF' > t.py\nx = 1\nEOF", "cat <<'EOF' > t.py …1 lines… EOF"),
        ("python -c 'import sys\nprint(sys.path)'", "python -c 'import sys …+1 lines"),
    ],
)
def test_commands_are_shortened_to_one_line(command: str, expected: str) -> None:
    """Multi-line commands keep their first line and say what was left out."""
    assert ex.shorten_command(command) == expected


def test_long_command_keeps_head_and_tail() -> None:
    """A very long single-line command keeps both ends within the limit."""
    command = "grep -rn " + "x" * 300 + " src/final_target.py"
    short = ex.shorten_command(command, limit=120)
    assert len(short) <= 120
    assert short.startswith("grep -rn xxx") and short.endswith("src/final_target.py")


@given(st.text(), st.integers(0, 400))
def test_clip_middle_never_exceeds_the_limit(text: str, limit: int) -> None:
    """Head, marker and tail together fit the limit; short texts are unchanged."""
    clipped = ex.clip_middle(text, limit)
    assert len(clipped) <= limit
    if len(text) <= limit:
        assert clipped == text


@given(st.text(min_size=1), st.integers(40, 300))
# Found by a random run of `make test` (issue 25): the first line and the line count were each
# sized against the other's full length, so the result was 41 characters.
@example(command="0000000000000000000000000000000\n0", limit=40)
def test_shortened_command_is_one_line_within_the_limit(command: str, limit: int) -> None:
    """Any command, however long or multi-line, becomes one line of at most ``limit``."""
    short = ex.shorten_command(command, limit)
    assert "\n" not in short and len(short) <= limit


@pytest.mark.parametrize(
    ("output", "code"),
    [
        ("<returncode>2</returncode>\n<output>", 2),
        ("Exit code 127\n/bin/bash: python: command not found", 127),
        ("done\n[The command completed with exit code 1.]", 1),
        ("all good", None),
    ],
)
def test_exit_code_is_read_from_harness_markers(output: str, code: int | None) -> None:
    """The exit code of mini-swe-agent, Claude Code and OpenHands outputs is found."""
    assert ex.exit_code(output) == code


def test_traceback_becomes_its_exception_line() -> None:
    """A traceback is reduced to the line naming the exception."""
    output = (
        "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
        "    import missing\nModuleNotFoundError: No module named 'missing'\n"
    )
    assert ex.error_lines(output, viewer=False) == [
        "ModuleNotFoundError: No module named 'missing'"
    ]


def test_pytest_failures_are_error_lines() -> None:
    """FAILED lines and the failure count of a pytest run are errors."""
    output = "FAILED tests/test_a.py::test_one - assert 1 == 2\n=== 1 failed, 3 passed in 0.1s ==="
    assert ex.error_lines(output, viewer=False) == [
        "FAILED tests/test_a.py::test_one - assert 1 == 2",
        "=== 1 failed, 3 passed in 0.1s ===",
    ]


def test_code_that_handles_errors_is_not_an_error_line() -> None:
    """``except ValueError:`` and ``raise TypeError(...)`` are code, not failures."""
    output = "try:\n    x()\nexcept ValueError:\n    raise TypeError('bad')\n"
    assert ex.error_lines(output, viewer=False) == []


def test_sentences_are_classified_by_kind() -> None:
    """Decisions, intentions, TODOs and results are told apart."""
    text = (
        "THOUGHT: We decided to use msgspec instead of json. I'll run the tests. "
        "We still need to update the docs. All tests passed."
    )
    assert list(_prose.sentences(text)) == [
        ("decision", "We decided to use msgspec instead of json."),
        ("intent", "I'll run the tests."),
        ("todo", "We still need to update the docs."),
        ("done", "All tests passed."),
    ]


def test_todo_marker_is_case_sensitive() -> None:
    """``TODO`` is a marker; the word "todo" in a name is not."""
    assert list(_prose.sentences("Created the todo-app folder here.")) == [
        ("done", "Created the todo-app folder here.")
    ]


def test_identifiers_in_prose() -> None:
    """Code-like names in prose are found; plain words are not."""
    text = "Call `parse_args()` in ArgParser.run(), see #123 and v1.2.3; print fields."
    assert set(_prose.identifiers(text, prose=True)) == {
        "parse_args()", "parse_args", "ArgParser.run", "ArgParser", "#123", "1.2.3",
    }


def test_identifiers_in_code_are_its_definitions() -> None:
    """In code written by a tool call, only defined names count."""
    code = "class Loader:\n    def load_all(self):\n        return helper_fn(1)\n"
    assert list(_prose.identifiers(code, prose=False)) == ["Loader", "load_all"]


def test_focus_keywords_ignore_stop_words_and_plurals() -> None:
    """"keep the API signatures" looks for "api" and "signature"."""
    pattern = _prose.focus_pattern("keep the API signatures")
    assert pattern is not None
    assert pattern.search("the signature of fetch()") and pattern.search("Api change")
    assert not pattern.search("keep the rest")
