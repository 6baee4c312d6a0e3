"""What the summariser is given: covered messages, oversize tool output cut to what informs.

The summariser is itself a paid model call. Given every covered message raw, it reads whole file
dumps, test logs and repeated outputs that a summary reduces to a line or two. With
``Config.summary_result_chars`` set, :func:`summary_input` gives it instead:

* a tool result or an assistant text longer than the limit as its head and tail (the limit's
  characters in all) and, in place of the middle, the facts extracted from the middle (error
  lines, paths, commands, names; :func:`ctxledger.domain.facts.extract_facts`) that head and
  tail do not already show; long strings in tool-call arguments (beyond
  :data:`ARGUMENT_FACTOR` times the limit) as their head and tail;
* a message whose content repeats one given earlier in the same compaction (a file read twice,
  the same test run again) as a reference to it, so no text reaches the summariser twice.

Only the summariser's input changes: history, views and the fact block of the checkpoint are
built from the messages themselves. A Config recorded before the field existed decodes to 0
(raw input), so old logs and what-if over them summarise exactly as they did.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import msgspec

from ctxledger.domain._fact_extract import normalize, part_facts
from ctxledger.domain._text_parts import keep_cut_errors, keep_cut_paths
from ctxledger.messages import Message

__all__ = ["ARGUMENT_FACTOR", "MIN_REPEAT_CHARS", "summary_input"]

#: Strings in tool-call arguments are cut beyond this many times the limit (4 was measured: more
#: input, no better retention on the traces).
ARGUMENT_FACTOR = 1

#: Contents shorter than this are never replaced by a reference (a reference is not shorter).
MIN_REPEAT_CHARS = 200

#: Whose long contents are cut: tool output and the assistant's own long text (reasoning, file
#: contents it wrote); user messages, which carry the requests, are always given whole.
_CUT_ROLES = frozenset({"tool", "assistant"})

#: Which facts of a middle come first when they do not all fit (a stable sort keeps their order).
_PRIORITY = {"error": 0, "command": 1, "request": 2, "identifier": 3, "number": 4, "path": 5}

#: Fact kinds given as the line they were found as; the others are prefixed with their kind.
_AS_IS = frozenset({"error", "command", "request"})


def summary_input(messages: Sequence[Message], limit: int) -> tuple[Message, ...]:
    """Return ``messages`` as the summariser is to see them (``limit`` 0: unchanged).

    Args:
        messages: The newly covered messages, oldest first.
        limit: ``Config.summary_result_chars``: the characters kept of an oversize tool result.
    """
    if limit <= 0:
        return tuple(messages)
    seen: dict[bytes, int] = {}
    out: list[Message] = []
    for message in messages:
        content = message.content
        if len(content) >= MIN_REPEAT_CHARS and message.role != "user":
            key = hashlib.blake2b(content.encode(), digest_size=16).digest()
            first = seen.get(key)
            if first is not None:
                out.append(
                    msgspec.structs.replace(
                        message, content=f"[same content as message #{first}, not repeated]"
                    )
                )
                continue
            seen[key] = message.seq or 0
        if message.role in _CUT_ROLES and len(content) > limit:
            message = msgspec.structs.replace(message, content=_cut(message, limit))
        if any(len(call.arguments) > ARGUMENT_FACTOR * limit for call in message.tool_calls):
            calls = tuple(
                msgspec.structs.replace(
                    call, arguments=_cut_arguments(call.arguments, ARGUMENT_FACTOR * limit)
                )
                for call in message.tool_calls
            )
            message = msgspec.structs.replace(message, tool_calls=calls)
        out.append(message)
    return tuple(out)


def _cut_arguments(arguments: str, limit: int) -> str:
    """Cut the long strings of a call's JSON arguments (head and tail), keeping its keys."""
    try:
        value = json.loads(arguments)
    except ValueError:  # pragma: no cover - a Message's arguments are always JSON
        return arguments
    return json.dumps(_cut_value(value, limit), ensure_ascii=False)


def _cut_value(value: object, limit: int) -> object:
    if isinstance(value, str) and len(value) > limit:
        head = limit - limit // 2
        omitted = len(value) - limit
        return f"{value[:head]}\n[... {omitted} characters omitted ...]\n{value[-(limit // 2) :]}"
    if isinstance(value, dict):
        return {key: _cut_value(item, limit) for key, item in value.items()}
    if isinstance(value, list):
        return [_cut_value(item, limit) for item in value]
    return value


def _cut(message: Message, limit: int) -> str:
    content = message.content
    head_chars = limit - limit // 2
    tail_chars = limit // 2
    middle_end = len(content) - tail_chars
    head, tail = content[:head_chars], content[middle_end:]
    shown = normalize(head + "\n" + tail)
    facts = sorted(
        (
            fact
            for fact in part_facts(message, head_chars, middle_end)
            if fact.text not in shown
        ),
        key=lambda fact: _PRIORITY.get(fact.kind, len(_PRIORITY)),
    )
    lines = [f"[... {middle_end - head_chars} characters omitted; the lines and names they hold:"]
    room = 3 * limit  # the facts take at most three times the room of head and tail
    for index, fact in enumerate(facts):
        # Each fact on a line of its own, as it stood (an error line stays an error line).
        line = fact.text if fact.kind in _AS_IS else f"{fact.kind}: {fact.text}"
        if len(line) > room:
            lines.append(f"(and {len(facts) - index} more)")
            break
        lines.append(line)
        room -= len(line) + 1
    lines.append("...]")
    block = "\n".join(lines) + "\n"
    cut = head + "\n" + block + tail
    # The summariser reads the paths of the cut message: those of its head and tail are the
    # whole content's, read already.
    keep_cut_paths(cut, content, head_chars, block, middle_end)
    keep_cut_errors(cut, content, head_chars, block, middle_end)
    return cut
