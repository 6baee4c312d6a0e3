"""The hooks of :class:`~ctxledger.testing.EventLogContract` and the events its cases append."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from ctxledger.config import Config
from ctxledger.events.types import (
    Event,
    MessageAppended,
    SessionOpened,
    UsageReported,
    ViewServed,
)
from ctxledger.messages import Message, ToolCall
from ctxledger.storage import EventLog

__all__ = ["ContractHooks", "in_threads", "mixed_events", "usage"]


class ContractHooks:
    """What a backend tells the contract suite: how to open its log, and optional extras."""

    def make_log(self, tmp_path: Path) -> EventLog:
        """Return a new, empty, open log for one test case (required).

        Args:
            tmp_path: The case's own temporary folder (pytest's ``tmp_path``), for a backend
                that keeps files; a backend on a server can ignore it.
        """
        raise NotImplementedError(
            f"{type(self).__name__} must define make_log(self, tmp_path) returning an empty log"
        )

    def reopen_log(self, log: EventLog, tmp_path: Path) -> EventLog:
        """Close ``log`` and open the same log again, as after a restart (optional).

        The default skips the cases that need it (a log in memory has no restart). A durable
        backend defines it, so that the suite checks that what was committed survives.
        """
        pytest.skip(f"{type(self).__name__} defines no reopen_log: restart cases not run")

    def damage_snapshot(self, log: EventLog, session_id: str, seq: int) -> EventLog:
        """Flip a byte of the stored snapshot of ``session_id`` at ``seq`` (optional).

        Returns:
            The log to use from then on (``log`` itself, or a reopened one).

        The default skips the case that needs it.
        """
        pytest.skip(f"{type(self).__name__} defines no damage_snapshot: that case not run")


def usage(count: int, start: int = 0) -> list[Event]:
    """``count`` small events, told apart by their ``prompt_tokens``."""
    return [UsageReported(prompt_tokens=start + index) for index in range(count)]


def mixed_events() -> list[Event]:
    """A realistic batch: session opened, messages small and large, a served view."""
    call = ToolCall("call_1", "bash", '{"command": "ls -la"}')
    return [
        SessionOpened(session_id="s", config=Config(), created_at=1.5),
        MessageAppended(message=Message.system("You are helpful.").with_seq(1)),
        MessageAppended(message=Message.user("list the files " * 200).with_seq(2)),
        MessageAppended(message=Message.assistant("", [call]).with_seq(3)),
        MessageAppended(message=Message.tool("a.txt\nb.txt\n" * 500, "call_1", "bash").with_seq(4)),
        ViewServed(through_seq=4, estimated_tokens=1234, view_hash="ab" * 32),
    ]


def in_threads(count: int, work: Callable[[int], object]) -> None:
    """Run ``work(0) ... work(count - 1)`` on ``count`` threads started together; join them.

    Raises:
        AssertionError: A thread raised; the first error is chained.
    """
    barrier = threading.Barrier(count)
    failures: list[BaseException] = []

    def run(index: int) -> None:
        barrier.wait()
        try:
            work(index)
        except BaseException as exc:  # reported by the caller's thread, where pytest looks
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise AssertionError(f"{len(failures)} of {count} threads failed") from failures[0]
