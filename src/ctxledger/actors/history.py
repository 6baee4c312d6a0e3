"""The history actor: the single writer of the sessions it owns.

A host runs a few of them (``HostOptions.history_actors``); each session belongs to one, chosen by
its id. The actor owns the states of its sessions and does, per session and one request at a
time: validate, decide (:func:`ctxledger.domain.decide`), hand the events to the log's journal
without waiting, and fold them once the journal reports them durable. It never blocks: a batch in
the journal, a session being loaded by the projection actors, a summary being written by the
compaction pool are all answered by messages, and meanwhile the actor serves its other sessions.

On a log shared by several hosts every batch of a session is fenced with the host's lease on it
(:mod:`ctxledger.actors.leases`); a batch refused because another host took the session over
(:class:`~ctxledger.errors.LeaseLostError`) drops the session's state, failing its waiting
callers, so that its next use takes the lease again and recovers from the log.

Supervision, per request (:mod:`ctxledger.actors.failures`): an exception while a message is
handled fails the request(s) it belongs to with a ``ctxledger`` error, is logged at ERROR, and
reloads that session's state from its log; the actor goes on. A batch the log refuses at once
fails like a batch that failed to commit. If the actor dies anyway, its queued commands go to a
successor (:mod:`ctxledger.actors.router`) and its requests in progress fail.

The journal answers a caller directly when a request's last batch is durable (after telling this
actor, so the caller's next request always finds the batch folded): an append costs one hand-off
to the actor, one to the journal, and the journal's wake-up of the caller.

This module holds the mailbox and the supervision; the rest of the actor is in mixins by concern
(:mod:`~ctxledger.actors.history_base`): the command queue of each session
(:mod:`~ctxledger.actors.command_queue`), the write path (:mod:`~ctxledger.actors.writes`), the
step (:mod:`~ctxledger.actors.steps`), what budget asks of a session
(:mod:`~ctxledger.actors.background`), sessions coming and going (``activation``).
"""

from __future__ import annotations

import queue
import threading
from collections import OrderedDict, deque
from typing import Any, assert_never

import pykka
from pykka.typing import ActorMemberMixin, proxy_method

from ctxledger._logging import get_logger
from ctxledger.actors.activation import Activation
from ctxledger.actors.background import BackgroundSteps
from ctxledger.actors.command_queue import CommandQueue
from ctxledger.actors.failures import hand_to, internal, log_failure, stranded_commands
from ctxledger.actors.history_base import DurableBox, Runtime, mailbox_view
from ctxledger.actors.inline import CallerRuns
from ctxledger.actors.live import Live, fail, fail_work
from ctxledger.actors.messages import (
    Command,
    Decide,
    DecideStep,
    Durable,
    DurablesReady,
    Evict,
    Execute,
    FlushHeld,
    Forgotten,
    Fork,
    HistoryMessage,
    LeaseLost,
    Loaded,
    Measure,
    Open,
    Prepare,
    Read,
    Release,
    Settle,
    Settled,
    SummaryDone,
)
from ctxledger.actors.steps import DecisionSteps
from ctxledger.actors.writes import Writes
from ctxledger.domain.commands import (
    overflow_message,
)
from ctxledger.errors import CtxLedgerError, HostClosedError

__all__ = ["HistoryActor", "HistoryActorProxy", "Runtime", "overflow_message"]

_log = get_logger(__name__)


