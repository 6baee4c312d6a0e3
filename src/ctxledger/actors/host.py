"""The :class:`Host`: many agent sessions over one event log, on a fixed number of threads.

A host runs one set of actors shared by all its sessions (DESIGN §3): a few history actors (each
the single writer of the sessions it owns, chosen by id), one budget actor, a pool of compaction
actors that run summarisers, and a few projection actors that load sessions from the log. Plus
the log's journal thread and one timer thread. A session is state, not threads: the thread
count depends on those settings only, never on how many sessions are open or active. Session
states not used for a while are evicted (least recently used beyond ``max_active_sessions``) and
re-activated from the newest snapshot and the events after it.

**Several hosts on one database.** On a log shared by several hosts (PostgreSQL), each host has
a ``host_id`` and serves a session only while it holds the session's lease
(:mod:`ctxledger.actors.leases`): activating a session takes the lease (waiting up to
``lease_wait`` seconds for another host's lease to be released or to expire), every write is
fenced with it, a background pass renews all leases every ``lease_ttl / 3`` seconds, and
eviction and :meth:`Host.close` give them back. A host that lost a session's lease (it was
paused or cut off while another host took over) fails that session's next write with
:class:`~ctxledger.errors.LeaseLostError`, writes nothing, and re-activates the session on its
next use. A second host taking a session over recovers it exactly as after a crash.

**Bad calls fail alone.** Every argument is checked on the caller's thread before anything is
queued (:mod:`ctxledger.actors.arguments`), every control event reads back before it is
written (:mod:`ctxledger.actors.recordable`), and a request that fails inside the actors fails
alone (:mod:`ctxledger.actors.failures`, :mod:`ctxledger.actors.router`). A host left open
is closed at interpreter exit (:mod:`ctxledger.actors.lifecycle`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Unpack, cast

import pykka

from ctxledger._logging import get_logger
from ctxledger.actors import lifecycle
from ctxledger.actors._host_base import HostActors, HostBase
from ctxledger.actors.arguments import check_config, check_flag, check_host_objects
from ctxledger.actors.history import HistoryActor, HistoryActorProxy
from ctxledger.actors.messages import Command, Execute, Fork, Open
from ctxledger.actors.options import (
    HostOptions,
    LegacyHostKeywords,
    default_host_id,
    options_in_force,
    processes_in_force,
    resolve_options,
)
from ctxledger.actors.router import HistoryRouter
from ctxledger.actors.session import Session, check_session_id
from ctxledger.actors.waiters import LoopWaiter, Reply, Waiter
from ctxledger.config import Config
from ctxledger.domain import CharTokenizer, Tokenizer
from ctxledger.errors import (
    HostClosedError,
    InvalidArgumentError,
)
from ctxledger.messages import Message
from ctxledger.replay.loading import fork_point
from ctxledger.storage import EventLog, RecordedEvent, is_postgres_target, open_log
from ctxledger.summarizers import ExtractiveSummarizer, Summarizer

__all__ = ["Host", "HostOptions", "default_host_id"]

_logger = get_logger(__name__)


def _system_text(system: object) -> str | None:
    """``system`` checked as a system message's text (None: no system prompt stated)."""
    if system is None:
        return None
    return Message.system(cast(str, system)).content


