"""The :class:`Host`: many agent sessions over one event log, on a fixed number of threads.

A host runs one set of actors shared by all its sessions (DESIGN §3): a few history actors (each
the single writer of the sessions it owns, chosen by id), one budget actor, a pool of compaction
actors that run summarisers, and a few projection actors that load sessions from the log. Plus
the log's journal thread and one timer thread. A session is state, not threads: the thread
count depends on those settings only, never on how many sessions are open or active. Session
states not used for a while are evicted (least recently used beyond ``max_active_sessions``) and
re-activated from the newest snapshot and the events after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
import uuid
import zlib
from collections.abc import Callable
from types import TracebackType
from typing import Any, cast

import pykka

from ctxledger._logging import get_logger
from ctxledger.config import Config
from ctxledger.domain import CharTokenizer, Tokenizer
from ctxledger.errors import CtxLedgerError, HostClosedError, SessionExistsError
from ctxledger.events import Event, SessionForked, SessionOpened
from ctxledger.runtime.budget import BudgetActor
from ctxledger.runtime.compaction import CompactionPool
from ctxledger.runtime.history import HistoryActor, HistoryActorProxy, Runtime
from ctxledger.runtime.loading import event_seq_before_message, fold_session
from ctxledger.runtime.messages import Command, Open
from ctxledger.runtime.projection import ProjectionPool
from ctxledger.runtime.session import Session, check_session_id
from ctxledger.runtime.timer import Timer
from ctxledger.runtime.waiters import LoopWaiter, Waiter
from ctxledger.storage import Durability, EventLog, open_log
from ctxledger.summarizers import ExtractiveSummarizer, Summarizer, describe_summarizer

__all__ = ["Host"]

_logger = get_logger(__name__)


class Host:
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
        max_active_sessions: Session states kept in memory; the least recently used idle ones
            beyond it are evicted (their log stays; they are re-activated on next use).
        clock: Returns the current unix time (injectable for deterministic tests).
        id_factory: Returns fresh ids for checkpoints and compactions.
        owns_log: Close ``log`` in :meth:`close`.
        history_actors: History actors (writers); sessions are spread over them by id (never
            more than ``max_active_sessions``).
        compaction_workers: Summariser calls that can run at once.
        projection_actors: Sessions that can be loaded from the log at once.
        background_compactions: Background compactions at once, host-wide.
    """

    def __init__(
        self,
        log: EventLog,
        *,
        config: Config | None = None,
        summarizer: Summarizer | None = None,
        tokenizer: Tokenizer | None = None,
        max_active_sessions: int = 1024,
        clock: Callable[[], float] = time.time,
        id_factory: Callable[[], str] | None = None,
        owns_log: bool = True,
        history_actors: int = 2,
        compaction_workers: int = 4,
        projection_actors: int = 2,
        background_compactions: int = 4,
    ) -> None:
        """Wrap ``log``; see the class docstring for the arguments."""
        for name, value in (
            ("max_active_sessions", max_active_sessions),
            ("history_actors", history_actors),
            ("compaction_workers", compaction_workers),
            ("projection_actors", projection_actors),
            ("background_compactions", background_compactions),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
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
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._timer = Timer()
        self._compaction = CompactionPool(self.summarizer, compaction_workers, self._host_loop)
        self._projection = ProjectionPool(log, clock, projection_actors)
        self._budget = BudgetActor.start(background_compactions)
        runtime = Runtime(
            log=log,
            tokenizer=self.tokenizer,
            new_id=self.new_id,
            clock=clock,
            compaction=self._compaction,
            projection=self._projection,
            budget=self._budget,
            timer=self._timer,
            summarizer_name=describe_summarizer(self.summarizer),
        )
        self._recovered = runtime.recovered
        # Each history actor keeps its share of max_active_sessions (so never more than one
        # actor per session state that may be kept).
        count = min(history_actors, max_active_sessions)
        shares = [
            max_active_sessions // count + (number < max_active_sessions % count)
            for number in range(count)
        ]
        self._history = [
            HistoryActor.start(runtime, number, share) for number, share in enumerate(shares)
        ]

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        config: Config | None = None,
        summarizer: Summarizer | None = None,
        tokenizer: Tokenizer | None = None,
        durability: Durability = "sync",
        max_active_sessions: int = 1024,
        clock: Callable[[], float] = time.time,
        id_factory: Callable[[], str] | None = None,
        history_actors: int = 2,
        compaction_workers: int = 4,
        projection_actors: int = 2,
        background_compactions: int = 4,
    ) -> Host:
        """Open (or create) a host on an LMDB folder or a PostgreSQL database.

        Args:
            path: The folder holding the LMDB environment (created if missing), or a
                ``postgresql://`` URI (see :func:`ctxledger.storage.open_log`).
            config: The default Config of new sessions (``Config()`` if omitted).
            summarizer: The summariser; ``ExtractiveSummarizer()`` (offline) if omitted.
            tokenizer: The token estimator; chars // 3 if omitted.
            durability: ``"sync"`` (an append that returned is on disk), ``"group"`` (same
                guarantee, batched) or ``"none"`` (unsafe: for tests and bulk imports).
            max_active_sessions: Session states kept in memory (see the class docstring).
            clock: Returns the current unix time (injectable for deterministic tests).
            id_factory: Returns fresh ids for checkpoints and compactions.
            history_actors: History actors (see the class docstring).
            compaction_workers: Summariser calls that can run at once.
            projection_actors: Sessions that can be loaded from the log at once.
            background_compactions: Background compactions at once, host-wide.

        Raises:
            ConfigError: ``durability`` is not one of the three modes.
            StorageError: The folder or database cannot be opened as an event log.
        """
        log = open_log(path, durability=durability)
        try:
            return cls(
                log,
                config=config,
                summarizer=summarizer,
                tokenizer=tokenizer,
                max_active_sessions=max_active_sessions,
                clock=clock,
                id_factory=id_factory,
                history_actors=history_actors,
                compaction_workers=compaction_workers,
                projection_actors=projection_actors,
                background_compactions=background_compactions,
            )
        except BaseException:
            log.close()
            raise

    # --- sessions ------------------------------------------------------------------------------

    def sessions(self) -> list[str]:
        """Return the ids of every session in the log, in creation order."""
        self._check_open()
        return self.log.sessions()

    def session(self, session_id: str, *, config: Config | None = None) -> Session:
        """Get or create a session; it is recovered from the log on first use.

        A session's Config is recorded when it is created (the host's config unless ``config``
        is given). Passing a different ``config`` later records a ``ConfigChanged`` event that
        applies from then on.

        Raises:
            HostClosedError: The host is closed.
            InvalidSessionIdError: The id is not a valid session id.
            CorruptRecordError: The session's log is damaged (other sessions keep working).
        """
        handle = self._handle(session_id)
        self._call(handle.id, Open(handle.id, Waiter(), config, config or self.config))
        return handle

    async def asession(self, session_id: str, *, config: Config | None = None) -> Session:
        """:meth:`session` for a caller on an event loop: awaits activation, blocking no thread."""
        handle = self._handle(session_id)
        reply = LoopWaiter(asyncio.get_running_loop())
        self._tell(handle.id, Open(handle.id, reply, config, config or self.config))
        await reply.wait()
        return handle

    def _handle(self, session_id: str) -> Session:
        check_session_id(session_id)
        with self._lock:
            self._check_open()
            handle = self._sessions.get(session_id)
            if handle is None:
                handle = self._sessions[session_id] = Session(self, session_id)
            return handle

    def _fork(self, parent: Session, new_id: str, at_seq: int | None) -> Session:
        """Create ``new_id`` sharing ``parent``'s history up to ``at_seq`` (see Session.fork)."""
        check_session_id(new_id)
        self._check_open()
        if self.log.last_seq(new_id) != 0:
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
        try:
            self.log.append(new_id, events, expected_seq=0)
        except CtxLedgerError as exc:
            if self.log.last_seq(new_id) != 0:
                raise SessionExistsError(f"session {new_id!r} already exists") from exc
            raise
        self._recovered.add(new_id)  # a fork starts from its parent's live state: nothing to repair
        return self.session(new_id)

    def active_sessions(self) -> list[str]:
        """Return the ids of the session states in memory (by history actor, least recent first)."""
        self._check_open()
        proxies = [cast(HistoryActorProxy, actor.proxy()) for actor in self._history]
        futures = [proxy.live_sessions() for proxy in proxies]
        try:
            return [session_id for future in futures for session_id in future.get()]
        except pykka.ActorDeadError:
            raise HostClosedError("the host is closed") from None

    # --- routing -------------------------------------------------------------------------------

    def _owner(self, session_id: str) -> pykka.ActorRef[Any]:
        number = zlib.crc32(session_id.encode("utf-8", "surrogatepass")) % len(self._history)
        return self._history[number]

    def _tell(self, session_id: str, command: Command) -> None:
        if self._closed:
            raise HostClosedError("the host is closed")
        try:
            self._owner(session_id).tell(command)
        except pykka.ActorDeadError:
            raise HostClosedError("the host is closed") from None

    def _call(self, session_id: str, command: Command) -> Any:
        self._tell(session_id, command)
        reply = command.reply
        assert isinstance(reply, Waiter)
        return reply.wait()

    def _host_loop(self) -> asyncio.AbstractEventLoop:
        """The host's own event loop, for coroutine summarisers asked for by threads."""
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="ctxledger-loop", daemon=True
                )
                thread.start()
                self._loop, self._loop_thread = loop, thread
            return self._loop

    # --- lifecycle -----------------------------------------------------------------------------

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
            if self._closed:
                return
            self._closed = True
        for actor in self._history:
            with contextlib.suppress(pykka.ActorDeadError):
                actor.stop(block=True, timeout=30)
        self._compaction.stop()
        self._projection.stop()
        with contextlib.suppress(pykka.ActorDeadError):
            self._budget.stop(block=True, timeout=5)
        self._timer.stop()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            assert self._loop_thread is not None
            self._loop_thread.join(timeout=5)
            if not self._loop_thread.is_alive():
                self._loop.close()
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
