"""The tables of a session report: every text and every rendered message stored once.

The report names a text or a message by its index in these tables, so a text repeated across
steps (a tool result every view shows) is sent once. Texts longer than :data:`CLIP_CHARS` are
clipped (head and tail) and listed in ``clipped``; each view is sent as runs of message ids.
"""

from __future__ import annotations

from typing import Any

from ctxledger.domain import SessionState
from ctxledger.domain.render import TRUNCATION_MARKER, mask_text
from ctxledger.messages import Message

__all__ = ["CLIP_CHARS", "Tables", "runs"]

#: Texts longer than this are shown as head and tail with a note of what was left out.
CLIP_CHARS = 20_000

# Message flags: how a view shows a history message.
_RAW, _MASKED, _TRUNCATED, _SUMMARY, _CHANGED = "raw", "masked", "truncated", "summary", "changed"


def _clip(text: str) -> tuple[str, bool]:
    if len(text) <= CLIP_CHARS:
        return text, False
    keep = CLIP_CHARS // 2
    left = len(text) - 2 * keep
    note = f"\n[… report: {left:,} of {len(text):,} characters not shown here …]\n"
    return text[:keep] + note + text[-keep:], True


class Tables:
    """Texts and rendered messages, each stored once and named by its index."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.clipped: list[int] = []
        self._text_ids: dict[str, int] = {}
        self.messages: list[list[Any]] = []
        self._message_ids: dict[tuple[Any, ...], int] = {}

    def text(self, text: str) -> int:
        """The id of ``text`` (clipped if long), stored on first use."""
        found = self._text_ids.get(text)
        if found is None:
            found = self._text_ids[text] = len(self.texts)
            shown, clipped = _clip(text)
            self.texts.append(shown)
            if clipped:
                self.clipped.append(found)
        return found

    def message(self, message: Message, state: SessionState) -> int:
        """The id of ``message`` as shown (a history message, or a view's rendering of one)."""
        seq = message.seq
        key = (seq or 0, message.role, message.content)
        found = self._message_ids.get(key)
        if found is not None:
            return found
        flag = _RAW
        if message.role == "summary":
            flag = _SUMMARY
        elif seq is not None and 1 <= seq <= len(state.history):
            original = state.history[seq - 1]
            if message.content != original.content:
                if message.content == mask_text(state.tool_name(original)):
                    flag = _MASKED
                elif TRUNCATION_MARKER.search(message.content):
                    flag = _TRUNCATED
                else:
                    flag = _CHANGED
        calls = [[call.id, call.name, self.text(call.arguments)] for call in message.tool_calls]
        found = self._message_ids[key] = len(self.messages)
        self.messages.append(
            [
                seq or 0,
                message.role,
                message.name or "",
                self.text(message.content),
                flag,
                calls,
                message.tool_call_id or "",
                bool(message.metadata.get("synthetic")),
            ]
        )
        return found


def runs(ids: list[int]) -> list[int]:
    """``[start, count, start, count, ...]`` for runs of consecutive ids."""
    out: list[int] = []
    for value in ids:
        if out and out[-2] + out[-1] == value:
            out[-1] += 1
        else:
            out += [value, 1]
    return out
