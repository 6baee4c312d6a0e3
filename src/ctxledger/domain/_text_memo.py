"""What was read from recent texts, by the text itself: :class:`TextMemo`.

A background summary reads each covered message more than once: the summariser reads a short
message as it is and the fact reads read it again, and a long tool result is read whole for the
facts and in parts for the summariser's input (:mod:`ctxledger.domain.digest`). What a pure
function of a text gives is kept here, by the text (strings are immutable and cache their hash,
so a lookup of the same string object costs a dictionary probe).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["TextMemo"]

_Value = TypeVar("_Value")


class TextMemo(Generic[_Value]):
    """``read(text)`` of recent texts, by the text; shared by the host's threads.

    Once it holds more than ``size`` entries or more than ``chars`` characters of texts, the
    oldest go first.

    Args:
        read: The pure function of a text that is kept.
        size: Entries kept at most.
        chars: Characters of the kept texts at most (a longer text is read and not kept).
    """

    def __init__(self, read: Callable[[str], _Value], size: int, chars: int) -> None:
        self.read = read
        self.size = size
        self.chars = chars
        self.entries: dict[str, _Value] = {}
        self.held = 0  # characters of the kept texts
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget every kept text."""
        with self._lock:
            self.entries.clear()
            self.held = 0

    def __call__(self, text: str) -> _Value:
        """``read(text)``, kept or read now (and kept)."""
        found = self.entries.get(text)
        if found is not None:
            return found
        value = self.read(text)
        self.put(text, value)
        return value

    def peek(self, text: str) -> _Value | None:
        """``read(text)`` if it is kept, else None (nothing is read)."""
        return self.entries.get(text)

    def put(self, text: str, value: _Value) -> None:
        """Keep ``value`` as ``read(text)`` (unless ``text`` is kept, or longer than ``chars``)."""
        if len(text) > self.chars:
            return
        with self._lock:
            if text not in self.entries:
                self.entries[text] = value
                self.held += len(text)
                while len(self.entries) > self.size or self.held > self.chars:
                    oldest = next(iter(self.entries))
                    self.held -= len(oldest)
                    del self.entries[oldest]
