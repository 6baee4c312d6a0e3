"""The history actor: the single writer of one session.

It validates commands against the authoritative state, persists the resulting events through the
shared journal (the event log's group commit), folds them only once they are durable, and then
publishes them to the replica actors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pykka
import structlog

from ctxledger.domain import SessionState
from ctxledger.events import Event, MessageAppended
from ctxledger.messages import Message
from ctxledger.replay.loader import snapshot_due
from ctxledger.runtime.actors.replica import Published
from ctxledger.storage import EventLog, RecordedEvent

__all__ = ["HistoryActor"]


class HistoryActor(pykka.ThreadingActor):
    """Owns a session's authoritative state and its position in the log."""

    def __init__(
        self,
        state: SessionState,
        last_event_seq: int,
        log: EventLog,
        subscribers: Sequence[pykka.ActorRef[Any]] = (),
    ) -> None:
        super().__init__()
        self._state = state
        self._last_event_seq = last_event_seq
        self._event_log = log
        self._subscribers = list(subscribers)
        self._log: Any = None

    def on_start(self) -> None:
        self._log = structlog.get_logger().bind(session_id=self._state.session_id, actor="history")

    def subscribe(self, ref: pykka.ActorRef[Any]) -> None:
        """Publish every later durable event to ``ref`` as well."""
        self._subscribers.append(ref)

    def append_messages(self, messages: Sequence[Message]) -> list[int]:
        """Validate, persist and publish a batch of messages; return their seqs.

        Raises:
            InvalidMessageError: A message is invalid here; nothing is written.
        """
        checked = self._state.check_append(messages)
        self.persist([MessageAppended(message=message) for message in checked])
        seqs = [message.seq for message in checked]
        for seq in seqs:
            self._log.debug("append", seq=seq)
        return [seq for seq in seqs if seq is not None]

    def persist(self, events: Sequence[Event]) -> list[RecordedEvent]:
        """Append ``events`` atomically, then fold and publish them.

        The state changes only after the log has acknowledged the batch as durable.
        """
        if not events:
            return []
        records = self._event_log.append(
            self._state.session_id, list(events), expected_seq=self._last_event_seq
        )
        for record in records:
            self._state.apply(record.event)
        previous, self._last_event_seq = self._last_event_seq, records[-1].seq
        if snapshot_due(previous, self._last_event_seq, self._state.config.snapshot_interval):
            # Taken after the fold, so snapshot + tail replays to exactly this state.
            self._event_log.save_snapshot(
                self._state.session_id, self._last_event_seq, self._state.to_snapshot()
            )
        message = Published(records)
        for ref in self._subscribers:
            ref.tell(message)
        return records

    def snapshot(self) -> tuple[list[Message], list[Any], int, int]:
        """Return (history, checkpoints, last message seq, last event seq) as immutable copies."""
        state = self._state
        return list(state.history), list(state.checkpoints), state.last_seq, self._last_event_seq

    def checkpoints(self) -> list[Any]:
        """Return the checkpoints, oldest first (without touching history)."""
        return list(self._state.checkpoints)

    def positions(self) -> tuple[int, int]:
        """Return (last message seq, last event seq) (without touching history)."""
        return self._state.last_seq, self._last_event_seq

    def state_copy(self) -> SessionState:
        """Return an independent copy of the authoritative state (for tests and tools)."""
        return self._state.copy()

    def open_tool_calls(self) -> dict[str, Any]:
        """Return the tool calls that are not answered yet, by id."""
        return dict(self._state.open_tool_calls())

    def config(self) -> Any:
        """Return the Config in force."""
        return self._state.config
