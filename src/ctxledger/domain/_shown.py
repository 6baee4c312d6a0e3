"""What a view shows, as facts are looked up in it: :func:`shown_text` and :class:`Shown`.

A fact is shown by a view when its text occurs in the view's text with whitespace runs
collapsed (:func:`shown_text`). That text is the parts of the view's messages, each collapsed
on its own, joined by single spaces: collapsing ``a + "\\n" + b`` gives the collapsed ``a`` and
``b`` joined by one space (or the one that is not empty), so a message's part is the same in
every view that shows the message as it is, and is read once (kept in a small memo, by the
message's identity, as :func:`~ctxledger.domain.facts.extract_facts` keeps what a message
gives).

A checkpoint's fact block looks up a few hundred texts in a view of tens of thousands of
characters (most of an activation's time, on the history actor): :class:`Shown` answers most of
them without searching the whole text, and every answer is that of ``text in shown_text``.
"""

from __future__ import annotations

from collections.abc import Iterable

from ctxledger.domain import extract as ex
from ctxledger.domain._identity_memo import IdentityMemo, held_chars
from ctxledger.messages import Message

__all__ = ["Shown", "shown", "shown_text"]

#: What the memo keeps at most: messages, and characters of their parts.
MEMO_SIZE = 8192
MEMO_CHARS = 8_000_000

#: A message's part of the shown text and its words (the part split at its spaces).
_Part = tuple[str, frozenset[str]]


class Shown:
    """The text a view shows (:attr:`text`, :func:`shown_text` of its messages), with an exact
    and mostly fast ``text in shown``.

    ``fact in shown`` is ``fact in shown.text``; three shortcuts answer most lookups without
    searching all of it (the view's words are the text split at its spaces):

    * a fact without a space that is one of the view's words is shown, and one that occurs
      in none of them (each looked in once: they are joined) is not;
    * a fact of three words or more (split at single spaces) whose inner word is no word of
      the view is not shown: where the fact occurs, each inner word stands between two spaces,
      and the view's text holds no other whitespace, so it is one of the view's words;
    * a fact found in the summary message's part is shown: the part is a piece of the text
      (most facts a view shows, its summary shows).

    Args:
        parts: Each message's part (see :func:`shown`), in the view's order.
        summary: The summary message's part, or ``""``.
    """

    __slots__ = ("_distinct", "_parts", "_summary", "_words", "text")

    def __init__(self, parts: list[_Part], summary: str = "") -> None:
        self._parts = parts
        self._summary = summary
        self._words: set[str] | None = None
        self._distinct: str | None = None  # the view's words, each once, joined by spaces
        self.text = " ".join(part for part, _ in parts)

    def __contains__(self, fact: object) -> bool:
        if not isinstance(fact, str):
            raise TypeError(f"'in <Shown>' requires a string, not {type(fact).__name__}")
        known = self._words
        if known is None:
            known = self._words = set().union(*(words for _, words in self._parts))
        if " " not in fact:
            if fact in known:
                return True
            # Where a fact without a space occurs, it lies within one of the view's words: it
            # is looked for in each word once (most facts a view does not show are such).
            distinct = self._distinct
            if distinct is None:
                distinct = self._distinct = " ".join(known)
            return fact in distinct
        if not known.issuperset(fact.split(" ")[1:-1]):
            return False
        if self._summary and fact in self._summary:
            return True
        return fact in self.text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Shown({len(self.text)} characters)"


def shown(messages: Iterable[Message]) -> Shown:
    """What ``messages`` show, as :class:`Shown` (its :attr:`~Shown.text` is
    :func:`shown_text` of them)."""
    parts: list[_Part] = []
    summary = ""
    for message in messages:
        part = _memo.part(message)
        if part[0]:
            parts.append(part)
            if message.role == "summary":
                summary = part[0]
    return Shown(parts, summary)


def shown_text(messages: Iterable[Message]) -> str:
    """Everything ``messages`` show, whitespace collapsed: the texts facts are looked up in.

    Contents, tool-call names and arguments, and the shell command an argument carries (decoded,
    since the arguments hold it JSON-escaped).
    """
    return shown(messages).text


def _read(message: Message) -> _Part:
    """``message``'s part of the shown text (see the module docstring) and its words."""
    pieces = [message.content]
    for call in message.tool_calls:
        pieces.append(call.name)
        pieces.append(call.arguments)
        command = ex.command_of(call.name, ex.decode_arguments(call.arguments))
        if command:
            pieces.append(command)
    words = "\n".join(pieces).split()
    return " ".join(words), frozenset(words)  # the text is ex.one_line of the pieces


class _Memo(IdentityMemo[int, _Part]):
    """The parts of recent messages, by the message's identity (see :class:`IdentityMemo`).
    Its size counts what the entries hold: each message's content and call arguments, and its
    part."""

    def __init__(self) -> None:
        super().__init__(lambda: (MEMO_SIZE, MEMO_CHARS))

    def part(self, message: Message) -> _Part:
        key = id(message)
        found = self.get(key, message)
        if found is not None:
            return found
        part = _read(message)
        return self.put(key, message, part, held_chars(message) + len(part[0]))


_memo = _Memo()
