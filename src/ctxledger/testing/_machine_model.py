"""What :class:`~ctxledger.testing.SessionMachine` compares the host with, and how it fails it.

:class:`Model` is what one session must have recorded, kept with plain lists;
:class:`FlakySummarizer` wraps the host's summariser so that a rule can make it fail or hold it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from ctxledger.actors.session import INTERRUPTED_RESULT
from ctxledger.checkpoints import Checkpoint
from ctxledger.messages import Message, ToolCall
from ctxledger.summarizers import Summarizer, SummaryRequest

__all__ = ["HOLD_LIMIT", "FlakySummarizer", "Model", "open_tool_calls", "synthetic_result"]

#: How long a held summariser call waits for its release before it fails (only a hang reaches it).
HOLD_LIMIT = 60.0


class FlakySummarizer:
    """Wraps a summariser; while :attr:`mode` is set, every call fails that way.

    It can also hold calls (:meth:`hold`): each call then blocks until :meth:`release`, so that
    a test can act while a (background) summary is being written.

    Attributes:
        inner: The wrapped summariser.
        mode: ``None`` (call ``inner``), ``"raise"``, ``"none"`` (return None) or ``"empty"``,
            read once a call is released.
        entered: Set when a held call has begun (and is blocked).
        calls: Calls made so far.
    """

    def __init__(self, inner: Summarizer) -> None:
        """Wrap ``inner``; calls go through until :attr:`mode` is set."""
        self.inner = inner
        self.mode: str | None = None
        self.entered = threading.Event()
        self.calls = 0
        self._released = threading.Event()
        self._released.set()

    @property
    def holding(self) -> bool:
        """Whether calls are held (between :meth:`hold` and :meth:`release`)."""
        return not self._released.is_set()

    def hold(self) -> None:
        """Hold every call from now on until :meth:`release`."""
        self.entered.clear()
        self._released.clear()

    def release(self) -> None:
        """Let held calls (and every later one) go on."""
        self._released.set()

    def __call__(self, request: SummaryRequest, /) -> str | None:
        """Summarise with ``inner``, or fail as :attr:`mode` says (once released, if held)."""
        self.calls += 1
        if not self._released.is_set():
            self.entered.set()
            if not self._released.wait(HOLD_LIMIT):
                raise RuntimeError("a held summariser call was never released (SessionMachine)")
        mode = self.mode
        if mode is None:
            return self.inner(request)
        if mode == "raise":
            raise RuntimeError("summariser unavailable (injected by SessionMachine)")
        return None if mode == "none" else ""


@dataclass
class Model:
    """What one session must hold, kept with plain lists."""

    messages: list[Message] = field(default_factory=list)  # appended, without seqs
    pending: list[Message] = field(default_factory=list)  # synthesised on the next activation
    pins: list[tuple[int, int]] = field(default_factory=list)  # (messages when pinned, seq)
    checkpoints: list[tuple[int, Checkpoint]] = field(default_factory=list)  # (messages, made)
    restorations: set[int] = field(default_factory=set)  # indices of checkpoints a revert made
    none_active: bool = False  # the only checkpoint in force was reverted: the full history
    none_changes: list[tuple[int, bool]] = field(default_factory=list)  # (messages, none_active)

    served: tuple[int, str] | None = None  # (through_seq, view_hash) of the last served view
    reactive_attempts: int = 0
    fits: bool = False  # the view was just served by a step whose compaction did not fail

    def set_none_active(self, value: bool) -> None:
        """Record whether the full history is shown (the only checkpoint was reverted)."""
        if value != self.none_active:
            self.none_changes.append((len(self.messages), value))
        self.none_active = value

    def open_calls(self) -> dict[str, ToolCall]:
        """The tool calls still waiting for a result, the pending synthetic ones included."""
        return open_tool_calls([*self.messages, *self.pending])

    def expected(self) -> list[Message]:
        """The history the log must hold: the appended messages with their seqs."""
        return [message.with_seq(seq) for seq, message in enumerate(self.messages, 1)]


def open_tool_calls(messages: Sequence[Message]) -> dict[str, ToolCall]:
    """The tool calls of ``messages`` that no later tool result answers, by id."""
    calls: dict[str, ToolCall] = {}
    for message in messages:
        if message.role == "tool":
            calls.pop(message.tool_call_id or "", None)
        for call in message.tool_calls:
            calls[call.id] = call
    return calls


def synthetic_result(call: ToolCall) -> Message:
    """The ``interrupted`` result a host records for ``call`` when it recovers the session."""
    return Message(
        role="tool",
        content=INTERRUPTED_RESULT,
        tool_call_id=call.id,
        name=call.name,
        metadata={"synthetic": "interrupted"},
    )
