"""Text extractors: file paths, shell commands, exit codes, error lines and code definitions.

One set of extractors serves both the fact index (:mod:`ctxledger.domain.facts`: the loss audit
and the checkpoint's fact block) and the offline :class:`~ctxledger.ExtractiveSummarizer`, so
that what the summary keeps and what the audit counts are recognised by the same rules.

Every pattern is compiled once here. The functions are pure and linear in their input, because
they run over tool results of up to a megabyte (a ``cat`` of a large file) on the hot path of a
compaction.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import msgspec

from ctxledger.domain._paths import has_extension, path_runs, paths
from ctxledger.domain._text_memo import TextMemo

__all__ = [
    "CONTENT_KEYS",
    "PATH_KEYS",
    "ErrorScan",
    "clip",
    "clip_middle",
    "command_of",
    "decode_arguments",
    "definitions",
    "distinct_lines",
    "error_line_at",
    "error_line_starts",
    "error_lines",
    "error_scan",
    "exit_code",
    "fenced_commands",
    "has_extension",
    "is_viewer",
    "keep_error_scan",
    "kept_error_scan",
    "last_line",
    "one_line",
    "path_runs",
    "paths",
    "shorten_command",
    "strip_tags",
]


#: Argument keys whose string values name a file or directory.
PATH_KEYS = frozenset(
    {"path", "file_path", "filepath", "file", "filename", "file_name", "dir", "directory",
     "notebook_path", "target_file", "target", "cwd"}
)
#: Argument keys that carry file contents or edit text rather than a path or a command.
CONTENT_KEYS = frozenset(
    {"content", "file_text", "new_str", "old_str", "new_string", "old_string", "text", "code",
     "search", "replace", "patch", "diff", "insert_text", "new_source", "edits"}
)
# Tools and commands whose output is file content: "Error" lines in it are code, not failures.
_VIEWER_TOOLS = frozenset(
    {"read", "open", "view", "goto", "scroll_up", "scroll_down", "search_file", "search_dir",
     "find_file", "grep", "glob", "ls", "webfetch", "notebookread"}
)
_VIEWER_COMMANDS = frozenset(
    {"cat", "head", "tail", "sed", "grep", "egrep", "rg", "ag", "ack", "find", "ls", "nl", "less",
     "more", "tree", "awk", "wc", "diff", "open", "goto", "search_file", "search_dir", "find_file",
     "scroll_up", "scroll_down", "view", "create", "str_replace", "insert", "undo_edit"}
)
_GIT_VIEWERS = frozenset({"show", "diff", "log", "grep", "blame", "status"})
_LEADING_CD = re.compile(r"^(?:\s*(?:cd\s+\S+|[A-Z_][A-Z0-9_]*=\S*)\s*(?:&&|;)\s*)+")

# An error line starts (after indentation or pytest's "E") with an exception name followed by a
# colon or the end of the line, or contains one of the unmistakable failure phrases below. Lines
# are found with str.find on these needles first: a regex scan of every line of a megabyte of
# output costs far more than a few substring searches.
_ERROR_NEEDLES = (
    "Error", "Exception", "FAIL", "fatal:", "error:", "panic:", "Segmentation fault",
    "No such file", "command not found", "Permission denied", "timed out and has been",
    "Traceback (most recent call last)", " failed", " error",
)
# The failures of a call that only shows file content (the rest is the file's own text).
_VIEWER_NEEDLES = ("No such file", "command not found", "Permission denied", "fatal:")
# What makes a candidate line an error line: an exception name at its head, a word at its start,
# a phrase anywhere, or a pattern anywhere (searched for only when its literal is in the line: a
# lazy ".*?" before one alternation tried at each character cost ten times more).
_ERROR_HEAD = re.compile(
    r"[ \t]*(?:E[ \t]+)?(?:[A-Za-z_][\w.]*)?(?:Error|Exception)\b|ERROR\b|error:"
)
_ERROR_PHRASES = (
    "Segmentation fault", "No such file or directory", "command not found", "Permission denied",
    "timed out and has been", "Traceback (most recent call last)",
)
_ERROR_WORD_LITERALS = ("Error: ", "Exception: ", "FAIL", "fatal:", "panic:", " failed", " error")
_ERROR_WORD = re.compile(
    r"\w(?:Error|Exception): |\bFAILED\b|\bFAIL:|\bfatal:|\bpanic:|\b[1-9]\d* (?:failed|errors?)\b"
)
_TRACEBACK = "Traceback (most recent call last)"
_TAG = re.compile(r"</?\w+>")
# The tags agent harnesses wrap tool output in (mini-swe-agent, SWE-agent).
_HARNESS_TAG = re.compile(
    r"</?(?:output|output_head|output_tail|elided_chars|returncode|warning|stdout|stderr)>"
)
# "exit" at a word start; the lookbehind follows the letter so that both branches begin with a
# literal, which the regex engine skips to (twice as fast as a leading \b).
_EXIT_CODE = re.compile(
    r"<returncode>(-?\d+)</returncode>|[Ee](?<!\w[Ee])xit (?:code|status):? ?(-?\d+)"
)
_FENCE = re.compile(r"```(?:bash|sh|shell|console|zsh)[ \t]*\n(.*?)```", re.DOTALL)
_DOLLAR = re.compile(r"^\$ (\S.*)$", re.MULTILINE)
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")

_DEFINITION = re.compile(r"\b(?:def|class|function|func|fn|interface|struct)\s+([A-Za-z_]\w*)")

_json_decoder = msgspec.json.Decoder()


def one_line(text: str) -> str:
    """Collapse runs of whitespace (newlines included) into single spaces, and strip the ends.

    What ``re.sub(r"\\s+", " ", text).strip()`` gives (``\\s`` and :meth:`str.split` know the
    same whitespace), three times faster."""
    return " ".join(text.split())


def clip(text: str, limit: int) -> str:
    """Cut ``text`` to ``limit`` characters, marking the cut with an ellipsis."""
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)].rstrip() + "…" if limit > 0 else ""


def clip_middle(text: str, limit: int) -> str:
    """Keep the head and the tail of ``text`` within ``limit`` characters, naming the gap."""
    if len(text) <= limit:
        return text
    # The marker is sized for the longest count it can state, so the result never exceeds limit.
    room = limit - len(f" […{len(text)} chars…] ")
    if room < 20:
        return clip(text, limit)
    head = room * 2 // 3
    tail = room - head
    return f"{text[:head]} […{len(text) - head - tail} chars…] {text[len(text) - tail :]}"


def decode_arguments(arguments: str) -> dict[str, object]:
    """Decode a tool call's JSON arguments, or return ``{}`` when they are not a JSON object."""
    try:
        value = _json_decoder.decode(arguments)
    except msgspec.DecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def command_of(tool_name: str, arguments: dict[str, object]) -> str | None:
    """Return the shell command a tool call ran, or ``None`` for non-shell tools.

    Editor tools also use a ``command`` key (``{"command": "create", "path": …}``); a single-word
    command next to a ``path`` is such an editor sub-command, not a shell command.
    """
    for key in ("command", "cmd", "script"):
        value = arguments.get(key)
        if isinstance(value, str) and value.strip():
            if "path" in arguments and value.isidentifier():
                return None
            return value
        if isinstance(value, list) and value and all(isinstance(part, str) for part in value):
            return " ".join(str(part) for part in value)
    return None


