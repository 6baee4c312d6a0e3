"""Offline inspection of a session's compactions: :func:`audit`, :func:`explain`, :func:`recall`.

Folds over the log like :func:`~ctxledger.replay.rebuild`; the live :class:`~ctxledger.Session`
methods of the same names call the same code, so the answers are identical live, after
recovery and offline.
"""

from __future__ import annotations

from ctxledger.checkpoints import Checkpoint
from ctxledger.domain import SessionState
from ctxledger.domain.audit import LossReport, audit_checkpoint
from ctxledger.domain.placement import Placement, place_message
from ctxledger.errors import InvalidCheckpointError
from ctxledger.events import CheckpointCreated, SessionForked
from ctxledger.replay.loader import append_event_seq, fold_session
from ctxledger.replay.rebuild import LogSource, open_log
from ctxledger.runtime.recall import DEFAULT_RECALL_LIMIT, RecallHit
from ctxledger.runtime.recall import recall as _recall
from ctxledger.storage import EventLog

__all__ = ["audit", "audit_log", "explain", "recall", "state_at_checkpoint"]


def audit(source: LogSource, session_id: str, checkpoint_id: str | None = None) -> LossReport:
    """Report what a compaction lost: the facts of its covered messages its view does not show.

    Args:
        source: An LMDB folder (opened read-only) or an open event log.
        session_id: The session.
        checkpoint_id: The checkpoint to audit; the active one when omitted.

    Raises:
        UnknownSessionError: The session is not in the log.
        InvalidCheckpointError: The session has no checkpoint, or none with that id.
    """
    with open_log(source) as log:
        return audit_log(log, session_id, checkpoint_id)


def audit_log(log: EventLog, session_id: str, checkpoint_id: str | None = None) -> LossReport:
    """:func:`audit` on an open log (what ``Session.audit`` calls)."""
    return audit_checkpoint(state_at_checkpoint(log, session_id, checkpoint_id))


def state_at_checkpoint(
    log: EventLog, session_id: str, checkpoint_id: str | None = None
) -> SessionState:
    """Fold the session up to (and including) the event that recorded a checkpoint.

    Args:
        log: The event log.
        session_id: The session (a fork finds checkpoints it inherited in its ancestors' logs).
        checkpoint_id: The checkpoint; the active one when omitted.

    Raises:
        UnknownSessionError: The session is not in the log.
        InvalidCheckpointError: The session has no checkpoint, or none with that id.
    """
    state, _ = fold_session(log, session_id)
    if checkpoint_id is None:
        checkpoint = state.active_checkpoint
        if checkpoint is None:
            raise InvalidCheckpointError(f"session {session_id!r} has no checkpoint")
    else:
        found = [c for c in state.checkpoints if c.id == checkpoint_id]
        if not found:
            raise InvalidCheckpointError(
                f"session {session_id!r} has no checkpoint {checkpoint_id!r}"
            )
        checkpoint = found[0]
    owner, event_seq = _created_at(log, session_id, checkpoint, None)
    at, _ = fold_session(log, owner, through_event_seq=event_seq)
    return at


def _created_at(
    log: EventLog, session_id: str, checkpoint: Checkpoint, bound: int | None
) -> tuple[str, int]:
    """``(owner, event seq)`` of the ``CheckpointCreated`` that recorded ``checkpoint``.

    The event follows the append of the last message it covers, so the scan starts there
    (found by binary search); a fork looks in its own log first, then in its parent's up to the
    fork point.
    """
    first = log.read(session_id, 1, 2)
    fork = next((r.event for r in first if isinstance(r.event, SessionForked)), None)
    start = 1
    if fork is None or checkpoint.covers_through_seq > fork.at_seq:
        start = append_event_seq(log, session_id, checkpoint.covers_through_seq) or 1
    for record in log.iter_events(session_id, start, bound):
        event = record.event
        if isinstance(event, CheckpointCreated) and event.checkpoint.id == checkpoint.id:
            return session_id, record.seq
    if fork is not None:
        return _created_at(log, fork.parent_id, checkpoint, fork.parent_event_seq)
    raise InvalidCheckpointError(
        f"session {session_id!r}: no event records checkpoint {checkpoint.id!r}"
    )


def explain(source: LogSource, session_id: str, seq: int) -> Placement:
    """Say where message ``seq`` is in the session's current view (see ``Session.explain``).

    Raises:
        UnknownSessionError: The session is not in the log.
        InvalidSeqError: No message has that seq.
    """
    with open_log(source) as log:
        state, _ = fold_session(log, session_id)
        return place_message(state, seq)


def recall(
    source: LogSource, session_id: str, query: str, *, limit: int = DEFAULT_RECALL_LIMIT
) -> list[RecallHit]:
    """Search the session's messages its view does not show raw (see ``Session.recall``).

    The index file is kept in the log's folder when it can be written (see
    :mod:`ctxledger.runtime.recall`).

    Raises:
        UnknownSessionError: The session is not in the log.
        InvalidQueryError: ``query`` or ``limit`` is invalid.
    """
    with open_log(source) as log:
        state, _ = fold_session(log, session_id)
        return _recall(log, state, query, limit=limit)
