"""Withdrawing messages from the conversation: retraction and clearing, as events.

History is never edited. An agent framework that "pops" its newest item or "clears" its session
records :class:`~ctxledger.events.MessageRetracted` or :class:`~ctxledger.events.HistoryCleared`;
the fold (:meth:`SessionState.apply`) takes the messages out of every later view, planning and
index, and replay reproduces all of it. Semantics:

* A retraction withdraws the newest message still shown. It is refused when no message is shown
  or when that message is covered by the checkpoint in force (its summary tells of it). A
  retracted tool result re-opens its call; a retracted assistant message withdraws its calls
  (their results were retracted before it), and their ids may be used again. Pins on it lapse.
* A clear withdraws every message so far. Later views start empty: no head system messages, no
  summary (the checkpoints made before it are not in force), no pins; open tool calls are closed
  and every id may be used again. New system messages before the next user message head the
  views again. The planner never summarises a withdrawn message.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxledger.domain.state import SessionState
from ctxledger.events.types import Event, HistoryCleared, MessageAppended, MessageRetracted
from ctxledger.messages import Message

__all__ = ["clear_event", "retraction_events", "shown_messages"]


def retraction_events(state: SessionState, replacement: Sequence[Message] = ()) -> list[Event]:
    """Return the events that retract the newest shown message and append ``replacement``.

    The replacement is validated against the state after the retraction (so it may answer the
    call that a retracted result re-opened, or reuse the ids of a retracted assistant message);
    recorded as one batch, both happen or neither.

    Raises:
        InvalidSeqError: Nothing can be retracted (see :meth:`SessionState.retraction_target`).
        InvalidMessageError: A replacement message does not fit after the retraction.
    """
    retraction = MessageRetracted(
        seq=state.retraction_target(), mask_count=state.mask_after_retraction()
    )
    if not replacement:
        return [retraction]
    after = state.copy()
    after.apply(retraction)
    checked = after.check_append(replacement)
    return [retraction, *(MessageAppended(message=message) for message in checked)]


def clear_event(state: SessionState) -> HistoryCleared:
    """Return the event that withdraws every message of ``state`` so far."""
    return HistoryCleared(through_seq=state.last_seq)


def shown_messages(state: SessionState, limit: int | None = None) -> list[Message]:
    """Return the messages still in the conversation (not withdrawn), oldest first.

    These are raw history messages (never masked or summarised), covered ones included.

    Args:
        state: The session.
        limit: Return only the newest ``limit`` of them.

    Raises:
        ValueError: ``limit`` is negative.
    """
    floor, retracted, history = state.cleared_through, state.retracted, state.history
    if limit is None:
        return [m for m in history[floor:] if m.seq not in retracted]
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    shown: list[Message] = []
    seq = state.last_seq
    while seq > floor and len(shown) < limit:
        if seq not in retracted:
            shown.append(history[seq - 1])
        seq -= 1
    shown.reverse()
    return shown
