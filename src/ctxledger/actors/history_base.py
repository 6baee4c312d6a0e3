"""What the modules of the history actor share: the host's runtime and the actor's own state.

The history actor is one pykka actor whose code is split by concern over a few modules, each a
mixin of :class:`HistoryBase`: :mod:`~ctxledger.actors.history` (the mailbox and supervision),
:mod:`~ctxledger.actors.command_queue` (the command queue of each session),
:mod:`~ctxledger.actors.writes` (the write path to the journal and the fold of durable
batches), :mod:`~ctxledger.actors.steps` (the decision step: serve, compact, the reactive
retries, summaries), :mod:`~ctxledger.actors.background` (what budget asks of a session and the
background compactions it allows), :mod:`~ctxledger.actors.activation` (loading, creating,
forking, leases, eviction) and :mod:`~ctxledger.actors.inline` (commands carried out on their
callers' threads). The steps one module calls in another are declared here, abstract.
"""

from __future__ import annotations

import abc
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence, Sized
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

import pykka

from ctxledger.actors.failures import log_failure
from ctxledger.actors.leases import LeaseKeeper
from ctxledger.actors.live import Live, Op
from ctxledger.actors.messages import (
    Command,
    DecideStep,
    Durable,
    DurablesReady,
    HistoryMessage,
    HistoryRef,
)
from ctxledger.actors.waiters import Reply
from ctxledger.domain import Job, Tokenizer
from ctxledger.errors import LeaseLostError
from ctxledger.events import Event
from ctxledger.storage import EventLog, RecordedEvent

if TYPE_CHECKING:
    from ctxledger.actors.budget import BudgetActor
    from ctxledger.actors.compaction import CompactionPool
    from ctxledger.actors.failures import Restarting
    from ctxledger.actors.projection import ProjectionPool
    from ctxledger.actors.timer import Timer
    from ctxledger.domain import SessionState

__all__ = ["DurableBox", "HistoryBase", "Runtime", "mailbox_view"]

#: The class of the history actors a :class:`Runtime` holds: the host's runtime is a
#: ``Runtime[HistoryActor]``, and each actor sees its own as ``Runtime[Self]``. A type parameter,
#: not an import: :mod:`ctxledger.actors.history` builds on this module.
H = TypeVar("H", bound="HistoryBase")


@dataclass(slots=True)
class Runtime(Generic[H]):
    """What the history actors of one host share (``H``: their class).

    Attributes:
        log: The event log.
        tokenizer: Counts tokens for the decisions.
        new_id: Returns fresh compaction and checkpoint ids.
        clock: Returns the unix time recorded on checkpoints and new sessions.
        compaction: Runs summarisers (:class:`~ctxledger.actors.compaction.CompactionPool`).
        projection: Loads sessions and stores snapshots
            (:class:`~ctxledger.actors.projection.ProjectionPool`).
        budget: The budget actor's ref.
        timer: Deadlines (:class:`~ctxledger.actors.timer.Timer`).
        summarizer_name: Who writes the summaries, recorded with each (``describe_summarizer``).
        recovered: Sessions already recovered by this host (shared by its history actors).
        leases: On a log shared by several hosts, the host's leases
            (:class:`~ctxledger.actors.leases.LeaseKeeper`); None otherwise.
        max_live: Session states the host keeps in memory (``max_active_sessions``).
        live_counts: Session states each history actor holds, by actor number; each actor
            writes only its own entry, and all read the sum to enforce ``max_live`` host-wide.
        history: The history actors' refs, by number (set once they are started).
        restart: Called by a history actor that dies with its number and ref: starts and
            returns its successor, or None once the host is closed.
        closed: Whether the host is closed (no actor is restarted any more).
        on_commit: Told ``(session_id, records)`` of each durable batch on the journal thread,
            before its caller is answered (the OpenTelemetry instrumentor's hook, see
            ``Host._observe_commits``); None when nobody listens.
        snapshot_interval: Events between the snapshots of every session
            (``HostOptions.snapshot_interval``); None: each session's ``Config``'s.
    """

    log: EventLog
    tokenizer: Tokenizer
    new_id: Callable[[], str]
    clock: Callable[[], float]
    compaction: CompactionPool
    projection: ProjectionPool
    budget: Restarting[BudgetActor]
    timer: Timer
    summarizer_name: str = ""
    recovered: set[str] = field(default_factory=set)
    leases: LeaseKeeper | None = None
    max_live: int = 1024
    live_counts: list[int] = field(default_factory=list)
    history: list[pykka.ActorRef[H]] = field(default_factory=list)
    #: The history actors themselves, by number, once started (what carries out a blocking
    #: caller's command on its thread: :mod:`ctxledger.actors.inline`).
    instances: dict[int, H] = field(default_factory=dict)
    restart: Callable[[int, pykka.ActorRef[H]], pykka.ActorRef[H] | None] = field(
        default=lambda _number, _ref: None
    )
    closed: Callable[[], bool] = field(default=lambda: False)
    on_commit: Callable[[str, list[RecordedEvent]], None] | None = None
    snapshot_interval: int | None = None


