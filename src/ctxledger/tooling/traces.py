"""Read and write trace files: one JSON message per line, the format of ``../shared/traces``.

Each non-blank line is one object with the keys ``role`` (system, user, assistant or tool) and
``content`` (a string), and optionally ``tool_calls`` (assistant: a list of ``{"id", "name",
"arguments"}`` with ``arguments`` a JSON object encoded as a string), ``tool_call_id`` (tool: the
call it answers) and ``name``. Other keys are rejected, so a misspelt key cannot silently drop data.

Across lines the reader checks the pairing the format promises: tool-call ids are unique within a
file, every tool message answers exactly one earlier, still unanswered call (and carries that call's
tool name if it names one), and every call is answered by the end of the file, unless the caller
allows a trailing pending step. Line numbers are 1-based and count blank lines, as editors do.

:func:`write_trace` writes exactly what :func:`read_trace` reads: the real traces round-trip
byte for byte. ``seq`` and ``metadata`` are not part of the format and are not written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from ctxledger.errors import InvalidMessageError, TraceFormatError
from ctxledger.messages import APPENDABLE_ROLES, Message, ToolCall
from ctxledger.tooling._transcript_file import write_atomically

__all__ = ["iter_trace", "read_trace", "validate_trace", "write_trace"]

PathLike = str | os.PathLike[str]


class _CallLine(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    name: str
    arguments: str


class _MessageLine(msgspec.Struct, forbid_unknown_fields=True):
    role: str
    content: str
    tool_calls: list[_CallLine] | None = None
    tool_call_id: str | None = None
    name: str | None = None


_line_decoder = msgspec.json.Decoder(_MessageLine)


@dataclass(slots=True)
class _CallSeen:
    line: int
    name: str | None
    answered_on: int | None = None


class _Pairing:
    """The cross-line state: every tool call seen so far, where it was made and where answered."""

    def __init__(self) -> None:
        self._calls: dict[str, _CallSeen] = {}

    def check(self, message: Message, line: int) -> str | None:
        """Return why ``message`` cannot follow the lines seen so far, else record it."""
        if message.role == "tool":
            call_id = message.tool_call_id
            seen = self._calls.get(call_id or "")
            if seen is None:
                return f"tool result answers no earlier tool call (tool_call_id {call_id!r})"
            if seen.answered_on is not None:
                return (
                    f"tool result answers call {call_id!r}, "
                    f"already answered on line {seen.answered_on}"
                )
            if message.name is not None and seen.name is not None and message.name != seen.name:
                return (
                    f"tool result is named {message.name!r} but call {call_id!r} "
                    f"(line {seen.line}) called {seen.name!r}"
                )
            seen.answered_on = line
            return None
        for call in message.tool_calls:
            if call.id in self._calls:
                return f"tool call id {call.id!r} already used on line {self._calls[call.id].line}"
        for call in message.tool_calls:
            self._calls[call.id] = _CallSeen(line, call.name)
        return None

    def note_unreadable(self, raw: bytes, line: int) -> None:
        """Record the call ids of a line that failed, so its answers do not fail as well."""
        try:
            obj = json.loads(raw)
        except ValueError:
            return
        calls = obj.get("tool_calls") if isinstance(obj, dict) else None
        for call in calls if isinstance(calls, list) else ():
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                name = call.get("name")
                seen = _CallSeen(line, name if isinstance(name, str) else None)
                self._calls.setdefault(call["id"], seen)

    def unanswered(self) -> list[tuple[int, str]]:
        """Return ``(line, reason)`` for every call that was never answered."""
        return [
            (seen.line, f"tool call {call_id!r} ({seen.name}) is never answered")
            for call_id, seen in self._calls.items()
            if seen.answered_on is None
        ]


def _to_message(raw: bytes) -> Message:
    """Decode one line into a message; raise ``InvalidMessageError`` saying what is wrong."""
    try:
        decoded = _line_decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise InvalidMessageError(f"bad message: {exc}") from None
    except msgspec.DecodeError as exc:
        raise InvalidMessageError(f"not valid JSON: {exc}") from None
    if decoded.role not in APPENDABLE_ROLES:
        # Message also accepts "summary", which exists only in model views, never in a trace.
        raise InvalidMessageError(
            f"unknown role {decoded.role!r}; expected one of {sorted(APPENDABLE_ROLES)}"
        )
    return Message(
        role=decoded.role,
        content=decoded.content,
        tool_calls=tuple(
            ToolCall(call.id, call.name, call.arguments) for call in decoded.tool_calls or ()
        ),
        tool_call_id=decoded.tool_call_id,
        name=decoded.name,
    )


def _scan(path: Path, allow_pending: bool) -> Iterator[tuple[int, Message | TraceFormatError]]:
    """Yield every line as a message or as the error it raises, going on after errors."""
    pairing = _Pairing()
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                message = _to_message(raw)
            except InvalidMessageError as exc:
                pairing.note_unreadable(raw, number)
                yield number, TraceFormatError(path, number, str(exc))
                continue
            problem = pairing.check(message, number)
            yield number, message if problem is None else TraceFormatError(path, number, problem)
    if not allow_pending:
        for number, problem in pairing.unanswered():
            yield number, TraceFormatError(path, number, problem)


def iter_trace(path: PathLike, *, allow_pending: bool = False) -> Iterator[tuple[int, Message]]:
    """Stream a trace file as ``(line number, message)`` pairs, stopping at the first bad line.

    Args:
        path: The ``.jsonl`` trace file.
        allow_pending: Accept tool calls still unanswered at the end of the file (a trace cut
            off mid-step, as a crashed agent leaves it).

    Yields:
        The 1-based line number and the message of every non-blank line, in file order.

    Raises:
        TraceFormatError: A line is malformed or breaks the call/result pairing; unanswered
            calls are reported after the last message, at the line that made them.
        OSError: The file cannot be read.
    """
    for number, item in _scan(Path(path), allow_pending):
        if isinstance(item, TraceFormatError):
            raise item
        yield number, item


def read_trace(path: PathLike, *, allow_pending: bool = False) -> list[Message]:
    """Read a whole trace file into messages (without seqs).

    Args:
        path: The ``.jsonl`` trace file.
        allow_pending: Accept tool calls still unanswered at the end of the file.

    Returns:
        The messages in file order.

    Raises:
        TraceFormatError: The first malformed line (see :func:`validate_trace` for all of them).
        OSError: The file cannot be read.
    """
    return [message for _, message in iter_trace(path, allow_pending=allow_pending)]


def validate_trace(path: PathLike, *, allow_pending: bool = False) -> list[TraceFormatError]:
    """Check a whole trace file and return every problem instead of stopping at the first.

    A line that cannot be read is skipped, but the call ids it names are remembered so that its
    tool results are not reported a second time.

    Args:
        path: The ``.jsonl`` trace file.
        allow_pending: Accept tool calls still unanswered at the end of the file.

    Returns:
        The errors sorted by line number; empty when the file is valid.

    Raises:
        OSError: The file cannot be read.
    """
    scanned = _scan(Path(path), allow_pending)
    errors = [item for _, item in scanned if isinstance(item, TraceFormatError)]
    return sorted(errors, key=lambda error: error.line)


def _to_line(message: Message) -> str:
    # Key order and ensure_ascii=False are those of the real traces, so they round-trip exactly.
    obj: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        obj["tool_calls"] = [
            {"id": call.id, "name": call.name, "arguments": call.arguments}
            for call in message.tool_calls
        ]
    if message.tool_call_id is not None:
        obj["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        obj["name"] = message.name
    return json.dumps(obj, ensure_ascii=False) + "\n"


def write_trace(
    path: PathLike, messages: Iterable[Message], *, allow_pending: bool = False
) -> Path:
    """Write messages as a trace file, atomically: a valid file appears, or nothing changes.

    The messages are checked as :func:`read_trace` would check the result, so every file this
    writes can be read back into equal messages. ``seq`` and ``metadata`` are dropped.

    Args:
        path: The ``.jsonl`` file to create or replace.
        messages: The messages in order.
        allow_pending: Accept tool calls still unanswered after the last message.

    Returns:
        The path written.

    Raises:
        TraceFormatError: A message cannot be written (for example a ``summary`` message or a
            tool result answering no earlier call); ``line`` is the line it would have had.
        OSError: The file cannot be written.
    """
    target = Path(path)
    pairing = _Pairing()
    lines = []
    for number, message in enumerate(messages, start=1):
        problem = (
            f"role {message.role!r} cannot be written to a trace"
            if message.role not in APPENDABLE_ROLES
            else pairing.check(message, number)
        )
        if problem is not None:
            raise TraceFormatError(target, number, problem)
        lines.append(_to_line(message))
    if not allow_pending and (unanswered := pairing.unanswered()):
        raise TraceFormatError(target, *unanswered[0])
    write_atomically(target, "".join(lines).encode("utf-8"))
    return target
