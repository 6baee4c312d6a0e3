"""The projection actors: fold sessions from the log, off the history actors' threads.

Activating a session folds its log from the newest snapshot (a long tail can take a while): a
history actor hands that to a projection actor and goes on serving its other sessions, which
therefore never stall behind it. The same actors store the snapshots the history actors take.
Views themselves are pure functions of a fold (:mod:`ctxledger.domain`), built wherever the
state is: the history actor serves live views, :mod:`ctxledger.replay` time travel, verify and
what-if, all through :mod:`ctxledger.runtime.loading`.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from typing import Any

import pykka

from ctxledger._logging import get_logger
from ctxledger.errors import CtxLedgerError, UnknownSessionError, VersionConflictError
from ctxledger.events import SessionOpened
from ctxledger.runtime.loading import fold_session, snapshots_to_drop
from ctxledger.runtime.messages import Durable, Load, Loaded, SaveSnapshot
from ctxledger.storage import EventLog

__all__ = ["ProjectionActor", "ProjectionPool"]

_log = get_logger(__name__)


class ProjectionActor(pykka.ThreadingActor):
    """Loads (or creates) sessions for history actors and stores their snapshots."""

    def __init__(self, log: EventLog, clock: Callable[[], float]) -> None:
        super().__init__()
        self._event_log = log
        self._clock = clock

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Load):
            self._load(message)
        elif isinstance(message, SaveSnapshot):
            self._save(message)
        else:
            return super().on_receive(message)
        return None

    def _load(self, message: Load) -> None:
        log, session_id = self._event_log, message.session_id
        try:
            if message.create_config is not None and log.last_seq(session_id) == 0:
                opened = SessionOpened(
                    session_id=session_id, config=message.create_config, created_at=self._clock()
                )
                # Another writer may create it first; then it is loaded as it is.
                with contextlib.suppress(VersionConflictError):
                    log.append(session_id, [opened], expected_seq=0)
            state, last_event_seq = fold_session(log, session_id)
        except UnknownSessionError as exc:
            loaded = Loaded(session_id, None, 0, exc)
        except Exception as exc:  # a damaged log fails this session alone, with its own error
            if not isinstance(exc, CtxLedgerError):
                _log.exception("session_load_failed", session_id=session_id)
            loaded = Loaded(session_id, None, 0, exc)
        else:
            loaded = Loaded(session_id, state, last_event_seq, None)
        with contextlib.suppress(pykka.ActorDeadError):  # the host closed meanwhile
            message.owner.tell(loaded)

    def _save(self, message: SaveSnapshot) -> None:
        log, session_id = self._event_log, message.session_id
        try:
            log.save_snapshot(session_id, message.seq, message.data)
            drop = snapshots_to_drop(log.snapshot_seqs(session_id), message.interval)
            log.delete_snapshots(session_id, drop)
        except CtxLedgerError as exc:  # a snapshot is an optimisation: its loss costs a longer fold
            _log.warning(
                "snapshot_not_saved", session_id=message.session_id, seq=message.seq, error=str(exc)
            )
        with contextlib.suppress(pykka.ActorDeadError):
            message.owner.tell(Durable(message.session_id, message.token, [], None))


class ProjectionPool:
    """A fixed number of :class:`ProjectionActor` s, given work in turn."""

    def __init__(self, log: EventLog, clock: Callable[[], float], size: int) -> None:
        self._actors = [ProjectionActor.start(log, clock) for _ in range(size)]
        self._turn = itertools.cycle(range(size))

    def load(self, message: Load) -> None:
        """Fold a session for ``message.owner`` (answered with ``Loaded``)."""
        self._actors[next(self._turn)].tell(message)

    def save(self, message: SaveSnapshot) -> None:
        """Store a snapshot."""
        self._actors[next(self._turn)].tell(message)

    def stop(self) -> None:
        """Finish the queued work, then stop."""
        for actor in self._actors:
            with contextlib.suppress(pykka.ActorDeadError):
                actor.stop(block=True, timeout=30)
