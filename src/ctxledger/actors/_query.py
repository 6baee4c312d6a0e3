"""A read of a session's folded state (:class:`Query`, data, not a callable) and its answer.

A :class:`~ctxledger.actors.messages.Read` command carries a Query from a
:class:`~ctxledger.actors.Session` handle to the history actor that owns the session, which
answers it with :func:`answer_query` on the session's current state. Both names are importable
from :mod:`ctxledger.actors.messages` too (this module is private).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from ctxledger.domain import SessionState, place_message, shown_messages

__all__ = ["Query", "answer_query"]


class Query(msgspec.Struct, frozen=True, kw_only=True):
    """A read of a session's folded state, answered by its owner (data, not a callable).

    Attributes:
        what: ``usage`` (the totals), ``history``, ``checkpoints``, ``config``, ``positions``
            (last message seq, last event seq), ``state`` (a copy), ``explain`` (where message
            ``seq`` is in the view) or ``shown`` (the newest ``limit`` messages still shown).
        seq: The message ``explain`` asks about.
        limit: The most messages ``shown`` returns (None: all).
    """

    what: Literal["usage", "history", "checkpoints", "config", "positions", "state", "explain",
                  "shown"]  # fmt: skip
    seq: int = 0
    limit: int | None = None


def answer_query(query: Query, state: SessionState, last_event_seq: int) -> Any:
    """Answer ``query`` on ``state`` (whose newest event is ``last_event_seq``)."""
    match query.what:
        case "usage":
            return state.accounting.totals
        case "history":
            return list(state.history)
        case "checkpoints":
            return list(state.checkpoints)
        case "config":
            return state.config
        case "positions":
            return (state.last_seq, last_event_seq)
        case "state":
            return state.copy()
        case "explain":
            return place_message(state, query.seq)
        case "shown":
            return shown_messages(state, query.limit)
