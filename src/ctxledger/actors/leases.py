"""Session leases of a host on a shared log: taken on activation, renewed, given back.

When several hosts share one database (:class:`~ctxledger.storage.PostgresEventLog`), a host
serves a session only while it holds the session's lease (:mod:`ctxledger.storage.leases`):

- **Activation** takes the lease before the session is folded (a projection actor does it, in
  :mod:`ctxledger.actors.projection`). A lease another host holds is not waited for on the
  actor's thread: the load is retried by the host's timer until the lease is free or has
  expired, or until ``lease_wait`` seconds have passed (then the caller gets
  :class:`~ctxledger.errors.LeaseHeldError`), so other sessions' loads go on meanwhile.
- **Every write** of the session passes the lease as ``fence=``: once another host has taken
  the session over, this host's appends fail with :class:`~ctxledger.errors.LeaseLostError`
  and write nothing.
- **Renewal**: every ``ttl / 3`` seconds the timer tells one :class:`LeaseActor` to renew all
  the host's leases in one batch (:meth:`~ctxledger.storage.LeaseStore.renew_leases`, one
  statement on PostgreSQL; one thread per host, none per session).
- **Loss**: a renewal or a fenced write that finds the lease taken over tells the session's
  history actor, which drops the session's state; its next use takes the lease again and
  recovers from snapshot + tail, as after a crash.
- **Release**: when a session's state is evicted and when the host closes, so another host can
  take it at once.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, assert_never

import pykka

from ctxledger._logging import get_logger
from ctxledger.actors.failures import LoggedFailures
from ctxledger.actors.messages import (
    HistoryRef,
    LeaseLost,
    LeaseMessage,
    ReleaseLease,
    RenewLeases,
)
from ctxledger.errors import CtxLedgerError, HostClosedError, LeaseLostError
from ctxledger.storage import Lease, LeaseStore

if TYPE_CHECKING:
    from ctxledger.actors.timer import Timer

__all__ = ["LeaseActor", "LeaseKeeper", "LeaseLost"]

_log = get_logger(__name__)


class LeaseKeeper:
    """The leases one host holds, shared by its actors; renews them on the host's timer.

    Args:
        store: The log (a :class:`~ctxledger.storage.LeaseStore`).
        host_id: This host's id (one per running host).
        ttl: Seconds a lease lasts unless renewed.
        wait: Seconds an activation waits at most for another host's lease.
        timer: The host's :class:`~ctxledger.actors.timer.Timer`.
    """

    def __init__(
        self, store: LeaseStore, host_id: str, ttl: float, wait: float, timer: Timer
    ) -> None:
        self.store = store
        self.host_id = host_id
        self.ttl = ttl
        self.wait = wait
        self.timer = timer
        self._lock = threading.Lock()
        # Every lease taken and not yet given back, with the history actor serving it (None
        # while the session is still being loaded).
        self._held: dict[str, tuple[Lease, HistoryRef | None]] = {}
        self._last_epoch: dict[str, int] = {}  # the epoch this host held last, per session
        self._actor = LeaseActor.start(self)
        self._stopped = False
        self._tick = self.timer.call_later(ttl / 3, self._on_tick)

    # --- used by the actors ------------------------------------------------------------------

    def acquire(self, session_id: str) -> Lease:
        """Take the session's lease now, without waiting (LeaseHeldError if another host has it).

        The lease is renewed (and released by :meth:`close`) from then on, also while the
        session is being loaded.

        Raises:
            HostClosedError: The host is closing.
        """
        with self._lock:
            if self._stopped:
                raise HostClosedError("the host is closed")
        lease = self.store.acquire_lease(session_id, self.host_id, self.ttl)
        with self._lock:
            if not self._stopped:
                self._held[lease.session_id] = (lease, None)
                return lease
        self.store.release_lease(lease)  # closed meanwhile
        raise HostClosedError("the host is closed")

    def hold(self, lease: Lease, owner: HistoryRef) -> int | None:
        """Keep ``lease`` renewed for ``owner`` (its history actor).

        Returns:
            The epoch under which this host served the session last, or None if it did not
            since it started (or since it lost the session). ``lease.epoch`` right after it
            means nobody served the session in between, so its state needs no recovery.
        """
        with self._lock:
            previous = self._last_epoch.get(lease.session_id)
            self._last_epoch[lease.session_id] = lease.epoch
            self._held[lease.session_id] = (lease, owner)
        return previous

    def lost(self, lease: Lease) -> None:
        """Forget ``lease``: another host took the session over."""
        with self._lock:
            held = self._held.get(lease.session_id)
            if held is not None and held[0].epoch == lease.epoch:
                del self._held[lease.session_id]
            if self._last_epoch.get(lease.session_id) == lease.epoch:
                del self._last_epoch[lease.session_id]

    def release(self, lease: Lease) -> None:
        """Give ``lease`` back (on the lease actor's thread): the session's state was evicted,
        or could not be loaded."""
        with self._lock:
            held = self._held.get(lease.session_id)
            if held is None or held[0].epoch != lease.epoch:
                return
            del self._held[lease.session_id]
        with contextlib.suppress(pykka.ActorDeadError):
            self._actor.tell(ReleaseLease(lease))

    def held(self) -> list[Lease]:
        """The leases held now."""
        with self._lock:
            return [lease for lease, _ in self._held.values()]

    def retry_later(self, delay: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` after ``delay`` seconds on the timer (an activation's next attempt)."""
        self.timer.call_later(delay, callback)

    # --- renewal -----------------------------------------------------------------------------

    def _on_tick(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._tick = self.timer.call_later(self.ttl / 3, self._on_tick)
        with contextlib.suppress(pykka.ActorDeadError):
            self._actor.tell(RenewLeases())

    def renew_all(self) -> None:
        """Renew every lease held, in one batch (on the lease actor); tell owners of lost ones."""
        with self._lock:
            held = list(self._held.values())
        if not held:
            return
        try:
            renewed = self.store.renew_leases([lease for lease, _ in held], self.ttl)
        except CtxLedgerError as exc:  # the store is down: try again at the next tick
            _log.warning("leases_not_renewed", leases=len(held), error=str(exc))
            return
        for (lease, owner), now in zip(held, renewed, strict=True):
            if now is not None:
                continue
            try:
                current = self.store.current_lease(lease.session_id)
            except CtxLedgerError:
                current = None
            holder, epoch = (current.host_id, current.epoch) if current else (None, 0)
            error = LeaseLostError(lease.session_id, lease.host_id, lease.epoch, holder, epoch)
            _log.warning(
                "lease_lost", session_id=lease.session_id, epoch=lease.epoch, holder=holder
            )
            self.lost(lease)
            if owner is not None:
                with contextlib.suppress(pykka.ActorDeadError):
                    owner.tell(LeaseLost(lease.session_id, lease, error))

    def close(self) -> None:
        """Stop renewing and release every lease still held (the host is closing)."""
        with self._lock:
            self._stopped = True
            self.timer.cancel(self._tick)
            held = [lease for lease, _ in self._held.values()]
            self._held.clear()
        with contextlib.suppress(pykka.ActorDeadError):
            self._actor.stop(block=True, timeout=30)
        for lease in held:
            try:
                self.store.release_lease(lease)
            except CtxLedgerError as exc:  # it expires by itself after its ttl
                _log.warning("lease_not_released", session_id=lease.session_id, error=str(exc))


class LeaseActor(LoggedFailures, pykka.ThreadingActor):
    """Renews and releases a host's leases off every other actor's thread."""

    use_daemon_thread = True  # never keeps the interpreter alive (see actors.lifecycle)

    def __init__(self, keeper: LeaseKeeper) -> None:
        super().__init__()
        self._keeper = keeper

    def on_receive(self, message: LeaseMessage) -> None:
        """Handle one message of the actor's closed union."""
        match message:
            case RenewLeases():
                self._keeper.renew_all()
            case ReleaseLease():
                try:
                    self._keeper.store.release_lease(message.lease)
                except CtxLedgerError as exc:
                    _log.warning(
                        "lease_not_released", session_id=message.lease.session_id, error=str(exc)
                    )
            case _:
                assert_never(message)
