"""The projection actors: fold sessions from the log, off the history actors' threads.

Activating a session folds its log from the newest snapshot (a long tail can take a while): a
history actor hands that to a projection actor and goes on serving its other sessions, which
therefore never stall behind it. A projection actor only reads the log (and stores snapshots):
a session that does not exist yet is reported missing, and its history actor, the single writer
of the session, creates it. On a log shared by several hosts the projection actor first
takes the session's lease (:mod:`ctxledger.actors.leases`); a lease another host holds is
tried again later on the host's timer, never waited for on the actor's thread. The same actors
store the snapshots the history actors take.
Views themselves are pure functions of a fold (:mod:`ctxledger.domain`), built wherever the
state is: the history actor serves live views, :mod:`ctxledger.replay` time travel, verify and
what-if, all through :mod:`ctxledger.replay.loading`.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable
from typing import assert_never

import msgspec
import pykka

from ctxledger._logging import get_logger
from ctxledger.actors.failures import LoggedFailures, Restarting, log_failure
from ctxledger.actors.leases import LeaseKeeper
from ctxledger.actors.messages import Durable, Load, Loaded, ProjectionMessage, SaveSnapshot
from ctxledger.errors import CtxLedgerError, LeaseHeldError, UnknownSessionError
from ctxledger.replay.loading import fold_session, snapshots_to_drop
from ctxledger.storage import EventLog, Lease

__all__ = ["ProjectionActor", "ProjectionPool"]

_log = get_logger(__name__)
_RETRY = 0.25  # seconds between attempts to take a lease another host holds


class ProjectionActor(LoggedFailures, pykka.ThreadingActor):
    """Loads sessions for history actors and stores their snapshots."""

    use_daemon_thread = True  # never keeps the interpreter alive (see actors.lifecycle)

    def __init__(
        self, log: EventLog, leases: LeaseKeeper | None = None
    ) -> None:
        super().__init__()
        self._event_log = log
        self._leases = leases

    def on_receive(self, message: ProjectionMessage) -> None:
        """Handle one message of the actor's closed union."""
        match message:
            case Load():
                self._load(message)
            case SaveSnapshot():
                self._save(message)
            case _:
                assert_never(message)

    def _load(self, message: Load) -> None:
        log, session_id = self._event_log, message.session_id
        lease: Lease | None = None
        try:
            if self._leases is not None:
                lease = self._lease(message)
                if lease is None:
                    return  # tried again later
            state, last_event_seq = fold_session(log, session_id)
        except UnknownSessionError as exc:
            loaded = Loaded(session_id, None, 0, exc, lease)
        except Exception as exc:  # a damaged log fails this session alone, with its own error
            if not isinstance(exc, CtxLedgerError):
                _log.exception("session_load_failed", session_id=session_id)
            loaded = Loaded(session_id, None, 0, exc, lease)
        else:
            loaded = Loaded(session_id, state, last_event_seq, None, lease)
        with contextlib.suppress(pykka.ActorDeadError):  # the host closed meanwhile
            message.owner.tell(loaded)

    def _lease(self, message: Load) -> Lease | None:
        """Take the session's lease; None if another host holds it (the load is retried later).

        Raises:
            LeaseHeldError: Another host still holds it after the host's ``lease_wait``.
        """
        keeper = self._leases
        assert keeper is not None
        try:
            return keeper.acquire(message.session_id)
        except LeaseHeldError as exc:
            now = time.monotonic()
            if message.lease_deadline is None:
                message = msgspec.structs.replace(message, lease_deadline=now + keeper.wait)
            assert message.lease_deadline is not None
            left = message.lease_deadline - now
            if left <= 0:
                raise
            _log.info(
                "lease_wait", session_id=message.session_id, holder=exc.holder, epoch=exc.epoch
            )
            # Retry soon after the lease would expire (or at the deadline), polling at most
            # _RETRY apart in case the holder releases it first.
            delay = max(0.005, min(exc.expires_in + 0.01, left, _RETRY))
            keeper.retry_later(delay, _teller(self.actor_ref, message))
            return None

    def _save(self, message: SaveSnapshot) -> None:
        log, session_id = self._event_log, message.session_id
        try:
            log.save_snapshot(session_id, message.seq, message.data)
            drop = snapshots_to_drop(log.snapshot_seqs(session_id), message.interval)
            log.delete_snapshots(session_id, drop)
        except Exception as exc:  # a snapshot is an optimisation: its loss costs a longer fold
            if not isinstance(exc, CtxLedgerError):
                log_failure("snapshot_not_saved", exc, session_id=session_id, seq=message.seq)
            _log.warning(
                "snapshot_not_saved", session_id=message.session_id, seq=message.seq, error=str(exc)
            )
        with contextlib.suppress(pykka.ActorDeadError):
            message.owner.tell(Durable(message.session_id, message.token, [], None))


class ProjectionPool:
    """A fixed number of :class:`ProjectionActor` s, given work in turn (one found dead is
    started afresh: see :class:`~ctxledger.actors.failures.Restarting`)."""

    def __init__(
        self,
        log: EventLog,
        size: int,
        leases: LeaseKeeper | None = None,
    ) -> None:
        self._actors: list[Restarting[ProjectionActor]] = []
        try:
            for _ in range(size):
                self._actors.append(
                    Restarting(lambda: ProjectionActor.start(log, leases), "ProjectionActor")
                )
        except BaseException:  # the system refused a thread: stop those already started
            self.stop()
            raise
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
            actor.stop(timeout=30)


def _teller(ref: pykka.ActorRef[ProjectionActor], message: Load) -> Callable[[], None]:
    def tell() -> None:
        with contextlib.suppress(pykka.ActorDeadError):
            ref.tell(message)

    return tell
