"""The public entry points: :class:`Host` (many sessions over one log) and its sessions.

A host owns one event log (one LMDB environment per folder) and activates sessions on demand. An
active session is four pykka actors (history, budget, projection, compaction, see
:mod:`ctxledger.runtime.actors`); idle sessions beyond ``max_active_sessions`` are passivated
(actors
stopped, state on disk) and re-activated by replay, so the number of threads stays bounded.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import structlog

from ctxledger.config import Config
from ctxledger.domain import CharTokenizer, Tokenizer
from ctxledger.errors import CtxLedgerError, HostClosedError, SessionExistsError
from ctxledger.events import ConfigChanged, Event, SessionForked, SessionOpened
from ctxledger.replay.loader import event_seq_before_message, fold_session
from ctxledger.storage import Durability, EventLog, LmdbEventLog
from ctxledger.summarizers import ExtractiveSummarizer, Summarizer

if TYPE_CHECKING:
    from ctxledger.runtime.session import Session

__all__ = ["Host"]

_logger = structlog.get_logger("ctxledger.runtime.host")


class Host:
    """Runs many agent sessions over one durable event log.

    Use :meth:`Host.open` for the embedded LMDB default; the constructor accepts any
    :class:`~ctxledger.storage.EventLog` backend. A host is a context manager; :meth:`close`
    stops every actor and closes the log.
    """

    def __init__(
        self,
        log: EventLog,
        *,
        config: Config | None = None,
        summarizer: Summarizer | None = None,
        tokenizer: Tokenizer | None = None,
        max_active_sessions: int = 128,
        clock: Callable[[], float] = time.time,
        id_factory: Callable[[], str] | None = None,
        owns_log: bool = True,
    ) -> None:
        """Wrap ``log``; see :meth:`open` for the arguments."""
        if max_active_sessions < 1:
            raise ValueError("max_active_sessions must be at least 1")
        self.log = log
        self.config = config if config is not None else Config()
        self.summarizer: Summarizer = (
            summarizer if summarizer is not None else ExtractiveSummarizer()
        )
        self.tokenizer: Tokenizer = tokenizer if tokenizer is not None else CharTokenizer()
        self.max_active_sessions = max_active_sessions
        self.clock = clock
        self.new_id: Callable[[], str] = id_factory or (lambda: uuid.uuid4().hex)
        self._owns_log = owns_log
        self._lock = threading.RLock()
        self._sessions: dict[str, Session] = {}
        self._active: OrderedDict[str, Session] = OrderedDict()
        self._recovered: set[str] = set()
        self._closed = False

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        config: Config | None = None,
        summarizer: Summarizer | None = None,
        tokenizer: Tokenizer | None = None,
        durability: Durability = "sync",
        max_active_sessions: int = 128,
        clock: Callable[[], float] = time.time,
        id_factory: Callable[[], str] | None = None,
    ) -> Host:
        """Open (or create) a host on an LMDB folder.

        Args:
            path: The folder holding the LMDB environment; created if missing.
            config: The default Config of new sessions (``Config()`` if omitted).
            summarizer: The summariser; ``ExtractiveSummarizer()`` (offline) if omitted.
            tokenizer: The token estimator; chars // 3 if omitted.
            durability: ``"sync"`` (an append that returned is on disk), ``"group"`` (same
                guarantee, batched) or ``"none"`` (unsafe: for tests and bulk imports).
            max_active_sessions: Sessions kept active at once; older idle ones are passivated.
            clock: Returns the current unix time (injectable for deterministic tests).
            id_factory: Returns fresh ids for checkpoints and compactions.

        Raises:
            ConfigError: ``durability`` is not one of the three modes.
            StorageError: The folder cannot be opened as an event log.
        """
        Path(path).mkdir(parents=True, exist_ok=True)
        log = LmdbEventLog.open(path, durability=durability)
        return cls(
            log,
            config=config,
            summarizer=summarizer,
            tokenizer=tokenizer,
            max_active_sessions=max_active_sessions,
            clock=clock,
            id_factory=id_factory,
        )

    # --- sessions -----------------------------------------------------------------------------

    def sessions(self) -> list[str]:
        """Return the ids of every session in the log, in creation order."""
        self._check_open()
        return self.log.sessions()

    def session(self, session_id: str, *, config: Config | None = None) -> Session:
        """Get or create a session; it is recovered from the log on first use.

        A session's Config is recorded when it is created (the host's config unless ``config`` is
        given). Passing a different ``config`` later records a ``ConfigChanged`` event that
        applies from then on.

        Raises:
            HostClosedError: The host is closed.
        """
        from ctxledger.runtime.session import Session

        if not isinstance(session_id, str) or not session_id:
            raise ValueError("session id must be a non-empty string")
        with self._lock:
            self._check_open()
            session = self._sessions.get(session_id)
            if session is None:
                if self.log.last_seq(session_id) == 0:
                    opened = SessionOpened(
                        session_id=session_id,
                        config=config if config is not None else self.config,
                        created_at=self.clock(),
                    )
                    self.log.append(session_id, [opened], expected_seq=0)
                    self._recovered.add(session_id)  # nothing to recover in a new session
                session = Session(self, session_id)
                self._sessions[session_id] = session
        if config is not None and session.config != config:
            session._persist([ConfigChanged(config=config)])
        return session

    def _fork(self, parent: Session, new_id: str, at_seq: int | None) -> Session:
        """Create ``new_id`` sharing ``parent``'s history up to ``at_seq`` (see Session.fork).

        The caller holds ``parent``'s lock: locks are always taken session first, then host.
        """
        with self._lock:
            self._check_open()
            if new_id in self._sessions or self.log.last_seq(new_id) != 0:
                raise SessionExistsError(f"session {new_id!r} already exists")
            last_seq, last_event_seq = parent._positions()
            if at_seq is None or at_seq == last_seq:
                owner, parent_event_seq, at = parent.id, last_event_seq, last_seq
            else:
                owner, parent_event_seq = event_seq_before_message(self.log, parent.id, at_seq + 1)
                at = at_seq
            prefix, _ = fold_session(self.log, owner, through_event_seq=parent_event_seq)
            events: list[Event] = [
                SessionOpened(session_id=new_id, config=prefix.config, created_at=self.clock()),
                SessionForked(parent_id=owner, at_seq=at, parent_event_seq=parent_event_seq),
            ]
            self.log.append(new_id, events, expected_seq=0)
            self._recovered.add(new_id)
            return self.session(new_id)

    # --- activation (called by sessions under their own lock) -----------------------------------

    def _first_activation(self, session_id: str) -> bool:
        with self._lock:
            first = session_id not in self._recovered
            self._recovered.add(session_id)
            return first

    def _activated(self, session: Session) -> None:
        """Record ``session`` as most recently used; passivate the oldest idle sessions."""
        with self._lock:
            self._active[session.id] = session
            self._active.move_to_end(session.id)
            excess = len(self._active) - self.max_active_sessions
            if excess <= 0:
                return
            for other_id in list(self._active):
                if excess <= 0:
                    break
                other = self._active[other_id]
                if other is session or not other._try_passivate():
                    continue
                del self._active[other_id]
                excess -= 1

    def _touched(self, session: Session) -> None:
        with self._lock:
            if session.id in self._active:
                self._active.move_to_end(session.id)

    def _deactivated(self, session: Session) -> None:
        with self._lock:
            self._active.pop(session.id, None)

    def active_sessions(self) -> list[str]:
        """Return the ids of the sessions whose actors are running, least recently used first."""
        with self._lock:
            return list(self._active)

    # --- lifecycle -------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise HostClosedError("the host is closed")

    def close(self) -> None:
        """Stop every session's actors (newest first) and close the log. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            active = list(reversed(self._active.values()))
            self._active.clear()
        for session in active:
            session._stop_actors()
        if self._owns_log:
            try:
                self.log.close()
            except CtxLedgerError:  # closing twice or a dead env must not mask the caller's error
                _logger.warning("log_close_failed", exc_info=True)

    def __enter__(self) -> Host:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
