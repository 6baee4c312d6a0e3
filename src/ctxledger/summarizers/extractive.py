"""The offline default summariser: deterministic extraction of the facts summaries usually lose.

The summary is plain text in a stable, parseable shape, so that the next compaction can merge it
instead of repeating it::

    Summary of messages 1-57
    Focus: keep the API signatures
    ## User requests
    - [#2] Fix model_to_dict() for fields=[]
    ## Errors
    - [#9] python3 repro.py: exit 1 | ZeroDivisionError: division by zero
    ## Commands
    - python3 repro.py (x3)
    ...

Items are single lines; a multi-line item (a user request) continues on lines indented by two
spaces. When the summary does not fit, the lowest-priority and oldest items go first (see
:data:`DROP_ORDER`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ctxledger.domain import extract as ex
from ctxledger.messages import Message
from ctxledger.summarizers import _prose
from ctxledger.summarizers._board import (
    COUNT,
    DROP_ORDER,
    FALLBACK,
    FIRST,
    LATEST,
    MINOR,
    NEW,
    PREVIOUS,
    SECTIONS,
    TITLES,
    Board,
    chronological,
    merge_path_suffixes,
    render,
)
from ctxledger.summarizers.base import SummaryRequest

__all__ = ["DROP_ORDER", "SECTIONS", "ExtractiveSummarizer"]

# The longest single user request, as a share of the budget: two fit in the requests' share.
_REQUEST_SHARE = 0.1
# An en dash (U+2013) is accepted too, as a person would type it.
_HEADER = re.compile(
    r"^Summary of (?:messages (?P<first>\d+)\s*[-\u2013]\s*(?P<last>\d+)|(?P<count>\d+) messages)$"
)
_FOCUS_LINE = "Focus: "
_LABEL = re.compile(r"^\[#\d+\] ")
_EARLIER = "Earlier summary: "
_PREVIOUS_BASE = -(10**9)
_SENTENCE_SECTIONS = {
    "decision": "decisions", "intent": "decisions", "todo": "todos", "done": "progress",
}


class ExtractiveSummarizer:
    """Summarise by extraction: deterministic, offline, and bounded in size.

    It keeps user requests verbatim (head and tail of very long ones), file paths, shell commands,
    error lines with the command that produced them, decisions, open TODOs, identifiers and
    issue numbers, and lines about the requested focus. A previous summary in this format is parsed
    and merged item by item (duplicates collapse); any other previous summary is mined for facts.

    Example:
        >>> from ctxledger import Message, SummaryRequest
        >>> summarize = ExtractiveSummarizer()
        >>> text = summarize(SummaryRequest.of([Message.user("Fix app.py").with_seq(1)]))
        >>> text.splitlines()[:3]
        ['Summary of messages 1-1', '## User requests', '- [#1] Fix app.py']

    Args:
        max_chars: An upper bound of its own on the summary's length, applied on top of each
            request's ``max_chars``; ``None`` for no extra bound.
        command_chars: The longest command kept on one line (longer ones are shortened).
    """

    def __init__(self, max_chars: int | None = None, *, command_chars: int = 160) -> None:
        self.max_chars = max_chars
        self.command_chars = command_chars

    def __repr__(self) -> str:
        return f"ExtractiveSummarizer(max_chars={self.max_chars!r})"

    def __call__(self, request: SummaryRequest, /) -> str:
        """Summarise ``request.messages`` merged with ``request.previous_summary``.

        Args:
            request: The messages, previous summary, focus and size limit.

        Returns:
            The summary, never longer than ``request.max_chars`` (nor this summariser's own
            ``max_chars``); ``""`` when the limit is zero or less.
        """
        budget = request.max_chars
        if self.max_chars is not None:
            budget = min(budget, self.max_chars)
        if budget <= 0:
            return ""
        focus = _prose.focus_pattern(request.focus)
        board = Board()
        first = last = None
        count = len(request.messages)
        # The focus is stated under the header, within a quarter of the budget.
        stated_focus = ex.clip(ex.one_line(request.focus or ""), min(200, max(budget // 4, 20)))
        if request.previous_summary:
            first, last, earlier = _merge_previous(board, request.previous_summary, stated_focus)
            count += earlier
        _Collector(board, focus, budget, self.command_chars).run(request.messages)
        seqs = [m.seq for m in request.messages if m.seq is not None]
        if seqs:
            first = min(seqs) if first is None else min(first, *seqs)
            last = max(seqs) if last is None else max(last, *seqs)
        header = (
            f"Summary of messages {first}-{last}" if first is not None
            else f"Summary of {count} messages"
        )
        if stated_focus:
            header += "\n" + _FOCUS_LINE + stated_focus
        if len(header) >= budget:
            return ex.clip(header, budget)
        merge_path_suffixes(board.items["files"])
        requests = board.items["requests"].values()
        if requests:
            # The first request is usually the task itself: it outranks every later one.
            min(requests, key=chronological).tier = FIRST
        if focus is not None:
            for bucket in board.items.values():
                for item in bucket.values():
                    item.focus = focus.search(item.text) is not None
        return header + render(board, budget - len(header), focus is not None)


def _merge_previous(
    board: Board, summary: str, focus: str
) -> tuple[int | None, int | None, int]:
    """Put the items of a previous summary on the board.

    The previous focus becomes an "Earlier focus" item unless it is ``focus``, the one stated
    now.

    Returns:
        The covered seq range (``None`` when unknown) and the count of covered messages when
        the previous summary states only a count (0 otherwise).
    """
    lines = summary.strip().split("\n")
    header = _HEADER.match(lines[0]) if lines else None
    first = last = None
    count = 0
    if header and header.group("first"):
        first, last = int(header.group("first")), int(header.group("last"))
    elif header:
        count = int(header.group("count"))
    parsed: dict[str, list[str]] = {}
    section = None
    for line in lines[1 if header else 0 :]:
        if line.startswith("## "):
            section = TITLES.get(line[3:].strip())
            if section is not None:
                parsed.setdefault(section, [])
        elif section is None:
            earlier = line.removeprefix(_FOCUS_LINE)
            if header and earlier != line and earlier != focus:
                parsed.setdefault("focus", []).append("Earlier focus: " + earlier)
        elif line.startswith("- "):
            parsed[section].append(line[2:])
        elif line.startswith("  ") and parsed[section]:
            parsed[section][-1] += "\n" + line[2:]
    if not header and not any(parsed.get(name) for name in SECTIONS if name != "focus"):
        # Not our format (an LLM's summary, a transcript's /compact summary): mine it for facts.
        _absorb_prose(board, summary, PREVIOUS, _PREVIOUS_BASE)
        return first, last, count
    recency = _PREVIOUS_BASE
    for name, texts in parsed.items():
        for text in texts:
            recency += 1
            repeats = 1
            counted = COUNT.search(text) if name == "commands" else None
            if counted:
                repeats, text = int(counted.group(1)), text[: counted.start()]
            latest = name == "progress" and text.startswith(LATEST)
            text = text.removeprefix(LATEST) if latest else text
            item = board.add(name, text, PREVIOUS, recency, key=_key(text), count=repeats,
                             counted=name == "commands")
            if latest:
                board.set_latest(item)
            if name != "files":
                # A path spelled out in another item is on record only through that item: keep
                # it as a fallback (count 0, so it ranks last) for when the item is dropped.
                board.add_names("files", ex.path_runs(text)[1], FALLBACK, recency, count=0)
    return first, last, count


def _key(text: str) -> str:
    """The deduplication key of an item: its text without seq label or repeat count."""
    return ex.one_line(_LABEL.sub("", text) if text.startswith("[#") else text)


def _absorb_prose(board: Board, text: str, tier: int, recency: int) -> None:
    """Mine free text (an unstructured summary) for facts, and keep its head and tail."""
    board.add("progress", _EARLIER + ex.clip_middle(ex.one_line(text), 600), tier, recency)
    board.add_names("files", ex.path_runs(text)[1], tier, recency)
    for command in ex.fenced_commands(text):
        board.add("commands", ex.shorten_command(command), tier, recency, counted=True)
    for name in _prose.identifiers(text, prose=True):
        board.add("identifiers", name, tier, recency)
    for kind, sentence in _prose.sentences(text):
        if kind != "done":
            board.add(_SENTENCE_SECTIONS[kind], sentence, tier, recency)


class _Collector:
    """One pass over the new messages, putting every fact on the board."""

    def __init__(
        self, board: Board, focus: re.Pattern[str] | None, budget: int, command_chars: int
    ) -> None:
        self.board = board
        self.focus = focus
        self.request_chars = max(200, int(budget * _REQUEST_SHARE))
        self.command_chars = command_chars
        self.calls: dict[str, tuple[str, str | None, str]] = {}

    def run(self, messages: Sequence[Message]) -> None:
        latest: tuple[str, int] | None = None
        for index, message in enumerate(messages):
            recency = index + 1
            label = f"[#{message.seq}] " if message.seq is not None else ""
            if message.role == "system":
                continue
            if message.role == "summary" or message.name == "compact_summary":
                _absorb_prose(self.board, message.content, NEW, recency)
            elif message.role == "user":
                self.user(message, label, recency)
            elif message.role == "assistant":
                self.assistant(message, recency)
                if message.content.strip():
                    latest = (message.content, recency)
            elif message.role == "tool":
                self.tool(message, label, recency)
            if self.focus is not None and message.content:
                self.focus_lines(message.content, label, MINOR if message.role == "tool" else NEW,
                                 recency)
        if latest is not None:
            text = ex.clip(ex.one_line(latest[0]).removeprefix("THOUGHT:").strip(), 300)
            self.board.set_latest(
                self.board.add("progress", text, NEW, latest[1] + len(messages))
            )

    def user(self, message: Message, label: str, recency: int) -> None:
        text = message.content.strip()
        if not text:
            return
        key = ex.one_line(text)
        self.board.add("requests", label + ex.clip_middle(text, self.request_chars), NEW,
                       recency, key=key)
        # Commands in a user's text are instructions or examples, not commands that ran.
        self.prose(text, recency, commands=False)

    def assistant(self, message: Message, recency: int) -> None:
        if message.content:
            self.prose(message.content, recency)
            for kind, sentence in _prose.sentences(message.content):
                tier = MINOR if kind == "intent" else NEW
                self.board.add(_SENTENCE_SECTIONS[kind], sentence, tier, recency)
        for call in message.tool_calls:
            arguments = ex.decode_arguments(call.arguments)
            command = ex.command_of(call.name, arguments)
            if command is not None:
                short = ex.shorten_command(command, self.command_chars)
                self.board.add("commands", short, NEW, recency, counted=True)
                self.board.add_names("files", ex.path_runs(command)[1], NEW, recency)
            else:
                short = self.action(call.name, arguments, recency)
            self.calls[call.id] = (call.name, command, short)

    def action(self, name: str, arguments: dict[str, object], recency: int) -> str:
        """Record a non-shell tool call (an editor, a file reader) as ``Name arg arg``."""
        parts = [name]
        for key, value in arguments.items():
            if key in ex.CONTENT_KEYS:
                if isinstance(value, str):
                    for identifier in _prose.identifiers(value, prose=False):
                        self.board.add("identifiers", identifier, NEW, recency)
                continue
            if isinstance(value, str) and value.strip() and len(value) <= 200 and "\n" not in value:
                parts.append(value)
                if key in ex.PATH_KEYS:
                    self.board.add("files", value, NEW, recency)
                else:
                    self.board.add_names("files", ex.path_runs(value)[1], NEW, recency)
        text = ex.clip(" ".join(parts), self.command_chars)
        self.board.add("commands", text, MINOR, recency, counted=True)
        return text

    def prose(self, text: str, recency: int, *, commands: bool = True) -> None:
        board = self.board
        board.add_names("files", ex.path_runs(text)[1], NEW, recency)
        for name in _prose.identifiers(text, prose=True):
            board.add("identifiers", name, NEW, recency)
        if not commands:
            return
        for command in ex.fenced_commands(text):
            board.add("commands", ex.shorten_command(command, self.command_chars), MINOR,
                      recency, counted=True)

    def tool(self, message: Message, label: str, recency: int) -> None:
        name, command, short = self.calls.get(
            message.tool_call_id or "", (message.name or "tool", None, message.name or "tool")
        )
        output = message.content
        code = ex.exit_code(output)
        lines = ex.error_lines(output, viewer=ex.is_viewer(name, command))
        if code and not lines:
            lines = [line] if (line := ex.last_line(output)) else []
        if lines or code:
            status = [f"exit {code}"] if code else []
            detail = " | ".join(status + lines)
            self.board.add("errors", f"{label}{ex.clip(short, 80)}: {detail}", NEW, recency,
                           key=detail)
        self.board.add_names("files", ex.path_runs(output)[1], MINOR, recency)

    def focus_lines(self, text: str, label: str, tier: int, recency: int) -> None:
        """Collect up to six lines of ``text`` that mention the focus."""
        assert self.focus is not None
        seen = 0
        match = self.focus.search(text)
        while match is not None and seen < 6:
            start = text.rfind("\n", 0, match.start()) + 1
            end = text.find("\n", match.end())
            end = len(text) if end == -1 else end
            line = ex.one_line(text[start:end]).removeprefix("THOUGHT:").lstrip()
            if len(line) >= 8:
                self.board.add("focus", label + ex.clip(line, 200), tier, recency, key=line)
                seen += 1
            match = self.focus.search(text, end)


