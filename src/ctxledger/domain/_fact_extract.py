"""The extraction of facts: their kinds, :class:`Fact`, and :func:`extract_facts`.

What a fact of each kind is, and how texts are compared, is told in :mod:`ctxledger.domain.facts`,
which re-exports every public name of this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Literal

import msgspec

from ctxledger.domain import extract as ex
from ctxledger.messages import Message

__all__ = [
    "COMMAND_CHARS",
    "ERROR_CHARS",
    "FACT_KINDS",
    "REQUEST_CHARS",
    "Fact",
    "FactKind",
    "count_by_kind",
    "extract_facts",
    "merge_facts",
    "normalize",
    "shown_text",
]

FactKind = Literal["path", "command", "error", "identifier", "number", "request"]
#: Every fact kind, in the order reports list them.
FACT_KINDS: tuple[FactKind, ...] = ("path", "command", "error", "identifier", "number", "request")

#: A command is identified by the head of its first line.
COMMAND_CHARS = 80
#: An error line is identified by its head.
ERROR_CHARS = 100
#: A user request line is identified by its head.
REQUEST_CHARS = 200
#: Shortest user line that counts as a request line.
_REQUEST_MIN = 8


# A pytest node id, or a test function's name (not a test file's stem: "tests/test_x.py").
_TEST_ID = re.compile(r"[\w./-]*\w\.py::[\w\[\]:.,/=+-]*[\w\]]|(?<![\w./-])test_\w+(?!\w|\.\w)")
_CALL = re.compile(r"\b[A-Za-z_][\w.]*\w\(\)")
_NUMBER = re.compile(
    r"(?<![\w.])\d+(?:[.,]\d+)?[ \t]?(?:%|(?:ms|s|sec|secs|seconds?|min|mins|minutes?|h|hours?"
    r"|days?|[KMGT]i?B|bytes?|tokens?|chars?|characters?|lines?|px|[kMG]Hz|x)\b)"
)
_DOLLAR = re.compile(r"^\$ (\S.*)$", re.MULTILINE)


class Fact(msgspec.Struct, frozen=True, kw_only=True):
    """One fact of a conversation.

    Attributes:
        kind: One of :data:`FACT_KINDS`.
        text: The fact, whitespace collapsed (and cut to its identifying head for commands,
            errors and request lines).
        seq: The newest message that holds it.
        named: Whether a user or assistant message, or a tool call, names it (``False``: seen
            only in tool output).
    """

    kind: FactKind
    text: str
    seq: int
    named: bool = True


def normalize(text: str) -> str:
    """Collapse whitespace runs (newlines included) to one space, as facts are compared."""
    return ex.one_line(text)


def shown_text(messages: Iterable[Message]) -> str:
    """Everything ``messages`` show, whitespace collapsed: the texts facts are looked up in.

    Contents, tool-call names and arguments, and the shell command an argument carries (decoded,
    since the arguments hold it JSON-escaped).
    """
    parts: list[str] = []
    for message in messages:
        parts.append(message.content)
        for call in message.tool_calls:
            parts.append(call.name)
            parts.append(call.arguments)
            command = ex.command_of(call.name, ex.decode_arguments(call.arguments))
            if command:
                parts.append(command)
    return normalize("\n".join(parts))


class _Collector:
    """Facts by (kind, text), each with its newest seq, in order of first appearance."""

    def __init__(self) -> None:
        self.found: dict[tuple[str, str], Fact] = {}

    def add(self, kind: FactKind, text: str, seq: int, *, named: bool = True) -> None:
        text = normalize(text)
        if not text:
            return
        key = (kind, text)
        old = self.found.get(key)
        if old is None:
            self.found[key] = Fact(kind=kind, text=text, seq=seq, named=named)
        elif seq >= old.seq or (named and not old.named):
            self.found[key] = Fact(
                kind=kind, text=text, seq=max(seq, old.seq), named=named or old.named
            )

    def prose(self, text: str, seq: int, *, requests: bool) -> None:
        for path in ex.paths(text):
            self.add("path", path, seq)
        for match in _DOLLAR.finditer(text):
            self.add("command", _head(match.group(1), COMMAND_CHARS), seq)
        self.identifiers(text, seq)
        for match in _NUMBER.finditer(text):
            self.add("number", match.group(), seq)
        if requests:
            for line in text.splitlines():
                line = normalize(line)
                if len(line) >= _REQUEST_MIN:
                    self.add("request", line[:REQUEST_CHARS], seq)

    def identifiers(self, text: str, seq: int) -> None:
        if "test" in text or "::" in text:
            for match in _TEST_ID.finditer(text):
                self.add("identifier", match.group(), seq)
        if "()" in text:
            for match in _CALL.finditer(text):
                self.add("identifier", match.group(), seq)


def _head(command: str, limit: int) -> str:
    """The identifying head of a command: its first non-blank line, cut to ``limit``."""
    for line in command.strip().splitlines():
        if line.strip():
            return normalize(line)[:limit]
    return ""


def extract_facts(messages: Iterable[Message]) -> list[Fact]:
    """Return the facts of ``messages``, deduplicated, in order of first appearance.

    A tool result is read as a file view when the call it answers (looked up among
    ``messages``; a compaction never separates a call from its results) only showed content.
    Messages without a seq count as seq 0; ``summary`` messages are skipped.

    Args:
        messages: Messages of one session, oldest first.

    Returns:
        One :class:`Fact` per (kind, text), carrying the newest seq that holds it.
    """
    collector = _Collector()
    calls: dict[str, tuple[str, str | None]] = {}
    for message in messages:
        seq = message.seq or 0
        role = message.role
        if role == "tool":
            name, command = calls.get(message.tool_call_id or "", (message.name or "tool", None))
            output = message.content
            if not ex.is_viewer(name, command):
                lines = ex.error_lines(output, viewer=False, limit=None)
                if not lines and ex.exit_code(output):
                    last = ex.last_line(output)
                    lines = [last] if last else []
                for line in lines:
                    collector.add("error", ex.strip_tags(line)[:ERROR_CHARS], seq)
            for path in ex.paths(output):
                collector.add("path", path, seq, named=False)
            continue
        if role == "summary":
            continue
        collector.prose(message.content, seq, requests=role == "user")
        for call in message.tool_calls:
            arguments = ex.decode_arguments(call.arguments)
            command = ex.command_of(call.name, arguments)
            calls[call.id] = (call.name, command)
            if command is not None:
                collector.add("command", _head(command, COMMAND_CHARS), seq)
                for path in ex.paths(command):
                    collector.add("path", path, seq)
                collector.identifiers(command, seq)
                continue
            for key, value in arguments.items():
                if not isinstance(value, str):
                    continue
                if key in ex.CONTENT_KEYS:
                    for name in ex.definitions(value):
                        collector.add("identifier", name, seq)
                elif key in ex.PATH_KEYS and value.strip() and "\n" not in value:
                    collector.add("path", value, seq)
                else:
                    for path in ex.paths(value):
                        collector.add("path", path, seq)
    return list(collector.found.values())


def merge_facts(*groups: Iterable[Fact]) -> list[Fact]:
    """Merge fact lists: one fact per (kind, text), with the newest seq, named if any is."""
    collector = _Collector()
    for group in groups:
        for fact in group:
            collector.add(fact.kind, fact.text, fact.seq, named=fact.named)
    return list(collector.found.values())


def count_by_kind(facts: Iterable[Fact]) -> Mapping[str, int]:
    """Return how many of ``facts`` are of each kind (every kind listed, zeros included)."""
    counts: dict[str, int] = dict.fromkeys(FACT_KINDS, 0)
    for fact in facts:
        counts[fact.kind] += 1
    return counts
