"""The latest results of :func:`~ctxledger.domain.facts.extract_facts`, by their messages.

A checkpoint's fact block extracts the facts of every message it newly covers, on the history
actor, while the step that activates it waits. Those messages were summarised before, in the
background, often as a chain of jobs each covering what the session grew since the last (a
summary prepared ahead and extended): the jobs' compaction threads or worker processes extracted
the facts of their own messages then (:mod:`ctxledger.actors.fact_warming`), and :class:`Runs`
keeps each result with its messages. A later call whose messages are those of one run, or of
consecutive runs, is answered from them (joined by ``_fact_extract``: facts merged by (kind,
text), in order of first appearance, with the newest seq and ``named`` if any is, as one reading
merges them).

Answers are exact: the messages are compared by identity (messages are immutable; a run holds
its messages, so no id is reused while it lives), and runs are joined only where reading them
apart gives what one reading of them together gives: a tool result is read with the call it
answers, so every run after the first must hold the calls of its own tool results (a
compaction never separates them). The facts are of any type: this module knows messages only.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Sequence
from typing import Generic, TypeVar

from ctxledger.domain._identity_memo import held_chars
from ctxledger.messages import Message

__all__ = ["RUNS", "RUN_CHARS", "Runs", "closed"]

_Fact = TypeVar("_Fact")

#: How many results are kept, and the characters of their messages' contents and call
#: arguments at most (a run holds its messages; the oldest go first).
RUNS = 64
RUN_CHARS = 8_000_000


def closed(messages: Sequence[Message]) -> bool:
    """Whether every tool result among ``messages`` answers a call made among them, before it
    (then they are read the same, whatever comes before them)."""
    calls: set[str] = set()
    for message in messages:
        role = message.role
        if role == "tool":
            if (message.tool_call_id or "") not in calls:
                return False
        elif role != "summary":
            calls.update(call.id for call in message.tool_calls)
    return True


class Runs(Generic[_Fact]):
    """Results of ``extract_facts`` by the identity of their first message; shared by the
    host's threads under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[int, tuple[tuple[Message, ...], tuple[_Fact, ...], bool, int]] = {}
        self.chars = 0  # of the kept messages' contents and call arguments

    def keep(self, messages: Sequence[Message], facts: Sequence[_Fact]) -> None:
        """Keep ``facts``, the result for ``messages`` (nothing for no messages, or for more
        than :data:`RUN_CHARS` characters of them)."""
        size = sum(map(held_chars, messages))
        if not messages or size > RUN_CHARS:
            return
        entry = (tuple(messages), tuple(facts), closed(messages), size)
        with self._lock:
            old = self._runs.pop(id(messages[0]), None)
            if old is not None:
                self.chars -= old[3]
            self._runs[id(messages[0])] = entry
            self.chars += size
            while len(self._runs) > RUNS or self.chars > RUN_CHARS:
                self.chars -= self._runs.pop(next(iter(self._runs)))[3]

    def find(self, messages: Sequence[Message]) -> list[tuple[_Fact, ...]] | None:
        """The results of the kept runs that ``messages`` (the same objects, in order) are made
        of, one run or consecutive ones, in order (their facts are those of one reading merged,
        see the module docstring), or None."""
        pieces: list[tuple[_Fact, ...]] = []
        start, end = 0, len(messages)
        while start < end:
            with self._lock:
                entry = self._runs.get(id(messages[start]))
            if entry is None:
                return None
            kept, facts, whole, _ = entry
            stop = start + len(kept)
            if (
                stop > end
                or (start and not whole)
                or not all(map(operator.is_, kept, messages[start:stop]))
            ):
                return None
            pieces.append(facts)
            start = stop
        return pieces or None
