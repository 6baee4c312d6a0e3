"""Token counting: the :class:`Tokenizer` protocol and the default ``chars // 3`` estimator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ctxledger.messages import Message

__all__ = ["CharTokenizer", "Tokenizer", "message_chars"]


def message_chars(message: Message) -> int:
    """Count the characters the budget counts for ``message``.

    That is its content plus the name and the arguments of each of its tool calls (DESIGN §2).
    Roles, ids and metadata are not counted.
    """
    total = len(message.content)
    for call in message.tool_calls:
        total += len(call.name) + len(call.arguments)
    return total


@runtime_checkable
class Tokenizer(Protocol):
    """Counts tokens for the budget; inject a real tokenizer to replace the estimate.

    Implementations must be deterministic: replay re-derives every decision from the same counts.
    """

    def count_text(self, text: str) -> int:
        """Return the number of tokens of ``text``."""
        ...

    def count_message(self, message: Message) -> int:
        """Return the tokens of one message: content, tool-call names and arguments."""
        ...

    def count_messages(self, messages: Sequence[Message]) -> int:
        """Return the tokens of a whole prompt made of ``messages``."""
        ...


class CharTokenizer:
    """The default estimator: one token per three characters (DESIGN §2).

    ``count_messages`` divides the *total* character count, so that the estimate of a view is
    exactly ``chars_of_view // 3`` rather than a sum of rounded per-message figures.
    """

    __slots__ = ("chars_per_token",)

    def __init__(self, chars_per_token: int = 3) -> None:
        """Create the estimator.

        Args:
            chars_per_token: Characters counted as one token (3 by default).
        """
        if chars_per_token < 1:
            raise ValueError("chars_per_token must be >= 1")
        self.chars_per_token = chars_per_token

    def count_text(self, text: str) -> int:
        """Return ``len(text) // chars_per_token``."""
        return len(text) // self.chars_per_token

    def count_message(self, message: Message) -> int:
        """Return ``message_chars(message) // chars_per_token``."""
        return message_chars(message) // self.chars_per_token

    def count_messages(self, messages: Sequence[Message]) -> int:
        """Return the total characters of ``messages`` divided by ``chars_per_token``."""
        return sum(message_chars(message) for message in messages) // self.chars_per_token

    def __repr__(self) -> str:
        return f"CharTokenizer(chars_per_token={self.chars_per_token})"
