"""The history actor's sessions coming and going: activation, creation, forks, leases, eviction.

A session not in memory is folded by a projection actor (``Load`` → ``Loaded``) while the
history actor serves its other sessions, then recovered (:class:`ctxledger.domain.Recover`) the
first time this host serves it. A session that does not exist is created here, by its single
writer, when an ``Open`` or a ``Fork`` asks for it. On a shared log the session's lease is held
while its state is in memory; a lease lost drops the state. Idle states beyond the host's
``max_active_sessions`` are evicted, least recently used first.
"""

from __future__ import annotations

from collections import deque

from ctxledger._logging import get_logger
from ctxledger.actors.history_base import HistoryBase
from ctxledger.actors.live import Live
from ctxledger.actors.messages import (
    Durable,
    Evict,
    Forgotten,
    Fork,
    LeaseLost,
    Load,
    Loaded,
    Open,
)
from ctxledger.domain import Recover, SessionState, decide
from ctxledger.domain.commands import fork_events
from ctxledger.errors import (
    HostClosedError,
    LeaseLostError,
    SessionExistsError,
    UnknownSessionError,
    VersionConflictError,
)
from ctxledger.events import Event, SessionOpened
from ctxledger.storage import Lease

__all__ = ["Activation"]

_log = get_logger(__name__)


