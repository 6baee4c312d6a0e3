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
from dataclasses import dataclass

from ctxledger.messages import Message
from ctxledger.summarizers import _extract as ex
from ctxledger.summarizers import _prose
from ctxledger.summarizers.base import SummaryRequest

__all__ = ["DROP_ORDER", "SECTIONS", "ExtractiveSummarizer"]

#: Section ids and their headings, in the order they are rendered.
SECTIONS: dict[str, str] = {
    "focus": "Focus",
    "requests": "User requests",
    "errors": "Errors",
    "decisions": "Decisions",
    "todos": "Open TODOs",
    "progress": "Progress",
    "commands": "Commands",
    "files": "Files",
    "identifiers": "Identifiers",
}
#: Sections in the order they lose items when the budget is short: the first loses first.
DROP_ORDER: tuple[str, ...] = (
    "progress", "identifiers", "decisions", "todos", "errors", "files", "commands", "focus",
    "requests",
)
_KEEP_ORDER = DROP_ORDER[::-1]
# The share of the budget each section is guaranteed before leftovers go by priority. Paths and
# commands get the most: they are what an agent needs to continue and what summaries lose.
_SHARES = {
    "requests": 0.20, "commands": 0.22, "files": 0.22, "errors": 0.12, "decisions": 0.06,
    "todos": 0.05, "identifiers": 0.07, "progress": 0.06, "focus": 0.0,
}
_FOCUS_SHARE = 0.12
# The longest single user request, as a share of the budget: two fit in the requests' share.
_REQUEST_SHARE = 0.1
_TITLES = {title: section for section, title in SECTIONS.items()}
# An en dash (U+2013) and a multiplication sign (U+00D7) are accepted too, as a person would type.
_HEADER = re.compile(r"^Summary of messages (\d+)\s*[-\u2013]\s*(\d+)")
_FOCUS_LINE = "Focus: "
_LABEL = re.compile(r"^\[#\d+\] ")
_COUNT = re.compile(r" \([x\u00d7](\d+)\)$")
_LATEST = "Latest: "
_EARLIER = "Earlier summary: "
# Tier of an item within its section: new and important, carried over from the previous
# summary, new but minor (a path seen only in tool output, a command only mentioned in prose).
_FIRST, _NEW, _PREVIOUS, _MINOR = -1, 0, 1, 2
_PREVIOUS_BASE = -(10**9)
_BY_COUNT = frozenset({"files", "identifiers"})
_SENTENCE_SECTIONS = {
    "decision": "decisions", "intent": "decisions", "todo": "todos", "done": "progress",
}


@dataclass(slots=True, eq=False)
class _Item:
    text: str
    tier: int
    recency: int
    count: int = 1
    focus: bool = False
    counted: bool = False

    def rendered(self) -> str:
        text = f"{self.text} (x{self.count})" if self.counted and self.count > 1 else self.text
        return "\n- " + text.replace("\n", "\n  ")


