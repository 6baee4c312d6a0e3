"""Offline rebuilds of a session, without actors: :func:`rebuild` and :func:`view_at`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import msgspec

from ctxledger._arguments import check_seq
from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config
from ctxledger.domain import CharTokenizer, ModelView, Tokenizer, build_view
from ctxledger.domain import SessionState as _Fold
from ctxledger.messages import Message
from ctxledger.replay._arguments import check_read
from ctxledger.replay.loading import fold_session, fold_view_at, view_span_end
from ctxledger.storage import EventLog
from ctxledger.storage import open_log as open_target

__all__ = ["LogSource", "SessionState", "open_log", "rebuild", "view_at"]

#: Where replay reads from: an LMDB folder, or an open :class:`EventLog`.
LogSource = str | os.PathLike[str] | EventLog


class SessionState(msgspec.Struct, frozen=True, kw_only=True):
    """A session rebuilt from its log at some point.

    Attributes:
        session_id: The session.
        history: Every message appended up to that point, with seqs.
        checkpoints: Every checkpoint made up to that point (the last one is active).
        view: The view ``build_model_view`` would return there (no new compaction is run).
        config: The Config in force there.
        pins: Pinned seqs.
        event_seq: The session's last own event folded.
    """

    session_id: str
    history: list[Message]
    checkpoints: list[Checkpoint]
    view: ModelView
    config: Config
    pins: list[int]
    event_seq: int


@contextmanager
def open_log(source: LogSource, *, readonly: bool = True) -> Iterator[EventLog]:
    """Yield an event log for ``source``; a path is opened (read-only by default) and closed.

    Raises:
        StorageError: The folder is not an event log.
    """
    if not isinstance(source, str | os.PathLike):
        yield source
        return
    log = open_target(source, readonly=readonly)
    try:
        yield log
    finally:
        log.close()


def rebuild(
    source: LogSource,
    session_id: str,
    *,
    through_seq: int | None = None,
    tokenizer: Tokenizer | None = None,
) -> SessionState:
    """Rebuild a session from its log, offline.

    Args:
        source: An LMDB folder (opened read-only) or an open event log.
        session_id: The session.
        through_seq: Rebuild as of the view served while message ``through_seq`` was the
            newest (see :func:`view_at`); the whole log when omitted.
        tokenizer: The tokenizer the host used (chars // 3 by default).

    Raises:
        UnknownSessionError: The session is not in the log.
        InvalidSeqError: ``through_seq`` names no message (or is not an int).
        InvalidSessionIdError: ``session_id`` is not a string.
        InvalidArgumentError: ``source`` is not a folder, a URI or an event log, or
            ``tokenizer`` is not a Tokenizer; nothing is opened.
        StorageError: The folder is not an event log.
    """
    check_read(source, session_id, tokenizer=tokenizer)
    check_seq(session_id, through_seq, optional=True)
    with open_log(source) as log:
        if through_seq is None:
            fold, event_seq = fold_session(log, session_id)
        else:
            owner, end = view_span_end(log, session_id, through_seq)
            fold, event_seq = fold_session(log, owner, through_event_seq=end)
        return _describe(fold, session_id, event_seq, tokenizer or CharTokenizer())


def view_at(
    source: LogSource, session_id: str, seq: int, *, tokenizer: Tokenizer | None = None
) -> ModelView:
    """Return the view served (or that would have been served) while ``seq`` was the newest.

    It folds every event recorded before the append of message ``seq + 1``, so a checkpoint
    created by the ``prepare_step`` that followed message ``seq`` is included. When a view was
    served in that span, the fold ends at the last one served, so its ``view_hash`` is
    reproduced exactly.

    Args:
        source: An LMDB folder (opened read-only) or an open event log.
        session_id: The session.
        seq: The message (0: before the first one).
        tokenizer: The tokenizer the host used (chars // 3 by default).

    Raises:
        UnknownSessionError: The session is not in the log.
        InvalidSeqError: ``seq`` names no message (or is not an int).
        InvalidSessionIdError: ``session_id`` is not a string.
        InvalidArgumentError: ``source`` is not a folder, a URI or an event log, or
            ``tokenizer`` is not a Tokenizer; nothing is opened.
        StorageError: The folder is not an event log.
    """
    check_read(source, session_id, tokenizer=tokenizer)
    check_seq(session_id, seq)
    with open_log(source) as log:
        return fold_view_at(log, session_id, seq, tokenizer=tokenizer or CharTokenizer())


def _describe(fold: _Fold, session_id: str, event_seq: int, tokenizer: Tokenizer) -> SessionState:
    return SessionState(
        session_id=session_id,
        history=list(fold.history),
        checkpoints=list(fold.checkpoints),
        view=build_view(fold, tokenizer=tokenizer),
        config=fold.config,
        pins=sorted(fold.pins),
        event_seq=event_seq,
    )
