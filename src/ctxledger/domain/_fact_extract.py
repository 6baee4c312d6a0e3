"""The extraction of facts: their kinds, :class:`Fact`, and :func:`extract_facts`.

What a fact of each kind is, and how texts are compared, is told in :mod:`ctxledger.domain.facts`,
which re-exports every public name of this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Literal

import msgspec

from ctxledger.domain import _fact_text as ft
from ctxledger.domain import extract as ex
from ctxledger.domain._fact_runs import Runs
from ctxledger.domain._identity_memo import IdentityMemo, held_chars
from ctxledger.domain._paths import path_runs
from ctxledger.domain._shown import shown_text
from ctxledger.domain._text_parts import error_lines_between, found_between, paths_between
from ctxledger.messages import Message

__all__ = [
    "COMMAND_CHARS",
    "ERROR_CHARS",
    "FACT_KINDS",
    "REQUEST_CHARS",
    "Fact",
    "FactKind",
    "MessageReads",
    "extract_facts",
    "extracted_runs",
    "message_reads",
    "normalize",
    "part_facts",
    "remember_facts",
    "remember_reads",
    "shown_text",
]

#: What a fact is: a file path, a shell command, an error line, a code identifier, a number or
#: a line of the user's request.
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


class Fact(msgspec.Struct, frozen=True, kw_only=True, gc=False):
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


class _Collector:
    """Facts by (kind, text), each with its newest seq, in order of first appearance."""

    def __init__(self) -> None:
        self.found: dict[tuple[str, str], Fact] = {}

    def add(self, kind: FactKind, text: str, seq: int, *, named: bool = True) -> None:
        text = normalize(text)
        if text:
            self.put(kind, text, seq, named)

    def put(self, kind: FactKind, text: str, seq: int, named: bool) -> None:
        """Add a fact whose ``text`` is normalized and not empty."""
        key = (kind, text)
        old = self.found.get(key)
        if old is None:
            self.found[key] = Fact(kind=kind, text=text, seq=seq, named=named)
        elif seq >= old.seq or (named and not old.named):
            self.found[key] = Fact(
                kind=kind, text=text, seq=max(seq, old.seq), named=named or old.named
            )

    def merge(self, fact: Fact) -> None:
        """Add ``fact`` (its text normalized and not empty), kept as it is where the merge
        gives its fields: when it is new, or as new as the one kept and as named."""
        key = (fact.kind, fact.text)
        old = self.found.get(key)
        if old is None or (fact.seq >= old.seq and (fact.named or not old.named)):
            self.found[key] = fact
        else:
            self.put(fact.kind, fact.text, fact.seq, fact.named)

    def prose(
        self, text: str, seq: int, *, requests: bool, part: tuple[int, int] | None = None
    ) -> None:
        """Add the facts of ``text`` (or of ``text[slice(*part)]``, read from the whole's)."""
        paths: Sequence[str]
        kinds: list[Sequence[str]]
        if part is None:
            paths = path_runs(text)[1]
            kinds = [found[1] for found in ft.prose_finds(text)]
        else:
            paths = paths_between(text, *part)
            kinds = [
                found_between(kind, text, *part, piece)
                for kind, piece in zip(ft.PROSE_KINDS, ft.READ_PROSE_KINDS, strict=True)
            ]
        for path in paths:
            self.put("path", path, seq, True)  # a path holds no whitespace: normalized
        commands, tests, calls, numbers = kinds
        for command in commands:
            self.add("command", _head(command, COMMAND_CHARS), seq)
        for found in (*tests, *calls):
            self.add("identifier", found, seq)
        for number in numbers:
            self.add("number", number, seq)
        if requests:
            for line in text.splitlines():
                line = normalize(line)
                if len(line) >= _REQUEST_MIN:
                    self.add("request", line[:REQUEST_CHARS], seq)

    def identifiers(self, text: str, seq: int) -> None:
        for found in ft.test_ids(text):
            self.add("identifier", found, seq)
        for call in ft.calls(text):
            self.add("identifier", call, seq)


class _Recorder(_Collector):
    """A collector that records what is added, in order (:func:`_compute_adds`)."""

    def __init__(self) -> None:
        super().__init__()
        self.adds: list[tuple[FactKind, str, bool]] = []

    def put(self, kind: FactKind, text: str, seq: int, named: bool) -> None:
        self.adds.append((kind, text, named))


def _head(command: str, limit: int) -> str:
    """The identifying head of a command: its first non-blank line, cut to ``limit``."""
    for line in command.strip().splitlines():
        if line.strip():
            return normalize(line)[:limit]
    return ""


def extract_facts(messages: Iterable[Message], *, keep: bool = True) -> list[Fact]:
    """Return the facts of ``messages``, deduplicated, in order of first appearance.

    A tool result is read as a file view when the call it answers (looked up among
    ``messages``; a compaction never separates a call from its results) only showed content.
    Messages without a seq count as seq 0; ``summary`` messages are skipped.

    What each message gives (its facts, given the call it answers, and the calls it makes) is
    kept in a small memo (:data:`MEMO_SIZE` messages, :data:`MEMO_CHARS` characters), and so
    are the latest results (:mod:`ctxledger.domain._fact_runs`), by their messages: the host
    extracts a summary's facts on its compaction worker (or its worker process, see
    :func:`remember_facts`), so that the checkpoint's fact block, made on the history actor,
    finds them (see :func:`ctxledger.domain.facts.checkpoint_fact_block`).

    Args:
        messages: Messages of one session, oldest first.
        keep: Keep what each message gives, and the result, in the memo. ``False`` for
            messages made for this call alone (the digest's middles of long outputs): kept,
            they would only push out the facts of messages that live on, and live on in the
            memo themselves.

    Returns:
        One :class:`Fact` per (kind, text), carrying the newest seq that holds it.
    """
    given = messages if isinstance(messages, list | tuple) else tuple(messages)
    if keep:
        pieces = _memo.runs.find(given)
        if pieces is not None:
            return _joined(pieces)
    collector = _Collector()

    def read(message: Message, name: str | None, command: str | None) -> _Read:
        return _memo.read(message, name, command, keep=keep)

    for message, (adds, _) in _walk(given, read):
        seq = message.seq or 0
        for kind, text, named in adds:
            collector.put(kind, text, seq, named)
    facts = list(collector.found.values())
    if keep:
        _memo.runs.keep(given, facts)
    return facts


def message_reads(messages: Iterable[Message]) -> MessageReads:
    """What each of ``messages`` gives to :func:`extract_facts` (summary messages skipped),
    read now and not kept: made where nobody waits (a summary worker process) and handed to
    :func:`remember_reads` where the facts are wanted."""
    return [got for _, got in _walk(messages, _compute_adds)]


def remember_reads(messages: Iterable[Message], reads: MessageReads) -> bool:
    """Keep ``reads`` (:func:`message_reads` of the same messages, made elsewhere) in the memo
    of :func:`extract_facts`, which then finds them instead of reading ``messages`` again.

    Returns:
        Whether they were kept: nothing is when their count is not that of ``messages``.
    """
    shown = [message for message in messages if message.role != "summary"]
    if len(shown) != len(reads):
        return False
    given = iter(reads)

    def keep(message: Message, name: str | None, command: str | None) -> _Read:
        return _memo.keep(message, name, command, next(given))

    for _ in _walk(shown, keep):
        pass
    return True


def _joined(pieces: list[tuple[Fact, ...]]) -> list[Fact]:
    """The facts of consecutive runs of messages as one reading gives them: one per (kind,
    text), in order of first appearance, with the newest seq, named if any is."""
    if len(pieces) == 1:
        return list(pieces[0])
    collector = _Collector()
    for facts in pieces:
        for fact in facts:
            collector.merge(fact)
    return list(collector.found.values())


def remember_facts(messages: Sequence[Message], facts: Iterable[Fact]) -> None:
    """Keep ``facts``, :func:`extract_facts` of ``messages`` made elsewhere (a summary worker
    process), as its result for these messages: a call with the same messages (the same
    objects, in order) returns them without reading a message."""
    _memo.runs.keep(messages, list(facts))


def _walk(
    messages: Iterable[Message], read: Callable[[Message, str | None, str | None], _Read]
) -> Iterator[tuple[Message, _Read]]:
    """Each message (summary messages skipped) with what ``read`` says it gives; a tool result
    is read with the name and command of the call it answers (looked up among ``messages``)."""
    calls: dict[str, tuple[str, str | None]] = {}
    for message in messages:
        role = message.role
        if role == "summary":
            continue
        if role == "tool":
            name, command = calls.get(message.tool_call_id or "", (message.name or "tool", None))
            yield message, read(message, name, command)
            continue
        got = read(message, None, None)
        for call_id, call_name, call_command in got[1]:
            calls[call_id] = (call_name, call_command)
        yield message, got


#: What the memo of :func:`extract_facts` keeps at most: messages, and characters of their
#: content and call arguments (it holds the messages; the oldest entries are dropped first).
MEMO_SIZE = 8192
MEMO_CHARS = 8_000_000

#: What one message gives: the facts it adds, in order, as (kind, normalized text, named),
#: and the calls it makes, as (id, tool name, command or None).
_Read = tuple[tuple[tuple[FactKind, str, bool], ...], tuple[tuple[str, str, str | None], ...]]

#: What each message of a sequence gives (see :func:`message_reads`).
MessageReads = list[_Read]


class _Memo(IdentityMemo[tuple[int, str | None, str | None], _Read]):
    """The facts of recent messages, by the message's identity and the call a tool result
    answers (see :class:`IdentityMemo`), and the latest results of :func:`extract_facts`."""

    def __init__(self) -> None:
        super().__init__(lambda: (MEMO_SIZE, MEMO_CHARS))
        self.runs: Runs[Fact] = Runs()  # the latest results of extract_facts, with their messages

    def read(
        self, message: Message, name: str | None, command: str | None, *, keep: bool = True
    ) -> _Read:
        """What ``message`` gives (for a tool result, ``name`` and ``command`` are those of the
        call it answers), from the memo, or read now (and kept if ``keep``)."""
        found = self.get((id(message), name, command), message)
        if found is not None:
            return found
        read = _compute_adds(message, name, command)
        return self.keep(message, name, command, read) if keep else read

    def keep(self, message: Message, name: str | None, command: str | None, read: _Read) -> _Read:
        """Keep ``read``, what ``message`` gives (the newest entry; the oldest go first)."""
        return self.put((id(message), name, command), message, read, held_chars(message))


_memo = _Memo()


def _compute_adds(message: Message, name: str | None, command: str | None) -> _Read:
    """What ``message`` gives (see :data:`_Read`), read now."""
    return _read_adds(message, name, command)


def _read_adds(
    message: Message, name: str | None, command: str | None, part: tuple[int, int] | None = None
) -> _Read:
    """:func:`_compute_adds`, or with ``part`` that of ``message.content[slice(*part)]``."""
    if message.role == "tool":
        return _tool_adds(message, name, command, part), ()
    collector = _Recorder()
    seq = 0
    collector.prose(message.content, seq, requests=message.role == "user", part=part)
    calls: list[tuple[str, str, str | None]] = []
    for call in message.tool_calls:
        arguments = ex.decode_arguments(call.arguments)
        call_command = ex.command_of(call.name, arguments)
        calls.append((call.id, call.name, call_command))
        if call_command is not None:
            collector.add("command", _head(call_command, COMMAND_CHARS), seq)
            for path in ex.paths(call_command):
                collector.add("path", path, seq)
            collector.identifiers(call_command, seq)
            continue
        for key, value in arguments.items():
            if not isinstance(value, str):
                continue
            if key in ex.CONTENT_KEYS:
                for definition in ex.definitions(value):
                    collector.add("identifier", definition, seq)
            elif key in ex.PATH_KEYS and value.strip() and "\n" not in value:
                collector.add("path", value, seq)
            else:
                for path in ex.paths(value):
                    collector.add("path", path, seq)
    return tuple(collector.adds), tuple(calls)


def _tool_adds(
    message: Message, name: str | None, command: str | None, part: tuple[int, int] | None = None
) -> tuple[tuple[FactKind, str, bool], ...]:
    """What a tool result gives (see :data:`_Read`), or with ``part`` its part gives."""
    collector = _Recorder()
    whole = message.content
    output = whole if part is None else whole[part[0] : part[1]]
    if not ex.is_viewer(name or "tool", command):
        if part is None:
            lines = ex.error_lines(output, viewer=False, limit=None)
        else:
            lines = error_lines_between(whole, *part)
        if not lines and ex.exit_code(output):
            last = ex.last_line(output)
            lines = [last] if last else []
        for line in lines:
            collector.add("error", ex.strip_tags(line)[:ERROR_CHARS], 0)
    for path in ex.paths(output) if part is None else paths_between(whole, *part):
        collector.put("path", path, 0, False)  # a path holds no whitespace: normalized
    return tuple(collector.adds)


def part_facts(message: Message, start: int, end: int) -> list[Fact]:
    """``extract_facts([part], keep=False)`` of ``message`` with ``message.content[start:end]``
    as its content: a tool result's or an assistant text's part is read from what its whole
    content gives (which the fact reads of the message then find kept, see
    :mod:`ctxledger.domain._text_parts`)."""
    if message.role in ("summary", "user"):
        part = msgspec.structs.replace(message, content=message.content[start:end])
        return extract_facts([part], keep=False)
    collector = _Collector()
    name = message.name or "tool" if message.role == "tool" else None
    for kind, text, named in _read_adds(message, name, None, (start, end))[0]:
        collector.put(kind, text, message.seq or 0, named)
    return list(collector.found.values())


def extracted_runs(messages: Sequence[Message]) -> list[tuple[Fact, ...]]:
    """:func:`extract_facts` of ``messages`` as the kept runs' results (joined, they are it),
    or as one piece when no runs make them up."""
    return _memo.runs.find(messages) or [tuple(extract_facts(messages))]