class HistoryActor(Activation, BackgroundSteps, DecisionSteps, CommandQueue, Writes, CallerRuns):
    """Owns a share of a host's sessions; see the module docstring.

    Args:
        runtime: What the host's history actors share. While the host holds more than
            ``runtime.max_live`` session states in all, an actor evicts its own least recently
            used idle ones (re-activated from snapshot and tail when needed).
        number: This actor's number (sessions are routed to it by their id).
    """

    _rt: Runtime[HistoryActor]

    def __init__(self, runtime: Runtime[HistoryActor], number: int) -> None:
        super().__init__()
        self._me = self.actor_ref
        self._mailbox = mailbox_view(self.actor_inbox)
        self._rt = runtime
        self._number = number
        # The outcome of each reactive attempt used since a session's last append or usage
        # report (an attempt is used once it starts); kept apart from the session states so that
        # an eviction does not give a session its attempts back.
        self._reactive: dict[str, list[str]] = {}
        self._lives: OrderedDict[str, Live] = OrderedDict()  # least recently used first
        self._tokens = 0
        self._durables = DurableBox()
        self._exclusive = threading.RLock()
        self._wanted = self._stopped = False
        self._init_turns()

    def on_start(self) -> None:
        """Offer the actor's idle time to blocking callers (see :mod:`ctxledger.actors.inline`)."""
        self._thread_id = threading.get_ident()
        self._rt.instances[self._number] = self

    def on_receive(self, message: HistoryMessage) -> None:
        """Handle one message of the actor's closed union (see the module docstring)."""
        self._starting(message)
        try:
            self._handle(message)
        finally:
            self._handled_one()

    def _handle(self, message: HistoryMessage) -> None:
        """Handle ``message`` holding the actor's lock (on the actor's thread, or on a caller's
        carrying a command out in its place: see :mod:`ctxledger.actors.inline`)."""
        if not self._exclusive.acquire(blocking=False):
            # A caller is carrying a command out in the actor's place: no other starts before
            # this message had its turn (the callers' next commands take the mailbox).
            self._wanted = True
            self._exclusive.acquire()
            self._wanted = False
        try:
            match message:
                case Execute() | DecideStep() | Decide() | Read() | Settle() | Open() | Fork():
                    self._on_command(message)
                case Durable():
                    self._on_durable(message)
                case DurablesReady():
                    self._on_durables()
                case Loaded():
                    self._on_loaded(message)
                case SummaryDone():
                    self._on_summary(message)
                case Measure():
                    self._on_measure(message)
                case Prepare():
                    self._on_prepare(message)
                case Release():
                    self._on_release(message)
                case Settled():
                    self._on_settled(message)
                case LeaseLost():
                    self._on_lease_lost(message)
                case Evict():
                    self._evict(ask_others=False)
                case FlushHeld():
                    self._on_flush_held(message)
                case _:
                    assert_never(message)
        except Exception as exc:  # a defect: it fails the request(s) involved, never the actor
            self._contain(message, exc)
        finally:
            self._exclusive.release()

    def _contain(self, message: HistoryMessage, exc: Exception) -> None:
        """Fail the request(s) ``message`` belongs to and restart its session from the log."""
        session_id = getattr(message, "session_id", None)
        log_failure(
            "request_failed", exc, actor=self._number, session_id=session_id,
            handling=type(message).__name__,
        )  # fmt: skip
        error = internal(
            f"session {session_id!r}: handling {type(message).__name__} failed: {exc!r}", exc
        )
        live = self._lives.get(session_id) if isinstance(session_id, str) else None
        if isinstance(message, Command):
            fail(message.reply, error)
            if live is not None:  # never to be carried out later
                live.queue = deque(command for command in live.queue if command is not message)
        if live is None:
            return
        if isinstance(message, Loaded) or live.state is None:
            # It failed while (re)loading: give up on this state; the next command loads again.
            del self._lives[live.id]
            self._forget(live, error, queued=True)
            return
        self._restart(live, error)

    def _restart(self, live: Live, error: BaseException) -> None:
        """Forget the state of ``live`` (it may be half-updated) and load it again from the log.

        The command in progress fails with ``error``; queued commands wait for the new state.
        A batch in the journal is waited for first (see :meth:`_on_durable`), so that the new
        state includes it.
        """
        self._flush_held(live)  # views served before the failure: recorded, then reloaded
        op = live.op
        for job in (live.background, op.job if op is not None else None):
            if job is not None:  # nobody waits for its summary any more: free its worker
                self._rt.compaction.abandon(job.compaction_id)
        self._forget(live, error, queued=False)
        live.state = None
        if live.writing is None:
            self._reload(live)

    def _reload(self, live: Live) -> None:
        _log.warning("session_restarted", session_id=live.id, actor=self._number)
        self._load(live)

    def _forget(self, live: Live, error: BaseException, *, queued: bool) -> None:
        """Fail the callers waiting on the work of ``live`` and stop its background work."""
        self._rt.budget.tell(Forgotten(live.id))  # its pressure, queue place, running summary
        fail_work(live, error, queued=queued)
        live.held = ()  # not recorded: the state they were folded into is dropped
        live.background = None
        live.pressure_sent = live.settling = False
        live.credit = live.unpublished = 0

    def on_stop(self) -> None:
        """Fail every caller still waiting: the host is closing (or, outside ``close()``, the
        actor was stopped; the host starts a fresh one on the next command). Events held back
        (``Live.held``) are recorded first (the journal commits what it was handed before the
        log closes)."""
        self._stop_inline()
        self._flush_all_held()
        self._hand_over(None)
        self._strand()

    def on_failure(self, *exc_info: Any) -> None:
        """The actor dies after all (a defect in the code above): log it, fail the requests in
        progress, and hand the queued ones to a fresh actor, which reloads their sessions."""
        exc = exc_info[1] if len(exc_info) > 1 else None
        if isinstance(exc, BaseException):
            log_failure("history_actor_failed", exc, actor=self._number)
        self._stop_inline()
        self._flush_all_held()
        self._rt.restart(self._number, self.actor_ref)
        self._hand_over(internal(f"history actor {self._number} failed: {exc!r}", exc))
        self._strand()

    def _hand_over(self, error: BaseException | None) -> None:
        rt = self._rt
        if error is None:
            error = self._stopped_error()
        queued: list[Command] = []
        for live in self._lives.values():
            queued.extend(live.queue)
            live.queue.clear()
            try:
                self._forget(live, error, queued=True)
            except Exception as exc:  # the next session's callers must be answered all the same
                log_failure("hand_over_failed", exc, session_id=live.id)
        self._lives.clear()
        rt.live_counts[self._number] = 0
        self._route(queued)

    def _strand(self) -> None:
        """Hand on the commands left in the inbox of this stopped (or dead) actor.

        pykka drops what is left in a stopped actor's inbox, and a caller waits on each command.
        Its refs put into the queue ``self.actor_ref.actor_inbox``; the actor's own attribute is
        given an empty queue for pykka's teardown, so that only this drain and the router's (a
        caller whose command went in after it: :meth:`HistoryRouter.tell` checks ``is_alive``
        after each put) ever take from the refs' queue, each message once.
        """
        self.actor_inbox = queue.Queue()
        self._route(stranded_commands(self.actor_ref))

    def _route(self, commands: list[Command]) -> None:
        """Hand ``commands`` (none of them started) to this actor's successor if it has one;
        else fail them."""
        if not commands:
            return
        successor = self._rt.history[self._number]
        if successor is self.actor_ref:  # stopped, not replaced
            for command in commands:
                fail(command.reply, self._stopped_error())
            return
        hand_to(successor, commands, f"history actor {self._number}")

    def _stopped_error(self) -> CtxLedgerError:
        if self._rt.closed():
            return HostClosedError("the host is closed")
        return internal(f"history actor {self._number} was stopped while its host is open")

    def live_sessions(self) -> list[str]:
        """Return the ids of the session states in memory, least recently used first."""
        return list(self._lives)


class HistoryActorProxy(ActorMemberMixin, pykka.ActorProxy[HistoryActor]):
    """The typed proxy of a :class:`HistoryActor` (the few calls made by ask, not by message)."""

    live_sessions = proxy_method(HistoryActor.live_sessions)
