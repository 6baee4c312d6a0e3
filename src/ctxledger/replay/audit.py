"""Offline inspection of a session's compactions: :func:`audit`, :func:`explain`, :func:`recall`.

Folds over the log like :func:`~ctxledger.replay.rebuild`; the live :class:`~ctxledger.Session`
methods of the same names call the same code, so the answers are identical live, after
recovery and offline.
"""

from __future__ import annotations

from ctxledger._arguments import check_seq, check_text
from ctxledger.domain.audit import LossReport, audit_checkpoint
from ctxledger.domain.placement import Placement, place_message
from ctxledger.replay._arguments import check_read
from ctxledger.replay.loading import fold_session, state_at_checkpoint
from ctxledger.replay.rebuild import LogSource, open_log
from ctxledger.replay.recall_index import (
    DEFAULT_RECALL_LIMIT,
    RecallHit,
    check_recall_arguments,
)
from ctxledger.replay.recall_index import recall as _recall
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
        InvalidSessionIdError: ``session_id`` is not a string.
        InvalidArgumentError: ``source`` is not a folder, a URI or an event log, or
            ``checkpoint_id`` is not None or a string; nothing is opened.
        StorageError: The folder is not an event log.
    """
    check_read(source, session_id)
    check_text("checkpoint_id", checkpoint_id, optional=True, utf8=False)
    with open_log(source) as log:
        return audit_log(log, session_id, checkpoint_id)


def audit_log(log: EventLog, session_id: str, checkpoint_id: str | None = None) -> LossReport:
    """:func:`audit` on an open log (what ``Session.audit`` calls)."""
    return audit_checkpoint(state_at_checkpoint(log, session_id, checkpoint_id))


def explain(source: LogSource, session_id: str, seq: int) -> Placement:
    """Say where message ``seq`` is in the session's current view (see ``Session.explain``).

    Args:
        source: An LMDB folder (opened read-only) or an open event log.
        session_id: The session.
        seq: The message.

    Raises:
        UnknownSessionError: The session is not in the log.
        InvalidSeqError: No message has that seq (or it is not an int).
        InvalidSessionIdError: ``session_id`` is not a string.
        InvalidArgumentError: ``source`` is not a folder, a URI or an event log; nothing is
            opened.
        StorageError: The folder is not an event log.
    """
    check_read(source, session_id)
    check_seq(session_id, seq)
    with open_log(source) as log:
        state, _ = fold_session(log, session_id)
        return place_message(state, seq)


def recall(
    source: LogSource, session_id: str, query: str, *, limit: int = DEFAULT_RECALL_LIMIT
) -> list[RecallHit]:
    """Search the session's messages its view does not show raw (see ``Session.recall``).

    The index file is kept in the log's folder when it can be written (see
    :mod:`ctxledger.replay.recall_index`).

    Args:
        source: An LMDB folder (opened read-only) or an open event log.
        session_id: The session.
        query: Free text: words, a command, a file name, error text.
        limit: The most hits (1 to 50).

    Raises:
        UnknownSessionError: The session is not in the log.
        InvalidQueryError: ``query`` is not a string of valid UTF-8, or ``limit`` is not an
            integer from 1 to 50; nothing is opened.
        InvalidSessionIdError: ``session_id`` is not a string.
        InvalidArgumentError: ``source`` is not a folder, a URI or an event log; nothing is
            opened.
        StorageError: The folder is not an event log.
    """
    check_read(source, session_id)
    check_recall_arguments(query, limit)
    with open_log(source) as log:
        state, _ = fold_session(log, session_id)
        return _recall(log, state, query, limit=limit)