_READY = DurablesReady()


class DurableBox:
    """The durable batches the journal publishes to one history actor, in the order published.

    :meth:`post` (on the journal thread) keeps a batch's :class:`Durable` and tells the actor
    ``DurablesReady`` only when it has not been told since it last took them (:meth:`take`), so
    a burst of batches costs the actor one message and one wake-up. Order is kept: a caller's
    next command is told after its batch was posted, so behind the ``DurablesReady`` that takes
    the batch.
    """

    __slots__ = ("_items", "_lock", "_told")

    def __init__(self) -> None:
        self._items: list[Durable] = []
        self._lock = threading.Lock()
        self._told = False

    def post(self, durable: Durable, actor: HistoryRef) -> None:
        """Keep ``durable`` for ``actor`` and tell it, unless it was told already.

        Raises:
            pykka.ActorDeadError: The actor is gone (its batches are of no use any more).
        """
        with self._lock:
            self._items.append(durable)
            if self._told:
                return
            self._told = True
        actor.tell(_READY)

    def post_quiet(self, durable: Durable) -> None:
        """Keep ``durable`` without telling the actor: its caller folds it (or has the actor
        told) before it goes on, see :meth:`~ctxledger.actors.inline.CallerRuns.fold_posted`."""
        with self._lock:
            self._items.append(durable)

    def waiting(self) -> bool:
        """Whether batches wait to be taken (a glance, without the lock)."""
        return bool(self._items)

    def tell_unless_told(self, actor: HistoryRef) -> None:
        """Tell the actor of the batches waiting, unless it was told since it last took them.

        Raises:
            pykka.ActorDeadError: The actor is gone (its batches are of no use any more).
        """
        with self._lock:
            if self._told or not self._items:
                return
            self._told = True
        actor.tell(_READY)

    def take(self) -> list[Durable]:
        """The batches posted since the last take, oldest first (for ``DurablesReady``).

        Called with the actor's lock held, as :meth:`hold` is (no two takes at once). An empty
        box is left without its lock: a batch posted after ``_told`` is cleared tells the actor,
        and one posted before the glance below is taken under the lock.
        """
        self._told = False
        if not self._items:
            return []
        with self._lock:
            items, self._items, self._told = self._items, [], False
        return items

    def hold(self) -> list[Durable]:
        """The batches posted so far, and no ``DurablesReady`` for those posted until the next
        :meth:`take` or :meth:`unhold`: a command carried out on its caller's thread
        (:mod:`ctxledger.actors.inline`) folds them itself. An empty box is held without its
        lock: a batch posted meanwhile either sees ``_told`` set or tells the actor once more
        (which then finds the box taken), and is taken by the next :meth:`take`."""
        if not self._items:
            self._told = True
            return []
        with self._lock:
            items, self._items, self._told = self._items, [], True
        return items

    def unhold(self, actor: HistoryRef, taken: list[Durable]) -> None:
        """End a :meth:`hold` that was interrupted: ``taken`` (the batches it took, folded or
        not: folding one again does nothing) go back first, and the actor is told of them and
        of what was posted meanwhile."""
        with self._lock:
            self._items[:0] = taken
            tell = self._told = bool(self._items)
        if tell:
            actor.tell(_READY)


class _AskedMailbox:
    """A mailbox other than :class:`queue.Queue`, asked through pykka's ``ActorInbox``."""

    __slots__ = ("_inbox",)

    def __init__(self, inbox: Any) -> None:
        self._inbox = inbox

    def __len__(self) -> int:
        return 0 if self._inbox.empty() else 1


def mailbox_view(inbox: Any) -> Sized:
    """``inbox`` as something whose truth says whether messages wait in it.

    A :class:`pykka.ThreadingActor`'s inbox is a :class:`queue.Queue`: its deque is read without
    the queue's lock (a glance, as ``Queue.empty`` would give, on every command's path; taking
    that lock from dozens of callers made them queue on it). Any other inbox is asked.
    """
    return inbox.queue if isinstance(inbox, queue.Queue) else _AskedMailbox(inbox)


