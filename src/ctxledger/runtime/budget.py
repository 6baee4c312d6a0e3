"""The budget actor: which sessions get a summary prepared in the background, and when.

History actors tell it, after an append or a usage report, that a session's estimate crossed
``prepare_threshold`` (:class:`~ctxledger.runtime.messages.Pressure`). Budget runs at most a
few background compactions at once across the whole host (they cost summariser calls, which is
money and LLM capacity), the sessions closest to their threshold first, and tells the owning
history actor to start one (:class:`~ctxledger.runtime.messages.Prepare`). The history actor
re-checks with the decision step (the state may have moved on) and reports back when the
background compaction ended (:class:`~ctxledger.runtime.messages.BackgroundEnded`).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
from typing import TYPE_CHECKING, assert_never

import pykka

from ctxledger.runtime.failures import LoggedFailures
from ctxledger.runtime.messages import BackgroundEnded, BudgetMessage, Prepare, Pressure

if TYPE_CHECKING:
    from ctxledger.runtime.history import HistoryActor

__all__ = ["BudgetActor"]


class BudgetActor(LoggedFailures, pykka.ThreadingActor):
    """Schedules background compactions across a host's sessions (see the module docstring).

    Args:
        max_running: Background compactions at once, host-wide.
    """

    use_daemon_thread = True  # never keeps the interpreter alive (see runtime.lifecycle)

    def __init__(self, max_running: int) -> None:
        super().__init__()
        self._max_running = max_running
        self._running: set[str] = set()
        self._queued: dict[str, tuple[float, int, pykka.ActorRef[HistoryActor]]] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._order = itertools.count()

    def on_receive(self, message: BudgetMessage) -> None:
        """Handle one message of the actor's closed union."""
        match message:
            case Pressure():
                if message.session_id not in self._running:
                    entry = (-message.urgency, next(self._order), message.owner)
                    self._queued[message.session_id] = entry
                    heapq.heappush(self._heap, (entry[0], entry[1], message.session_id))
            case BackgroundEnded():
                self._running.discard(message.session_id)
            case _:
                assert_never(message)
        self._start()

    def pressure(self) -> dict[str, float]:
        """Return the sessions waiting for a background compaction, with their urgency."""
        return {session_id: -entry[0] for session_id, entry in self._queued.items()}

    def _start(self) -> None:
        while len(self._running) < self._max_running and self._heap:
            _, order, session_id = heapq.heappop(self._heap)
            entry = self._queued.get(session_id)
            if entry is None or entry[1] != order:
                continue  # superseded by a newer report
            del self._queued[session_id]
            self._running.add(session_id)
            with contextlib.suppress(pykka.ActorDeadError):
                entry[2].tell(Prepare(session_id))