class Host(HostBase):
    """Runs many agent sessions over one durable event log.

    Use :meth:`Host.open` for the embedded LMDB default; the constructor accepts any
    :class:`~ctxledger.storage.EventLog` backend. A host is a context manager; :meth:`close`
    stops its actors and closes the log.

    Args:
        log: The event log.
        config: The default Config of new sessions (``Config()`` if omitted).
        summarizer: The summariser (``ExtractiveSummarizer()``, offline, if omitted); a plain
            callable runs on the compaction actors, a coroutine function is awaited on the
            calling task's event loop (or the host's own).
        tokenizer: The token estimator; chars // 3 if omitted.
        clock: Returns the current unix time (injectable for deterministic tests); it also
            times each summary (``summary_seconds``).
        id_factory: Returns fresh ids for checkpoints and compactions.
        owns_log: Close ``log`` in :meth:`close`.
        options: The host-level settings (pool sizes, eviction, leases, durability): a
            :class:`~ctxledger.HostOptions`; its defaults if omitted.
        **legacy: Deprecated: the HostOptions fields as keywords (``history_actors=1``, ...);
            each still works, with a :class:`DeprecationWarning` naming the field.
    """

    def __init__(
        self,
        log: EventLog,
        *,
        config: Config | None = None,
        summarizer: Summarizer | None = None,
        tokenizer: Tokenizer | None = None,
        clock: Callable[[], float] = time.time,
        id_factory: Callable[[], str] | None = None,
        owns_log: bool = True,
        options: HostOptions | None = None,
        **legacy: Unpack[LegacyHostKeywords],
    ) -> None:
        """Wrap ``log``; see the class docstring for the arguments.

        Raises:
            InvalidArgumentError: An argument has the wrong type or value (``options`` is not
                a HostOptions or is given beside an old keyword, ``leases=True`` with a log
                that is no LeaseStore, a ``durability`` the log was not opened with, ...); a
                ``TypeError`` and a ``ValueError``.
            ConfigError: ``config`` is not a Config, or one that cannot be recorded.
        """
        self._router: HistoryRouter | None = None  # set last: the host is then complete
        chosen = resolve_options(options, dict(legacy), "Host")
        check_host_objects(
            {
                "config": config,
                "summarizer": summarizer,
                "tokenizer": tokenizer,
                "clock": clock,
                "id_factory": id_factory,
            }
        )
        if not isinstance(log, EventLog):
            raise InvalidArgumentError("log", f"expected an EventLog, got {type(log).__name__}")
        check_flag("owns_log", owns_log)
        self._options = chosen = options_in_force(chosen, log)
        assert chosen.host_id is not None and chosen.lease_wait is not None  # resolved
        #: This host's id (on a shared log, the holder named by its leases): ``options.host_id``.
        self.host_id: str = chosen.host_id
        #: Seconds a lease lasts unless renewed: ``options.lease_ttl``.
        self.lease_ttl: float = chosen.lease_ttl
        #: Seconds an activation waits at most for another host's lease: ``options.lease_wait``.
        self.lease_wait: float = chosen.lease_wait
        self.log = log
        self.config = config if config is not None else Config()
        self.summarizer: Summarizer = (
            summarizer if summarizer is not None else ExtractiveSummarizer()
        )
        self._options = chosen = processes_in_force(chosen, self.summarizer)
        self.tokenizer: Tokenizer = tokenizer if tokenizer is not None else CharTokenizer()
        #: Session states kept in memory: ``options.max_active_sessions``.
        self.max_active_sessions = chosen.max_active_sessions
        self.clock = clock
        self.new_id: Callable[[], str] = id_factory or (lambda: uuid.uuid4().hex)
        self._owns_log = owns_log
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self._closed = False
        self._actors = actors = HostActors.start(
            log,
            chosen,
            summarizer=self.summarizer,
            tokenizer=self.tokenizer,
            new_id=self.new_id,
            clock=clock,
        )
        self._leases = actors.leases
        #: The history actors' refs, by number (replaced in place when one is restarted).
        self._history = actors.router.actors
        self._router = actors.router
        lifecycle.track(self)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        config: Config | None = None,
        summarizer: Summarizer | None = None,
        tokenizer: Tokenizer | None = None,
        clock: Callable[[], float] = time.time,
        id_factory: Callable[[], str] | None = None,
        options: HostOptions | None = None,
        **legacy: Unpack[LegacyHostKeywords],
    ) -> Host:
        """Open (or create) a host on an LMDB folder or a PostgreSQL database.

        Args:
            path: The folder holding the LMDB environment (created if missing), or a
                ``postgresql://`` URI (see :func:`ctxledger.storage.open_log`).
            config: The default Config of new sessions (``Config()`` if omitted).
            summarizer: The summariser; ``ExtractiveSummarizer()`` (offline) if omitted.
            tokenizer: The token estimator; chars // 3 if omitted.
            clock: Returns the current unix time (injectable for deterministic tests); it also
                times each summary (``summary_seconds``).
            id_factory: Returns fresh ids for checkpoints and compactions.
            options: The host-level settings: a :class:`~ctxledger.HostOptions` (durability
                ``"sync"``, pool sizes, eviction, leases); its defaults if omitted.
            **legacy: Deprecated: the HostOptions fields as keywords (``durability="none"``,
                ``max_active_sessions=64``, ...); each still works, with a
                :class:`DeprecationWarning` naming the field.

        Raises:
            ConfigError: ``durability`` is not one of the three modes, or ``config`` is not a
                Config (or one that cannot be recorded).
            InvalidArgumentError: Another argument has the wrong type or value (a ``path``
                that is empty, holds a NUL or is not valid UTF-8, included), ``options`` is
                given beside an old keyword, or ``leases=True`` for an LMDB folder (nothing is
                opened or created then).
            StorageError: The folder or database cannot be opened as an event log.
        """
        chosen = resolve_options(options, dict(legacy), "Host.open")
        if not isinstance(path, str | os.PathLike):
            raise InvalidArgumentError(
                "path", f"expected a folder or a postgresql:// URI, got {type(path).__name__}"
            )
        objects: dict[str, Any] = {
            "config": config,
            "summarizer": summarizer,
            "tokenizer": tokenizer,
            "clock": clock,
            "id_factory": id_factory,
        }
        check_host_objects(objects)  # before the folder is opened (or created)
        if chosen.leases and not is_postgres_target(path):
            raise InvalidArgumentError("leases", "leases=True needs a postgresql:// database")
        log = open_log(path, durability=chosen.durability or "sync")
        try:
            return cls(log, options=chosen, **objects)
        except BaseException:
            log.close()
            raise

    @property
    def options(self) -> HostOptions:
        """The :class:`~ctxledger.HostOptions` in force, every ``None`` field resolved.

        ``durability`` is the log's mode (``None`` for a log without modes, the in-memory
        one), ``host_id`` this host's, ``lease_wait`` in seconds and ``leases`` whether the host
        takes session leases. To start another host like this one, clear ``host_id``:
        ``msgspec.structs.replace(host.options, host_id=None)``.
        """
        return self._options

    # --- sessions ------------------------------------------------------------------------------

    def sessions(self) -> list[str]:
        """Return the ids of every session in the log, in creation order."""
        self._check_open()
        return self.log.sessions()

    def session(
        self, session_id: str, *, config: Config | None = None, system: str | None = None
    ) -> Session:
        """Get or create a session; it is recovered from the log on first use.

        A session's Config is recorded when it is created (the host's config unless ``config``
        is given). Passing a different ``config`` later records a ``ConfigChanged`` event that
        applies from then on.

        ``system`` states the session's system prompt, idempotently: it is appended while the
        conversation is empty (a new session) and only checked on later calls, so set-up code
        that runs at every start never puts a second system message mid-conversation.

        Raises:
            HostClosedError: The host is closed.
            InvalidSessionIdError: The id is not a valid session id.
            ConfigError: ``config`` is not None or a :class:`~ctxledger.Config`, or is one that
                cannot be recorded; nothing is written.
            InvalidMessageError: ``system`` is not a valid message text.
            SystemPromptMismatchError: ``system`` differs from the system prompt the session's
                conversation began with (or it began without one); nothing is written.
            CorruptRecordError: The session's log is damaged (other sessions keep working).
            LeaseHeldError: On a shared log, another host still held the session's lease
                after ``lease_wait`` seconds.
            LeaseLostError: On a shared log, another host took the session over while this
                one was activating it (any later call of the session may raise it too, then
                writing nothing; the call after that activates the session again).
        """
        handle = self._handle(session_id, config)
        self._call(handle.id, self._open(handle.id, Waiter(), config, system))
        return handle

    async def asession(
        self, session_id: str, *, config: Config | None = None, system: str | None = None
    ) -> Session:
        """:meth:`session` for a caller on an event loop: awaits activation, blocking no thread."""
        handle = self._handle(session_id, config)
        reply = LoopWaiter(asyncio.get_running_loop())
        self._tell(handle.id, self._open(handle.id, reply, config, system))
        await reply.wait()
        return handle

    def _open(
        self, session_id: str, reply: Reply, config: Config | None, system: object
    ) -> Open:
        create = config if config is not None else self.config
        return Open(session_id, reply, config, create, _system_text(system))

    def _handle(self, session_id: str, config: object = None) -> Session:
        check_session_id(session_id)
        check_config(config)
        with self._lock:
            self._check_open()
            handle = self._sessions.get(session_id)
            if handle is None:
                handle = self._sessions[session_id] = Session(self, session_id)
            return handle

    def _fork(self, parent: Session, new_id: str, at_seq: int | None) -> Session:
        """Create ``new_id`` sharing ``parent``'s history up to ``at_seq`` (see Session.fork).

        The fork point and the parent's Config there are read here; the fork's first events
        are written by the history actor that owns ``new_id`` (its single writer), which
        answers ``SessionExistsError`` if it exists.
        """
        self._handle(new_id)
        last_seq, last_event_seq = parent._positions()
        owner, at, parent_event_seq, prefix = fork_point(
            self.log, parent.id, at_seq, last_seq, last_event_seq
        )
        self._call(new_id, Fork(new_id, Waiter(), owner, at, parent_event_seq, prefix.config))
        return self.session(new_id)

    def active_sessions(self) -> list[str]:
        """Return the ids of the session states in memory (by history actor, least recent first)."""
        self._check_open()
        ids: list[str] = []
        for actor in list(self._history):
            with contextlib.suppress(pykka.ActorDeadError):  # a dead actor holds no state
                ids.extend(cast(HistoryActorProxy, actor.proxy()).live_sessions().get())
        return ids

    def _observe_commits(
        self, observer: Callable[[str, list[RecordedEvent]], None] | None
    ) -> None:
        """Have ``observer(session_id, records)`` told of every durable batch of this host's
        sessions (None: nobody); for :mod:`ctxledger.integrations.otel`, not a public hook.

        It is called on the journal thread before the batch's caller is answered, so a call's
        own events have reached it when the call returns: it must be quick, and what it raises
        is logged and ignored. Batches already handed to the log keep the observer they had.
        """
        self._actors.runtime.on_commit = observer

    # --- routing -------------------------------------------------------------------------------

    def _owner(self, session_id: str) -> pykka.ActorRef[HistoryActor]:
        assert self._router is not None
        return self._router.owner(session_id)

    def _tell(self, session_id: str, command: Command) -> None:
        if self._closed:
            raise HostClosedError("the host is closed")
        assert self._router is not None
        self._router.tell(session_id, command)

    def _submit(self, session_id: str, command: Command, *, wait: bool = False) -> None:
        """Hand ``command`` over: carried out at once on this thread if the owner is idle, else
        to the owner's mailbox. An async caller's (``wait`` False) never waits for the actor's
        own work, and its batch is committed by the journal's thread: its event loop blocks on
        neither (see :mod:`ctxledger.actors.inline`)."""
        if self._closed:
            raise HostClosedError("the host is closed")
        assert self._router is not None
        if not self._router.run_inline(session_id, command, wait=wait):  # busy: its mailbox
            self._router.tell(session_id, command)

    def _call(self, session_id: str, command: Command) -> Any:
        reply = command.reply
        assert isinstance(reply, Waiter)
        # A command that records without serving a view (an append, a pin, usage...) folds
        # its own batch (see fold_posted); a step's or a view's batch is the actor's to fold,
        # beside the caller (what a view's fold starts is the actor's work, not the caller's).
        reply.folds = type(command) is Execute
        try:
            self._submit(session_id, command, wait=True)
            return reply.wait()
        finally:
            # The batch the answer came with was posted without waking the history actor: fold
            # it here, or have the actor told, before this thread goes on (see fold_posted).
            reply.abandoned = True
            actor = reply.posted_to
            if actor is not None:
                actor.fold_posted()