class Activation(HistoryBase):
    """Sessions coming and going on the history actor (see the module docstring)."""

    #: The last eviction pass left the host above ``max_live`` (its states were in use): the
    #: next pass runs even if this actor's count has not changed since.
    _over_max = False

    def _on_loaded(self, message: Loaded) -> None:
        live = self._lives.get(message.session_id)
        rt = self._rt
        lease = message.lease
        if live is not None and isinstance(message.error, UnknownSessionError):
            creator = next((c for c in live.queue if isinstance(c, Open | Fork)), None)
            if creator is not None:
                self._create(live, creator, lease)
                return
        if live is None or message.error is not None or message.state is None:
            if lease is not None and rt.leases is not None:
                rt.leases.release(lease)
            if live is None:
                return
            del self._lives[message.session_id]
            error = message.error or HostClosedError("the session could not be loaded")
            self._forget(live, error, queued=True)
            return
        live.state = message.state
        live.last_event_seq = message.last_event_seq
        if lease is not None and rt.leases is not None:
            live.lease = lease
            previous = rt.leases.hold(lease, self._me)
            if previous is not None and previous + 1 != lease.epoch:
                # Another host served the session since this one did: recover its work.
                rt.recovered.discard(live.id)
            _log.info("lease_acquired", session_id=live.id, epoch=lease.epoch)
        if live.id not in rt.recovered:
            rt.recovered.add(live.id)
            decision = decide(
                live.state, Recover(), tokenizer=rt.tokenizer, new_id=rt.new_id, now=rt.clock
            )
            _log.info(
                "recovery",
                session_id=live.id,
                seq=live.state.last_seq,
                events=live.last_event_seq,
                repaired=len(decision.events),
            )
            if decision.events:
                self._write(live, decision.events)
                return
        self._pump(live)

    def _create(self, live: Live, creator: Open | Fork, lease: Lease | None) -> None:
        """Write the first events of a session that does not exist yet (this actor is its single
        writer; on a shared log the load took its lease). ``creator`` is the command that asked
        for it: an ``Open`` stays queued (it configures the new session), a ``Fork`` is answered
        once its events are durable (see :meth:`_created`)."""
        rt = self._rt
        if lease is not None and rt.leases is not None:
            live.lease = lease
            rt.leases.hold(lease, self._me)
        events: list[Event]
        if isinstance(creator, Fork):
            live.queue = deque(command for command in live.queue if command is not creator)
            events = fork_events(
                live.id,
                parent_id=creator.parent_id,
                at_seq=creator.at_seq,
                parent_event_seq=creator.parent_event_seq,
                config=creator.config,
                created_at=rt.clock(),
            )
        else:
            opened = SessionOpened(
                session_id=live.id, config=creator.create_config, created_at=rt.clock()
            )
            events = [opened]
        live.creating = creator
        live.last_event_seq = 0
        self._write(live, events)

    def _created(self, live: Live, message: Durable) -> None:
        """The first events of a new session are durable (or failed)."""
        creator, live.creating = live.creating, None
        assert creator is not None
        rt = self._rt
        error = message.error
        if isinstance(creator, Fork):
            if isinstance(error, VersionConflictError):
                error = SessionExistsError(f"session {live.id!r} already exists")
            creator.reply.resolve(None, error)
        if isinstance(error, LeaseLostError) and live.lease is not None:
            self._drop(live, error)
            return
        if isinstance(error, VersionConflictError | SessionExistsError):
            # Another writer (a host sharing the log) created it first: load it as it is.
            self._reload(live)
            return
        if error is not None:  # nothing was written: the session's callers fail with it
            if live.lease is not None and rt.leases is not None:
                rt.leases.release(live.lease)
            del self._lives[live.id]
            self._forget(live, error, queued=True)
            return
        rt.recovered.add(live.id)  # nothing to repair in a session that starts now
        if isinstance(creator, Fork):
            # Its state is its parent's up to the fork point: folded by a projection actor.
            self._load(live)
            return
        assert message.records
        state = live.state = SessionState.new(live.id, creator.create_config)
        self._fold(live, state, message.records)
        self._pump(live)

    def _load(self, live: Live) -> None:
        """Fold the session again from the log, on a projection actor (answered ``Loaded``)."""
        rt = self._rt
        if live.lease is not None and rt.leases is not None:
            rt.leases.release(live.lease)  # taken again by the load, as after an eviction
            live.lease = None
        rt.projection.load(Load(live.id, self._me))

    def _on_lease_lost(self, message: LeaseLost) -> None:
        live = self._lives.get(message.session_id)
        if live is None or live.lease is None or live.lease.epoch != message.lease.epoch:
            return  # already dropped, or re-activated under a newer lease
        self._drop(live, message.error)

    def _drop(self, live: Live, error: LeaseLostError) -> None:
        """Another host took ``live`` over: fail its waiting callers and forget its state.

        Its next use takes the lease again and recovers from the log, as after a crash.
        """
        _log.warning("lease_lost", session_id=live.id, holder=error.holder, epoch=error.current)
        rt = self._rt
        del self._lives[live.id]
        rt.recovered.discard(live.id)
        if live.lease is not None and rt.leases is not None:
            rt.leases.lost(live.lease)
        live.lease = None
        self._forget(live, error, queued=True)

    def _evict(self, *, ask_others: bool = True) -> None:
        """While the host holds more than ``max_live`` states, drop this actor's least recently
        used idle ones (their log stays); one pass at most over the states in use. If that is
        not enough, the other history actors are asked to evict theirs (``Evict``)."""
        rt = self._rt
        lives = self._lives
        counts = rt.live_counts
        if ask_others and counts[self._number] == len(lives) and not self._over_max:
            # Nothing changed here since a pass that left the host within max_live (every
            # command and durable batch ends in a pass): another actor that grows evicts its
            # own states first, then asks this one (``Evict``: ask_others False).
            return
        counts[self._number] = len(lives)
        excess = sum(counts) - rt.max_live
        busy = 0
        while excess > 0 and lives and busy < len(lives):
            session_id = next(iter(lives))
            live = lives[session_id]
            if live.idle:
                del lives[session_id]
                excess -= 1
                rt.budget.tell(Forgotten(session_id))
                if live.lease is not None and rt.leases is not None:
                    rt.leases.release(live.lease)  # another host may take it at once
            else:
                self._flush_held(live)  # then it can go once recorded
                lives.move_to_end(session_id)  # in use: look at it again later
                busy += 1
        counts[self._number] = len(lives)
        self._over_max = excess > 0
        if excess > 0 and ask_others:
            for number, ref in enumerate(rt.history):
                if number != self._number and counts[number]:
                    ref.tell(Evict())