class _Board:
    """The candidate items of every section, deduplicated by a normalised key."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, _Item]] = {section: {} for section in SECTIONS}

    def add(
        self, section: str, text: str, tier: int, recency: int, *, key: str | None = None,
        count: int = 1, counted: bool = False,
    ) -> None:
        if not text:
            return
        key = key if key is not None else ex.one_line(text)
        bucket = self.items[section]
        item = bucket.get(key)
        if item is None:
            bucket[key] = _Item(text, tier, recency, count, counted=counted)
            return
        item.count += count
        item.tier = min(item.tier, tier)
        if recency >= item.recency:
            item.recency, item.text = recency, text


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
        board = _Board()
        first, last = None, None
        if request.previous_summary:
            first, last = _merge_previous(board, request.previous_summary)
        _Collector(board, focus, budget, self.command_chars).run(request.messages)
        seqs = [m.seq for m in request.messages if m.seq is not None]
        if seqs:
            first = min(seqs) if first is None else min(first, *seqs)
            last = max(seqs) if last is None else max(last, *seqs)
        header = (
            f"Summary of messages {first}-{last}" if first is not None
            else f"Summary of {len(request.messages)} messages"
        )
        if request.focus:
            header += "\n" + _FOCUS_LINE + ex.clip(ex.one_line(request.focus), 200)
        if len(header) >= budget:
            return ex.clip(header, budget)
        _merge_path_suffixes(board.items["files"])
        requests = board.items["requests"].values()
        if requests:
            # The first request is usually the task itself: it outranks every later one.
            min(requests, key=_chronological).tier = _FIRST
        if focus is not None:
            for bucket in board.items.values():
                for item in bucket.values():
                    item.focus = focus.search(item.text) is not None
        return header + _render(board, budget - len(header), focus is not None)


def _merge_previous(board: _Board, summary: str) -> tuple[int | None, int | None]:
    """Put the items of a previous summary on the board; return its covered seq range."""
    lines = summary.strip().split("\n")
    header = _HEADER.match(lines[0]) if lines else None
    span = (int(header.group(1)), int(header.group(2))) if header else (None, None)
    parsed: dict[str, list[str]] = {}
    section = None
    for line in lines[1 if header else 0 :]:
        if line.startswith("## "):
            section = _TITLES.get(line[3:].strip())
            if section is not None:
                parsed.setdefault(section, [])
        elif section is None:
            if line.startswith(_FOCUS_LINE) and header:
                parsed.setdefault("focus", []).append("Earlier focus: " + line[len(_FOCUS_LINE) :])
        elif line.startswith("- "):
            parsed[section].append(line[2:])
        elif line.startswith("  ") and parsed[section]:
            parsed[section][-1] += "\n" + line[2:]
    if not header and not any(parsed.get(name) for name in SECTIONS if name != "focus"):
        # Not our format (an LLM's summary, a transcript's /compact summary): mine it for facts.
        _absorb_prose(board, summary, _PREVIOUS, _PREVIOUS_BASE)
        return span
    recency = _PREVIOUS_BASE
    for name, texts in parsed.items():
        for text in texts:
            recency += 1
            count = 1
            counted = _COUNT.search(text)
            if counted:
                count, text = int(counted.group(1)), text[: counted.start()]
            text = text.removeprefix(_LATEST)
            key = _key(name, text)
            board.add(name, text, _PREVIOUS, recency, key=key, count=count,
                      counted=name == "commands")
            for path in ex.paths(text):
                board.add("files", path, _PREVIOUS, recency)
    return span


def _key(section: str, text: str) -> str:
    """The deduplication key of an item: its text without seq label or repeat count."""
    return ex.one_line(_LABEL.sub("", text))


def _absorb_prose(board: _Board, text: str, tier: int, recency: int) -> None:
    """Mine free text (an unstructured summary) for facts, and keep its head and tail."""
    board.add("progress", _EARLIER + ex.clip_middle(ex.one_line(text), 600), tier, recency)
    for path in ex.paths(text):
        board.add("files", path, tier, recency)
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
        self, board: _Board, focus: re.Pattern[str] | None, budget: int, command_chars: int
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
                _absorb_prose(self.board, message.content, _NEW, recency)
            elif message.role == "user":
                self.user(message, label, recency)
            elif message.role == "assistant":
                self.assistant(message, recency)
                if message.content.strip():
                    latest = (message.content, recency)
            elif message.role == "tool":
                self.tool(message, label, recency)
            if self.focus is not None and message.content:
                self.focus_lines(message.content, label, _MINOR if message.role == "tool" else _NEW,
                                 recency)
        if latest is not None:
            text = ex.clip(ex.one_line(latest[0]).removeprefix("THOUGHT:").strip(), 300)
            self.board.add("progress", _LATEST + text, _NEW, latest[1] + len(messages),
                           key=text)

    def user(self, message: Message, label: str, recency: int) -> None:
        text = message.content.strip()
        if not text:
            return
        key = ex.one_line(text)
        self.board.add("requests", label + ex.clip_middle(text, self.request_chars), _NEW,
                       recency, key=key)
        # Commands in a user's text are instructions or examples, not commands that ran.
        self.prose(text, recency, commands=False)

    def assistant(self, message: Message, recency: int) -> None:
        if message.content:
            self.prose(message.content, recency)
            for kind, sentence in _prose.sentences(message.content):
                tier = _MINOR if kind == "intent" else _NEW
                self.board.add(_SENTENCE_SECTIONS[kind], sentence, tier, recency)
        for call in message.tool_calls:
            arguments = ex.decode_arguments(call.arguments)
            command = ex.command_of(call.name, arguments)
            if command is not None:
                short = ex.shorten_command(command, self.command_chars)
                self.board.add("commands", short, _NEW, recency, counted=True)
                for path in ex.paths(command):
                    self.board.add("files", path, _NEW, recency)
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
                        self.board.add("identifiers", identifier, _NEW, recency)
                continue
            if isinstance(value, str) and value and len(value) <= 200 and "\n" not in value:
                parts.append(value)
                if key in ex.PATH_KEYS:
                    self.board.add("files", value, _NEW, recency)
                else:
                    for path in ex.paths(value):
                        self.board.add("files", path, _NEW, recency)
        text = ex.clip(" ".join(parts), self.command_chars)
        self.board.add("commands", text, _MINOR, recency, counted=True)
        return text

    def prose(self, text: str, recency: int, *, commands: bool = True) -> None:
        board = self.board
        for path in ex.paths(text):
            board.add("files", path, _NEW, recency)
        for name in _prose.identifiers(text, prose=True):
            board.add("identifiers", name, _NEW, recency)
        if not commands:
            return
        for command in ex.fenced_commands(text):
            board.add("commands", ex.shorten_command(command, self.command_chars), _MINOR,
                      recency, counted=True)

    def tool(self, message: Message, label: str, recency: int) -> None:
        name, command, short = self.calls.get(
            message.tool_call_id or "", (message.name or "tool", None, message.name or "tool")
        )
        output = message.content
        code = ex.exit_code(output)
        lines = ex.error_lines(output, viewer=ex.is_viewer(name, command))
        if lines or (code is not None and code != 0):
            status = [f"exit {code}"] if code else []
            detail = " | ".join(status + lines)
            self.board.add("errors", f"{label}{ex.clip(short, 80)}: {detail}", _NEW, recency,
                           key=detail)
        for path in ex.paths(output):
            self.board.add("files", path, _MINOR, recency)

    def focus_lines(self, text: str, label: str, tier: int, recency: int) -> None:
        assert self.focus is not None
        seen = 0
        for match in self.focus.finditer(text):
            start = text.rfind("\n", 0, match.start()) + 1
            end = text.find("\n", match.end())
            line = ex.one_line(text[start : end if end != -1 else len(text)])
            if len(line) >= 8:
                self.board.add("focus", label + ex.clip(line, 200), tier, recency, key=line)
                seen += 1
                if seen == 6:
                    return


def _merge_path_suffixes(files: dict[str, _Item]) -> None:
    """Fold each path into a longer one that ends with it (``a/b.py`` into ``/repo/a/b.py``).

    The longer path contains the shorter one, so keeping only it loses nothing and saves room.
    """
    owner: dict[str, str] = {}
    for key in sorted(files, key=lambda k: (-len(k), k)):
        position = key.find("/", 1)
        while position != -1:
            owner.setdefault(key[position + 1 :], key)
            position = key.find("/", position + 1)
    for key in list(files):
        bare = key.removeprefix("./")
        target = owner.get(bare)
        if target is None or target == key or target not in files:
            continue
        item, into = files.pop(key), files[target]
        into.tier = min(into.tier, item.tier)
        into.recency = max(into.recency, item.recency)
        into.count += item.count


def _rank(item: _Item) -> tuple[int, int, int]:
    return (0 if item.focus else 1, item.tier, -item.recency)


def _rank_by_count(item: _Item) -> tuple[int, int, int, int]:
    # A name or path mentioned often matters more than one seen once, however recent.
    return (0 if item.focus else 1, item.tier, -min(item.count, 3), -item.recency)


def _render(board: _Board, budget: int, with_focus: bool) -> str:
    """Choose the items that fit in ``budget`` characters and render them by section."""
    ranked = {
        s: sorted(board.items[s].values(), key=_rank_by_count if s in _BY_COUNT else _rank)
        for s in SECTIONS
    }
    chosen: dict[str, list[_Item]] = {s: [] for s in SECTIONS}
    heading = {s: len("\n## " + title) for s, title in SECTIONS.items()}

    def used() -> int:
        return sum(
            heading[s] + sum(len(item.rendered()) for item in items)
            for s, items in chosen.items() if items
        )

    def fill(section: str, limit: int, total: int) -> int:
        """Add the best remaining items of ``section`` within ``limit``; return the new total."""
        taken = {id(item) for item in chosen[section]}
        spent = sum(len(item.rendered()) for item in chosen[section])
        for item in ranked[section]:
            if id(item) in taken:
                continue
            extra = len(item.rendered()) + (0 if chosen[section] else heading[section])
            if spent + extra <= limit and total + extra <= budget:
                chosen[section].append(item)
                spent += extra
                total += extra
        return total

    total = 0
    scale = 1.0 - _FOCUS_SHARE if with_focus else 1.0
    for section in _KEEP_ORDER:
        share = _FOCUS_SHARE if section == "focus" else _SHARES[section] * scale
        total = fill(section, int(budget * share), total)
    for section in _KEEP_ORDER:
        total = fill(section, budget, total)
    # A path already spelled out in a command, request or error needs no line of its own; the
    # room it frees goes to the next items by priority.
    written = "\n".join(
        item.text for section in SECTIONS if section != "files" for item in chosen[section]
    )
    if any(item.text in written for item in chosen["files"]):
        chosen["files"] = [item for item in chosen["files"] if item.text not in written]
        ranked["files"] = [item for item in ranked["files"] if item.text not in written]
        total = used()
        for section in _KEEP_ORDER:
            total = fill(section, budget, total)
    out = []
    for section, title in SECTIONS.items():
        if chosen[section]:
            out.append("\n## " + title)
            out.extend(item.rendered() for item in sorted(chosen[section], key=_chronological))
    return "".join(out)


def _chronological(item: _Item) -> int:
    return item.recency
