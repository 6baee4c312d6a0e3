"""What a :class:`~ctxledger.actors.Host` runs and how it ends: its actors, started together and
stopped in order, and :class:`HostBase`, the host's close, context manager and unclosed warning.

DESIGN §3: a few history actors behind the host's router (each the single writer of the
sessions it owns), one budget actor, a pool of compaction actors that run summarisers (with the
host's own event loop for coroutine summarisers), a few projection actors that load sessions,
the lease keeper on a log shared by several hosts, and one timer thread. How many depends on
the host's options only, never on how many sessions are open or active.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Self, cast

import pykka

from ctxledger._logging import get_logger
from ctxledger.actors import lifecycle
from ctxledger.actors.budget import BudgetActor
from ctxledger.actors.compaction import CompactionPool
from ctxledger.actors.failures import Restarting
from ctxledger.actors.history import HistoryActor, Runtime
from ctxledger.actors.host_loop import HostLoop
from ctxledger.actors.leases import LeaseKeeper
from ctxledger.actors.options import HostOptions
from ctxledger.actors.projection import ProjectionPool
from ctxledger.actors.router import HistoryRouter
from ctxledger.actors.timer import Timer
from ctxledger.domain import Tokenizer
from ctxledger.errors import CtxLedgerError, HostClosedError
from ctxledger.storage import EventLog, LeaseStore
from ctxledger.summarizers import Summarizer, describe_summarizer

__all__ = ["HostActors", "HostBase"]

_logger = get_logger(__name__)


@dataclass(slots=True, frozen=True)
class HostActors:
    """What one host runs besides the log's journal (see the module docstring).

    Attributes:
        loop: The host's own event loop (for coroutine summarisers asked for by threads).
        timer: The timer thread (summary timeouts, lease renewals, deadlines).
        leases: On a shared log, the host's leases; None otherwise.
        compaction: The compaction actors that run the summariser.
        projection: The projection actors that load sessions and store snapshots.
        budget: The budget actor (started afresh if found dead).
        router: The history actors, by number, and the commands' way to them.
        runtime: What the history actors share (the commit observer is set there).
    """

    loop: HostLoop
    timer: Timer
    leases: LeaseKeeper | None
    compaction: CompactionPool
    projection: ProjectionPool
    budget: Restarting[BudgetActor]
    router: HistoryRouter
    runtime: Runtime[HistoryActor]

    @classmethod
    def start(
        cls,
        log: EventLog,
        options: HostOptions,
        *,
        summarizer: Summarizer,
        tokenizer: Tokenizer,
        new_id: Callable[[], str],
        clock: Callable[[], float],
    ) -> HostActors:
        """Start the actors of a host on ``log`` with ``options`` (every field resolved).

        If one fails to start (the system refuses another thread, say), those already started
        are stopped before the error propagates: a host that failed to open leaves no thread.
        """
        with contextlib.ExitStack() as undo:  # stops what started, if a later start fails
            actors = cls._start(
                log,
                options,
                undo,
                summarizer=summarizer,
                tokenizer=tokenizer,
                new_id=new_id,
                clock=clock,
            )
            undo.pop_all()
        return actors

    @classmethod
    def _start(
        cls,
        log: EventLog,
        options: HostOptions,
        undo: contextlib.ExitStack,
        *,
        summarizer: Summarizer,
        tokenizer: Tokenizer,
        new_id: Callable[[], str],
        clock: Callable[[], float],
    ) -> HostActors:
        assert options.host_id is not None and options.lease_wait is not None  # resolved
        loop = HostLoop()
        undo.callback(loop.stop)
        timer = Timer()
        undo.callback(timer.stop)
        leases = (
            LeaseKeeper(
                cast(LeaseStore, log), options.host_id, options.lease_ttl, options.lease_wait, timer
            )
            if options.leases
            else None
        )
        if leases is not None:
            undo.callback(leases.close)
        compaction = CompactionPool(
            summarizer,
            options.compaction_workers,
            loop.get,
            timer,
            clock,
            processes=options.summary_processes or 0,
        )
        undo.callback(compaction.stop)
        projection = ProjectionPool(log, options.projection_actors, leases)
        undo.callback(projection.stop)
        background = options.background_compactions
        budget = Restarting(lambda: BudgetActor.start(background), "budget")
        undo.callback(budget.stop, timeout=5)
        runtime: Runtime[HistoryActor] = Runtime(
            log=log,
            tokenizer=tokenizer,
            new_id=new_id,
            clock=clock,
            compaction=compaction,
            projection=projection,
            budget=budget,
            timer=timer,
            summarizer_name=describe_summarizer(summarizer),
            leases=leases,
            snapshot_interval=options.snapshot_interval,
        )
        # max_active_sessions holds host-wide: session ids do not spread evenly over the
        # actors, so a fixed share per actor would evict below the limit.
        runtime.max_live = options.max_active_sessions
        runtime.live_counts = [0] * options.history_actors
        # The router starts its actors in its constructor: those started before one that
        # fails are known only here.
        first: list[pykka.ActorRef[HistoryActor]] = []
        undo.callback(_stop_refs, first)

        def start_history(number: int) -> pykka.ActorRef[HistoryActor]:
            ref = HistoryActor.start(runtime, number)
            if len(first) < options.history_actors:  # not a restart
                first.append(ref)
            return ref

        router = HistoryRouter(
            start_history, options.history_actors, runtime.history, runtime.instances
        )
        runtime.restart = router.restart
        runtime.closed = lambda: router.closed
        return cls(loop, timer, leases, compaction, projection, budget, router, runtime)

    def stop(self) -> None:
        """Stop them: the history actors first (requests still waiting for their turn fail with
        ``HostClosedError``; batches already handed to the log are committed and answered)."""
        self.router.close(timeout=30)
        self.compaction.stop()
        self.projection.stop()
        if self.leases is not None:
            self.leases.close()  # after the writers: another host may take them over at once
        self.budget.stop(timeout=5)
        self.timer.stop()
        self.loop.stop()


def _stop_refs(refs: list[pykka.ActorRef[HistoryActor]]) -> None:
    """Stop the history actors ``refs`` of a host that failed to start."""
    for ref in refs:
        with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
            ref.stop(block=True, timeout=30)


class HostBase:
    """How a :class:`~ctxledger.actors.Host` ends: :meth:`close`, the context manager, and the
    ``ResourceWarning`` (and the close) of a host dropped unclosed
    (:mod:`~ctxledger.actors.lifecycle` closes the hosts still open at interpreter exit)."""

    log: EventLog
    host_id: str
    _lock: threading.Lock
    _closed: bool
    _owns_log: bool
    _actors: HostActors
    _router: HistoryRouter | None  # set last in the constructor: the host is then complete

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise HostClosedError("the host is closed")

    def close(self) -> None:
        """Stop the actors and close the log; idempotent.

        Requests still waiting for their turn fail with :class:`HostClosedError`; batches already
        handed to the log are committed and answered.
        """
        with self._lock:
            if self._closed or self._router is None:
                return
            self._closed = True
        self._actors.stop()
        if self._owns_log:
            try:
                self.log.close()
            except CtxLedgerError:  # closing twice or a dead env must not mask the caller's error
                _logger.warning("log_close_failed", exc_info=True)

    def __repr__(self) -> str:
        where = getattr(getattr(self, "log", None), "path", None)
        return f"<Host {where or type(getattr(self, 'log', None)).__name__!s} {self.host_id!r}>"

    def __del__(self) -> None:
        # As Python does for files: warn about (and close) a host dropped without close().
        if getattr(self, "_router", None) is None or self._closed:
            return
        lifecycle.close_in_background(self.close, repr(self))  # first: the warning may raise
        warnings.warn(f"unclosed {self!r}", ResourceWarning, source=self, stacklevel=2)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
