"""What was read from recent messages, by the message's identity: the memo of facts
(:mod:`ctxledger.domain._fact_extract`) and of shown text (:mod:`ctxledger.domain._shown`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from ctxledger.messages import Message

__all__ = ["IdentityMemo", "held_chars"]

_Key = TypeVar("_Key", bound=Hashable)
_Value = TypeVar("_Value")


class IdentityMemo(Generic[_Key, _Value]):
    """Values read from recent messages, by a key made from the message's identity (messages
    are immutable; an entry holds its message, so the id is not reused while it lives).

    Shared by the host's threads under a lock. Once it holds more than ``bounds()[0]`` entries
    or more than ``bounds()[1]`` characters (each entry's ``size``), the oldest go first; the
    bounds are read at each :meth:`put` (the owning module's constants, which tests change).
    """

    def __init__(self, bounds: Callable[[], tuple[int, int]]) -> None:
        self.entries: dict[_Key, tuple[Message, _Value, int]] = {}
        self.chars = 0
        self.lock = threading.Lock()
        self._bounds = bounds

    def get(self, key: _Key, message: Message) -> _Value | None:
        """The value kept for ``message`` under ``key``, or None."""
        with self.lock:
            entry = self.entries.get(key)
        return entry[1] if entry is not None and entry[0] is message else None

    def put(self, key: _Key, message: Message, value: _Value, size: int) -> _Value:
        """Keep ``value``, read from ``message``, as the newest entry; return it."""
        most, chars = self._bounds()
        with self.lock:
            old = self.entries.pop(key, None)
            if old is not None:
                self.chars -= old[2]
            self.entries[key] = (message, value, size)
            self.chars += size
            while self.entries and (len(self.entries) > most or self.chars > chars):
                self.chars -= self.entries.pop(next(iter(self.entries)))[2]
        return value


def held_chars(message: Message) -> int:
    """The characters an entry holding ``message`` counts for it: its content and its calls'
    arguments."""
    return len(message.content) + sum(len(call.arguments) for call in message.tool_calls)