def is_viewer(tool_name: str, command: str | None) -> bool:
    """Tell whether a tool call only shows file content ("Error" lines in it are code)."""
    if command is None:
        return tool_name.lower() in _VIEWER_TOOLS
    words = _LEADING_CD.sub("", command).split(None, 2)
    if not words:
        return False
    if words[0] == "git" and len(words) > 1:
        return words[1] in _GIT_VIEWERS
    return words[0] in _VIEWER_COMMANDS


def shorten_command(command: str, limit: int = 160) -> str:
    """Render a command on one line, keeping its first line and what follows a heredoc.

    A heredoc (``cat <<'EOF' > repro.py … EOF``) keeps its opening line and any command after the
    terminator; other multi-line commands keep their first line and a line count; a long single
    line keeps its head and tail.

    Args:
        command: The command as run.
        limit: The longest result.

    Returns:
        A single line of at most ``limit`` characters.
    """
    command = command.strip()
    if "\n" not in command:
        return clip_middle(command, limit) if len(command) > limit else command
    lines = command.split("\n")
    first = lines[0].rstrip()
    heredoc = _HEREDOC.search(first)
    rest = ""
    if heredoc:
        terminator = heredoc.group(2)
        for index in range(1, len(lines)):
            if lines[index].strip() == terminator:
                after = " ".join(line.strip() for line in lines[index + 1 :] if line.strip())
                rest = f" …{index - 1} lines… {terminator}" + (f" {after}" if after else "")
                break
    if not rest:
        rest = f" …+{len(lines) - 1} lines"
    # The first line keeps at least 40 characters and the tail (a line count, or what follows a
    # heredoc) at least its first 24, as long as the limit has room for both: each part was
    # sized against the other's full length, so a short first line and its tail could together
    # exceed the limit by a few characters.
    tail = clip(rest, max(limit - len(first), min(24, limit)))
    return clip_middle(first, min(max(limit - len(rest), 40), limit - len(tail))) + tail


def fenced_commands(text: str) -> Iterator[str]:
    """Yield the shell commands written in text: fenced ``bash`` blocks and ``$ cmd`` lines."""
    if "```" in text:
        for block in _FENCE.finditer(text):
            command = block.group(1).strip()
            if command:
                yield command
    if "$ " in text:
        for match in _DOLLAR.finditer(text):
            yield match.group(1).strip()


def exit_code(output: str) -> int | None:
    """Return the exit code a tool result reports (``<returncode>``, ``Exit code N``), if any."""
    # Harnesses put the code at the top (<returncode>) or the bottom ("exit code 1"): look there.
    match = _EXIT_CODE.search(output, 0, 400) or _EXIT_CODE.search(
        output, max(len(output) - 400, 0)
    )
    if match is None:
        return None
    return int(match.group(1) or match.group(2))