class HistoryBase(pykka.ThreadingActor):
    """The state every module of the history actor uses, and the steps they call across."""

    use_daemon_thread = True  # never keeps the interpreter alive (see actors.lifecycle)

    _rt: Runtime[Self]  # the host's Runtime[HistoryActor], seen from the actor's own class
    _number: int
    #: The session states this actor holds, least recently used first.
    _lives: OrderedDict[str, Live]
    #: The outcome of each reactive attempt used since a session's last append or usage report
    #: (an attempt is used once it starts); kept apart from the session states so that an
    #: eviction does not give a session its attempts back.
    _reactive: dict[str, list[str]]
    _tokens: int  # the last write token handed out
    _durables: DurableBox  # the journal's durable batches, waiting for the actor
    _thread_id: int = 0  # the ident of the actor's own thread (set as it starts)
    #: This actor's ref, as the other actors hold it (they tell it its messages); the
    #: ``actor_ref`` property's value, kept as an attribute (read on every batch's path).
    _me: HistoryRef
    #: The actor's mailbox as a sized view (``not self._mailbox``: nothing waits in it), see
    #: :func:`mailbox_view`.
    _mailbox: Sized


    def _flush_held(self, live: Live) -> None:
        """Record the session's held events (``Live.held``: served views, a background
        summary's outcome) in a batch of their own: before a command that may write nothing,
        an eviction, the actor's stop, ``wait_background``'s answer, the timer's ``FlushHeld``."""
        if live.held and live.writing is None:
            self._write(live, ())

    def _flush_all_held(self) -> None:
        """Record the events held back in every session (:meth:`_flush_held`)."""
        for live in self._lives.values():
            try:
                self._flush_held(live)
            except Exception as exc:  # the other sessions' must be recorded all the same
                log_failure("held_views_not_recorded", exc, session_id=live.id)

    @abc.abstractmethod
    def _on_durables(self, durables: list[Durable] | None = None) -> None:
        """Fold ``durables``, by default every batch in the durable box (writes)."""

    @abc.abstractmethod
    def _contain(self, message: HistoryMessage, exc: Exception) -> None:
        """Fail the request(s) ``message`` belongs to and restart its session (history)."""

    @abc.abstractmethod
    def _pump(self, live: Live) -> None:
        """Start the queued commands of ``live`` while nothing is in progress (history)."""

    @abc.abstractmethod
    def _handle(self, message: HistoryMessage) -> None:
        """Handle one message under the actor's lock, on whichever thread holds it (history)."""

    @abc.abstractmethod
    def _run_command(self, command: Command) -> None:
        """Carry out a caller's command in the actor's place, its lock held (command queue)."""

    @abc.abstractmethod
    def _evict(self, *, ask_others: bool = True) -> None:
        """Drop least recently used idle session states while over the host's limit
        (activation)."""

    @abc.abstractmethod
    def _step(self, live: Live, command: DecideStep) -> None:
        """Start a step: record its messages, then decide its view (steps)."""

    @abc.abstractmethod
    def _attempt(self, live: Live, op: Op, tried: list[str]) -> None:
        """Start the next reactive attempt of the command in progress (steps)."""

    @abc.abstractmethod
    def _prepare(self, live: Live) -> None:
        """Start a background compaction budget asked for (background)."""

    @abc.abstractmethod
    def _settled(self, live: Live) -> bool:
        """Whether nothing of the session's background work is in progress (background)."""

    @abc.abstractmethod
    def _forget(self, live: Live, error: BaseException, *, queued: bool) -> None:
        """Fail the callers waiting on the work of ``live``; stop its background work."""

    @abc.abstractmethod
    def _restart(self, live: Live, error: BaseException) -> None:
        """Forget the state of ``live`` and load it again from the log (history)."""

    @abc.abstractmethod
    def _reload(self, live: Live) -> None:
        """Load the state of ``live`` again, logging that it restarted (history)."""

    @abc.abstractmethod
    def _write(
        self,
        live: Live,
        events: Sequence[Event],
        *,
        reply: Reply | None = None,
        value: Any = None,
        on_done: Callable[[list[RecordedEvent] | None, BaseException | None], None] | None = None,
        pressure: bool = False,
        op: Op | None = None,
        folded: int = 0,
    ) -> None:
        """Hand ``events`` to the journal after the session's batch in flight (writes)."""

    @abc.abstractmethod
    def _fold(
        self, live: Live, state: SessionState, records: list[RecordedEvent], *, skip: int = 0
    ) -> None:
        """Fold a durable batch into the session's state (writes)."""

    @abc.abstractmethod
    def _decide(self, live: Live, op: Op) -> None:
        """Run the decision step of the command in progress (steps)."""

    @abc.abstractmethod
    def _run_job(self, live: Live, op: Op | None, job: Job) -> None:
        """Hand a durable job to the compaction pool (steps)."""

    @abc.abstractmethod
    def _background_ended(self, live: Live, *, quiet_until: int = 0) -> None:
        """A background compaction ended, or never started (background)."""

    @abc.abstractmethod
    def _created(self, live: Live, message: Durable) -> None:
        """The first events of a new session are durable, or failed (activation)."""

    @abc.abstractmethod
    def _drop(self, live: Live, error: LeaseLostError) -> None:
        """Another host took the session over: forget its state (activation)."""