def _traceback_tail(output: str, start: int) -> tuple[str | None, int]:
    """Return the exception line that ends the traceback starting at ``start``, and where the
    reading stopped (the end of that line, or of the output)."""
    position = output.find("\n", start)
    while position != -1:
        end = output.find("\n", position + 1)
        end = end if end != -1 else len(output)
        line = output[position + 1 : end]
        if line and not line[0].isspace() and not line.startswith(_TRACEBACK):
            return line.strip(), end
        position = end if end != len(output) else -1
    return None, len(output)


def _is_error_line(line: str) -> bool:
    """Whether ``line`` (without a newline) reads as an error line."""
    # Plain loops, not any() over a generator: a tool result has a candidate line per needle.
    if _ERROR_HEAD.match(line):
        return True
    for phrase in _ERROR_PHRASES:
        if phrase in line:
            return True
    for word in _ERROR_WORD_LITERALS:
        if word in line:
            return _ERROR_WORD.search(line) is not None
    return False


def error_lines(output: str, *, viewer: bool, limit: int | None = 4) -> list[str]:
    """Return the error lines of a tool result, at most ``limit``, the most telling ones.

    Args:
        output: The tool result.
        viewer: The call only showed file content; then only failures of the call itself count
            (``No such file``, ``command not found``), not "Error" lines in the shown code.
        limit: How many lines to keep; the last ones win, since a traceback ends in its cause.
            ``None`` keeps them all.

    Returns:
        Distinct lines, each stripped and at most 200 characters, in output order.
    """
    if viewer:
        read = [error_line_at(output, start)[0] for start in error_line_starts(output, viewer=True)]
    else:
        read = list(error_scan(output)[1])
    found = distinct_lines(read)
    return found if limit is None else found[-limit:]


def distinct_lines(lines: list[str | None]) -> list[str]:
    """The lines that are not None, each once, in order."""
    found: list[str] = []
    for line in lines:
        if line is not None and line not in found:
            found.append(line)
    return found


#: What :func:`error_scan` gives: where each line that may be an error line starts, what it
#: gives (:func:`error_line_at`) and where its reading stopped.
ErrorScan = tuple[tuple[int, ...], tuple[str | None, ...], tuple[int, ...]]


def error_scan(output: str) -> ErrorScan:
    """What each line of ``output`` that may be an error line gives (``viewer=False``), kept
    by the text: a summary and the fact reads read the same tool results."""
    return _scans(output)


def kept_error_scan(output: str) -> ErrorScan | None:
    """:func:`error_scan` of ``output`` if it is kept, else None (nothing is read)."""
    return _scans.peek(output)


def keep_error_scan(output: str, scan: ErrorScan) -> None:
    """Keep ``scan`` as :func:`error_scan` of ``output`` (made from its parts' elsewhere)."""
    _scans.put(output, scan)


def _read_scan(output: str) -> ErrorScan:
    starts = error_line_starts(output, viewer=False)
    read = [error_line_at(output, start) for start in starts]
    return tuple(starts), tuple(line for line, _ in read), tuple(stop for _, stop in read)


_scans = TextMemo(_read_scan, size=4096, chars=2_000_000)


def error_line_starts(output: str, *, viewer: bool) -> list[int]:
    """Where the lines of ``output`` that may be error lines start, in order: the lines that
    hold a needle (:func:`error_lines` reads each with :func:`error_line_at`)."""
    starts: set[int] = set()
    for needle in _VIEWER_NEEDLES if viewer else _ERROR_NEEDLES:
        position = output.find(needle)
        while position != -1:
            start = output.rfind("\n", 0, position) + 1
            starts.add(start)
            end = output.find("\n", position)
            position = output.find(needle, end) if end != -1 else -1
    return sorted(starts)


def error_line_at(output: str, start: int) -> tuple[str | None, int]:
    """The error line that the line of ``output`` starting at ``start`` gives (stripped, cut to
    200 characters; a traceback's head gives the exception line that ends it), or None, and
    where the reading stopped: what it gives depends on ``output[start:stop]`` alone."""
    end = output.find("\n", start)
    end = end if end != -1 else len(output)
    line = output[start:end][:1000]
    if not _is_error_line(line):
        return None, end
    line = line.strip()
    if _TRACEBACK in line:
        tail, end = _traceback_tail(output, start)
        line = tail or line
    return clip(line, 200), end


def last_line(output: str) -> str:
    """The last non-blank line of a tool result, without harness tags (``</output>``).

    A command that failed without an error line usually says why on its last line
    (``/usr/bin/python3: No module named pytest``).
    """
    for line in reversed(_TAG.sub("", output[-2000:]).splitlines()):
        if line.strip():
            return "" if _EXIT_CODE.search(line) else clip(line.strip(), 200)
    return ""


def definitions(code: str) -> Iterator[str]:
    """Yield the names that ``code`` defines (``def name``, ``class Name``, ``fn name``…)."""
    for match in _DEFINITION.finditer(code):
        yield match.group(1)


def strip_tags(text: str) -> str:
    """Remove the tags agent harnesses wrap tool output in (``<output>``, ``<returncode>``…)."""
    return _HARNESS_TAG.sub("", text).strip() if "<" in text else text
