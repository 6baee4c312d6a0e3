"""The history actor: the single writer of the sessions it owns.

A host runs a few of them (``HostOptions.history_actors``); each session belongs to one, chosen by
its id. The actor owns the states of its sessions and does, per session and one request at a
time: validate, decide (:func:`ctxledger.domain.decide`), hand the events to the log's journal
without waiting, and fold them once the journal reports them durable. It never blocks: a batch in
the journal, a session being loaded by the projection actors, a summary being written by the
compaction pool are all answered by messages, and meanwhile the actor serves its other sessions.

On a log shared by several hosts every batch of a session is fenced with the host's lease on it
(:mod:`ctxledger.runtime.leases`); a batch refused because another host took the session over
(:class:`~ctxledger.errors.LeaseLostError`) drops the session's state, failing its waiting
callers, so that its next use takes the lease again and recovers from the log.

Supervision, per request (:mod:`ctxledger.runtime.failures`): an exception while a message is
handled fails the request(s) it belongs to with a ``ctxledger`` error, is logged at ERROR, and
reloads that session's state from its log; the actor goes on. A batch the log refuses at once
fails like a batch that failed to commit. If the actor dies anyway, its queued commands go to a
successor (:mod:`ctxledger.runtime.router`) and its requests in progress fail.

The journal answers a caller directly when a request's last batch is durable (after telling this
actor, so the caller's next request always finds the batch folded): an append costs one hand-off
to the actor, one to the journal, and the journal's wake-up of the caller.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard, cast

import msgspec
import pykka
from pykka.typing import ActorMemberMixin, proxy_method

from ctxledger._logging import get_logger
from ctxledger.domain import (
    BACKGROUND_BACKOFF,
    Background,
    CharTokenizer,
    CompactionResult,
    Decision,
    Job,
    ModelView,
    Recover,
    Serve,
    Summarized,
    Tokenizer,
    decide,
    draft_view,
    extension_due,
    marks,
    message_chars,
    ready_in_time,
    usable_prepared,
)
from ctxledger.domain.commands import (
    NO_OUTCOME,
    AppendMessages,
    Configure,
    ReportUsage,
    execute,
    overflow_message,
    reactive_attempt,
)
from ctxledger.domain.commands import Command as DomainCommand
from ctxledger.domain.step import Step, decide_step
from ctxledger.errors import (
    ContextOverflowError,
    CtxLedgerError,
    HostClosedError,
    LeaseLostError,
    VersionConflictError,
)
from ctxledger.events import CompactionFailed, Event, MessageAppended, ViewServed
from ctxledger.replay.loading import snapshot_due
from ctxledger.runtime.failures import (
    hand_to,
    internal,
    log_failure,
    refused,
    stranded_commands,
)
from ctxledger.runtime.leases import LeaseKeeper, LeaseLost
from ctxledger.runtime.live import Live, Op, Write, fail, fail_work
from ctxledger.runtime.messages import (
    BackgroundEnded,
    Command,
    Decide,
    DecideStep,
    Durable,
    Evict,
    Execute,
    Load,
    Loaded,
    Open,
    Prepare,
    Pressure,
    Read,
    SaveSnapshot,
    Settle,
    SummaryDone,
    SummaryTimeout,
    answer_query,
)
from ctxledger.runtime.recordable import check_recordable
from ctxledger.runtime.waiters import LoopWaiter, Reply
from ctxledger.storage import EventLog, LeaseStore, RecordedEvent

__all__ = ["HistoryActor", "HistoryActorProxy", "Runtime", "overflow_message"]

_log = get_logger(__name__)
#: Commands after which the session's token pressure is looked at (they add to the estimate).
_PRESSURE = frozenset({AppendMessages, ReportUsage, Configure})


@dataclass(slots=True)
class Runtime:
    """What the history actors of one host share.

    Attributes:
        log: The event log.
        tokenizer: Counts tokens for the decisions.
        new_id: Returns fresh compaction and checkpoint ids.
        clock: Returns the unix time recorded on checkpoints and new sessions.
        compaction: Runs summarisers (:class:`~ctxledger.runtime.compaction.CompactionPool`).
        projection: Loads sessions and stores snapshots
            (:class:`~ctxledger.runtime.projection.ProjectionPool`).
        budget: The budget actor's ref.
        timer: Deadlines (:class:`~ctxledger.runtime.timer.Timer`).
        summarizer_name: Who writes the summaries, recorded with each (``describe_summarizer``).
        recovered: Sessions already recovered by this host (shared by its history actors).
        leases: On a log shared by several hosts, the host's leases
            (:class:`~ctxledger.runtime.leases.LeaseKeeper`); None otherwise.
        max_live: Session states the host keeps in memory (``max_active_sessions``).
        live_counts: Session states each history actor holds, by actor number; each actor
            writes only its own entry, and all read the sum to enforce ``max_live`` host-wide.
        history: The history actors' refs, by number (set once they are started).
        restart: Called by a history actor that dies with its number and ref: starts and
            returns its successor, or None once the host is closed.
        closed: Whether the host is closed (no actor is restarted any more).
    """

    log: EventLog
    tokenizer: Tokenizer
    new_id: Callable[[], str]
    clock: Callable[[], float]
    compaction: Any
    projection: Any
    budget: Any
    timer: Any
    summarizer_name: str = ""
    recovered: set[str] = field(default_factory=set)
    leases: LeaseKeeper | None = None
    max_live: int = 1024
    live_counts: list[int] = field(default_factory=list)
    history: list[Any] = field(default_factory=list)
    restart: Callable[[int, Any], Any] = field(default=lambda _number, _ref: None)
    closed: Callable[[], bool] = field(default=lambda: False)


class _SimpleQueue(pykka.ThreadingActor):
    """A pykka actor whose inbox is a ``queue.SimpleQueue`` (lock-free put, C implementation)."""

    use_daemon_thread = True  # never keeps the interpreter alive (see runtime.lifecycle)

    @staticmethod
    def _create_actor_inbox() -> Any:
        import queue

        return queue.SimpleQueue()


class HistoryActor(_SimpleQueue):
    """Owns a share of a host's sessions; see the module docstring.

    Args:
        runtime: What the host's history actors share. While the host holds more than
            ``runtime.max_live`` session states in all, an actor evicts its own least recently
            used idle ones (re-activated from snapshot and tail when needed).
        number: This actor's number (sessions are routed to it by their id).
    """

    def __init__(self, runtime: Runtime, number: int) -> None:
        super().__init__()
        self._rt = runtime
        self._number = number
        # The outcome of each reactive attempt used since a session's last append or usage
        # report (an attempt is used once it starts); kept apart from the session states so that
        # an eviction does not give a session its attempts back.
        self._reactive: dict[str, list[str]] = {}
        self._lives: OrderedDict[str, Live] = OrderedDict()  # least recently used first
        self._tokens = 0
        self._handlers: dict[type, Callable[[Any], None]] = {
            Execute: self._on_command,
            Decide: self._on_command,
            DecideStep: self._on_command,
            Read: self._on_command,
            Settle: self._on_command,
            Open: self._on_command,
            Durable: self._on_durable,
            Loaded: self._on_loaded,
            SummaryDone: self._on_summary,
            SummaryTimeout: self._on_timeout,
            Prepare: self._on_prepare,
            LeaseLost: self._on_lease_lost,
            Evict: self._on_evict,
        }

    # --- pykka and supervision -------------------------------------------------------------------

    def _handle_receive(self, message: Any) -> Any:
        # The runtime's own messages first, ahead of pykka's checks for its proxy messages.
        handler = self._handlers.get(type(message))
        if handler is None:
            return super()._handle_receive(message)
        try:
            handler(message)
        except Exception as exc:  # a defect: it fails the request(s) involved, never the actor
            self._contain(message, exc)
        return None

    def _contain(self, message: Any, exc: Exception) -> None:
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
        op = live.op
        for job in (live.background, op.job if op is not None else None):
            if job is not None:  # nobody waits for its summary any more: free its worker
                self._rt.compaction.abandon(job.compaction_id)
        self._forget(live, error, queued=False)
        live.state = None
        if live.writing is None:
            self._reload(live)

    def _reload(self, live: Live) -> None:
        rt = self._rt
        if live.lease is not None and rt.leases is not None:
            rt.leases.release(live.lease)  # taken again by the load, as after an eviction
            live.lease = None
        _log.warning("session_restarted", session_id=live.id, actor=self._number)
        rt.projection.load(Load(live.id, None, self.actor_ref))

    def _forget(self, live: Live, error: BaseException, *, queued: bool) -> None:
        """Fail the callers waiting on the work of ``live`` and stop its background work."""
        op, rt = live.op, self._rt
        for handle in (live.background_timer, op.job_timer if op is not None else None):
            if handle is not None:
                rt.timer.cancel(handle)
        if live.background is not None or live.pressure_sent or live.prepare_pending:
            rt.budget.tell(BackgroundEnded(live.id))  # budget counts it as running until then
        fail_work(live, error, queued=queued)
        live.background = live.background_timer = None
        live.pressure_sent = False
        live.bound = None

    def on_stop(self) -> None:
        """Fail every caller still waiting: the host is closing (or, outside ``close()``, the
        actor was stopped; the host starts a fresh one on the next command)."""
        self._hand_over(None)

    def on_failure(self, *exc_info: Any) -> None:
        """The actor dies after all (a defect in the code above): log it, fail the requests in
        progress, and hand the queued ones to a fresh actor, which reloads their sessions."""
        exc = exc_info[1] if len(exc_info) > 1 else None
        if isinstance(exc, BaseException):
            log_failure("history_actor_failed", exc, actor=self._number)
        self._rt.restart(self._number, self.actor_ref)
        self._hand_over(internal(f"history actor {self._number} failed: {exc!r}", exc))

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

    def _actor_loop_teardown(self) -> None:
        # pykka drops what is left in a stopped actor's inbox; a caller waits on each command.
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

    # --- commands --------------------------------------------------------------------------------

    def _on_command(self, command: Command) -> None:
        live = self._lives.get(command.session_id)
        if live is None:
            live = self._lives[command.session_id] = Live(command.session_id)
            open_config = command.create_config if isinstance(command, Open) else None
            self._rt.projection.load(Load(command.session_id, open_config, self.actor_ref))
        else:
            self._lives.move_to_end(command.session_id)
        live.queue.append(command)
        self._pump(live)

    def _pump(self, live: Live) -> None:
        """Start the queued commands of ``live`` while nothing is in progress."""
        while live.state is not None and live.op is None and live.writing is None and live.queue:
            command = live.queue.popleft()
            try:
                self._start(live, command)
            except Exception as exc:  # the caller's bad input (validation) fails only the caller
                if live.op is not None and live.op.command is command:
                    live.op = None
                if not isinstance(exc, CtxLedgerError):
                    log_failure("request_failed", exc, actor=self._number, session_id=live.id)
                    exc = internal(f"session {live.id!r}: {type(command).__name__}: {exc!r}", exc)
                fail(command.reply, exc)
        if live.op is None and live.writing is None and live.prepare_pending:
            live.prepare_pending = False
            self._prepare(live)
        if live.settle_replies and self._settled(live):
            replies, live.settle_replies = live.settle_replies, []
            for reply in replies:
                reply.resolve(None)
        self._evict()

    def _start(self, live: Live, command: Command) -> None:
        state = live.state
        assert state is not None
        kind = type(command)
        if kind is Execute:
            assert isinstance(command, Execute)
            self._execute(live, command.reply, command.command)
        elif kind is DecideStep:
            assert isinstance(command, DecideStep)
            self._step(live, command)
        elif kind is Decide:
            assert isinstance(command, Decide)
            op = live.op = Op(command, command.request)
            if command.reactive:
                tried = self._reactive.setdefault(live.id, [])
                op.attempt = len(tried)
                self._attempt(live, op, tried)
                return
            self._decide(live, op)
        elif kind is Read:
            assert isinstance(command, Read)
            command.reply.resolve(answer_query(command.query, state, live.last_event_seq))
        elif kind is Settle:
            if self._settled(live):
                command.reply.resolve(None)
            else:
                live.settle_replies.append(command.reply)
        elif kind is Open:
            assert isinstance(command, Open)
            configure = Configure(config=command.config, system=command.system)
            self._execute(live, command.reply, configure)

    def _execute(self, live: Live, reply: Reply, command: DomainCommand) -> None:
        """Decide a command that records without compacting
        (:func:`ctxledger.domain.commands.execute`); a refusal raises here, before anything is
        written, and fails only the caller."""
        state = live.state
        assert state is not None
        outcome = execute(state, command)
        if command.fresh:
            self._reactive.pop(live.id, None)
        if not outcome.events:
            reply.resolve(outcome.answer)
            return
        self._write(
            live,
            outcome.events,
            reply=reply,
            value=outcome.answer,
            pressure=type(command) in _PRESSURE,
        )

    def _step(self, live: Live, command: DecideStep) -> None:
        """Append a step's messages and serve the next view
        (:func:`ctxledger.domain.step.decide_step`): one batch, unless a summary is needed or a
        background one awaited; then the appends go first (durable before a summariser runs)
        and the decision is carried out as ``prepare_step``'s. A refused message raises here,
        before anything is folded."""
        state = live.state
        assert state is not None and isinstance(command.request, Serve)
        rt = self._rt
        step = Step(messages=command.messages, pending=command.request.pending)
        op = live.op = Op(command, command.request)
        applied = state.events_applied
        try:
            stepped = decide_step(
                state, step, tokenizer=rt.tokenizer, new_id=rt.new_id, now=rt.clock
            )
        except Exception as exc:
            if state.events_applied != applied:  # folded ahead of the log: start over from it
                live.op = None
                self._restart(live, internal(f"session {live.id!r}: step: {exc!r}", exc))
            raise
        if step.fresh:
            self._reactive.pop(live.id, None)
        appended, decision = stepped.appended.events, stepped.decision
        folded = len(appended)  # not to be folded again (see _on_durable)
        if decision.job is not None or decision.wait_for is not None:
            if appended:
                self._write(live, appended, op=op, pressure=True, folded=folded)
            self._carry_out(live, op, decision)
            return
        events = (*appended, *decision.events)
        error = decision.error
        if error is not None:  # refused to serve (budget, overflow): the appends stay, as usual

            def refused(_records: Any, write_error: BaseException | None) -> None:
                live.op = None
                command.reply.resolve(None, write_error or error)

            self._write(live, events, on_done=refused, pressure=True, op=op, folded=folded)
            return
        op.handed_off = True
        self._write(
            live,
            events,
            reply=command.reply,
            value=decision.view,
            on_done=self._op_done(live),
            pressure=True,
            op=op,
            folded=folded,
        )

    # --- the decision step -----------------------------------------------------------------------

    def _decide(self, live: Live, op: Op) -> None:
        state = live.state
        assert state is not None and op.request is not None
        rt = self._rt
        decision = decide(state, op.request, tokenizer=rt.tokenizer, new_id=rt.new_id, now=rt.clock)
        self._carry_out(live, op, decision)

    def _carry_out(self, live: Live, op: Op, decision: Decision) -> None:
        if decision.wait_for is not None:
            running = live.background
            if running is None or running.compaction_id != decision.wait_for:
                # Recorded as running, but no summariser runs it here: it cannot finish.
                self._write(live, [_abandoned(decision.wait_for)], op=op,
                            on_done=lambda _r, _e: self._decide_again(live, op))  # fmt: skip
                return
            op.waiting_for = decision.wait_for
            op.wait_started = time.monotonic()
            return
        job = decision.job
        if job is not None:
            op.job = job
            self._write(
                live, decision.events, on_done=lambda _r, _e: self._run_job(live, op, job), op=op
            )
            return
        if decision.error is not None:
            self._fail(live, op, decision)
            return
        result = decision.result
        if result is not None and op.waited:
            result = msgspec.structs.replace(result, waited_seconds=op.waited)
        command = op.command
        assert isinstance(command, Decide)
        if command.reactive:
            tried = self._reactive.get(live.id)
            if tried:
                tried[-1] = result.reason if result is not None else NO_OUTCOME
            if result is None or not result.compacted:
                self._next_attempt(live, op)
                return
        value: ModelView | CompactionResult | None = (
            decision.view if isinstance(command.request, Serve) and command.request.view else result
        )
        if decision.view is not None:
            _log.debug(
                "view_served",
                session_id=live.id,
                seq=decision.view.through_seq,
                tokens=decision.view.estimated_tokens,
            )
        if decision.events:
            op.handed_off = True
            self._write(
                live,
                decision.events,
                reply=command.reply,
                value=value,
                on_done=self._op_done(live),
                op=op,
            )
        else:
            live.op = None
            command.reply.resolve(value)

    def _decide_again(self, live: Live, op: Op) -> None:
        if live.op is op:  # not failed meanwhile
            self._decide(live, op)

    def _fail(self, live: Live, op: Op, decision: Decision) -> None:
        """Record the decision's events (if any), then answer the command with its error."""
        error = decision.error
        reply = op.command.reply

        def done(_records: Any, write_error: Any) -> None:
            live.op = None
            reply.resolve(None, write_error or error)

        if decision.events:
            self._write(live, decision.events, on_done=done, op=op)
        else:
            done(None, None)

    def _op_done(self, live: Live) -> Callable[[Any, Any], None]:
        def done(_records: Any, _error: Any) -> None:
            live.op = None

        return done

    def _next_attempt(self, live: Live, op: Op) -> None:
        op.attempt += 1
        op.job = None
        self._attempt(live, op, self._reactive.setdefault(live.id, []))

    def _attempt(self, live: Live, op: Op, tried: list[str]) -> None:
        """Start the next reactive attempt
        (:func:`ctxledger.domain.commands.reactive_attempt`), or answer the overflow error once
        the attempts are spent."""
        state = live.state
        assert state is not None
        try:
            request = reactive_attempt(state, tried)
        except ContextOverflowError as exc:
            live.op = None
            op.command.reply.resolve(None, exc)
            return
        tried.append(NO_OUTCOME)
        op.request = request
        self._decide(live, op)

    def _run_job(self, live: Live, op: Op | None, job: Job) -> None:
        """The job's ``CompactionStarted`` is durable: hand the plan to the compaction pool."""
        state = live.state
        assert state is not None
        if op is not None:
            if live.op is not op:
                return  # the command failed meanwhile
            op.job_started = time.monotonic()
        loop = None
        if op is not None and isinstance(op.command.reply, LoopWaiter):
            loop = op.command.reply.loop
        timeout = state.config.summary_timeout
        handle = self._rt.timer.call_later(
            timeout, _teller(self.actor_ref, SummaryTimeout(live.id, job))
        )
        if op is not None:
            op.job_timer = handle
        else:
            live.background_timer = handle
        plan = job.plan
        _log.info(
            "compaction_started",
            session_id=live.id,
            compaction_id=job.compaction_id,
            reason=plan.reason,
            background=job.background,
            retain_from_seq=plan.retain_from_seq,
            messages=len(plan.messages),
        )
        self._rt.compaction.run(live.id, job, self.actor_ref, loop)

    def _on_summary(self, message: SummaryDone) -> None:
        live = self._lives.get(message.session_id)
        if live is None:
            return
        self._summarized(live, message.job, message.summary, message.detail, message.seconds)

    def _on_timeout(self, message: SummaryTimeout) -> None:
        live = self._lives.get(message.session_id)
        if live is None:
            return
        job = message.job
        state = live.state
        if state is None or self._current_job(live, job) is None:
            return
        self._rt.compaction.abandon(job.compaction_id)
        timeout = state.config.summary_timeout
        self._summarized(live, job, None, f"summarizer timed out after {timeout}s", timeout)

    def _current_job(self, live: Live, job: Job) -> Op | bool | None:
        if live.background is not None and live.background.compaction_id == job.compaction_id:
            return True
        op = live.op
        if op is not None and op.job is not None and op.job.compaction_id == job.compaction_id:
            return op
        return None

    def _summarized(
        self, live: Live, job: Job, summary: str | None, detail: str, seconds: float
    ) -> None:
        owner = self._current_job(live, job)
        if owner is None:
            return  # a late answer to a job that timed out or was abandoned
        if summary:
            _log.info(
                "compaction_finished",
                session_id=live.id,
                compaction_id=job.compaction_id,
                background=job.background,
                chars=len(summary),
            )
        else:
            _log.warning(
                "compaction_failed",
                session_id=live.id,
                compaction_id=job.compaction_id,
                background=job.background,
                detail=detail,
            )
        rt = self._rt
        state = live.state
        assert state is not None
        if owner is True:
            if live.background_timer is not None:
                rt.timer.cancel(live.background_timer)
                live.background_timer = None
            request = Summarized(
                job=job,
                summary=summary,
                detail=detail,
                summarizer=rt.summarizer_name,
                seconds=seconds,
            )
            decision = decide(
                state, request, tokenizer=rt.tokenizer, new_id=rt.new_id, now=rt.clock
            )
            self._write(live, decision.events, on_done=lambda _r, _e: self._background_ended(live))
            return
        assert isinstance(owner, Op)
        op = owner
        if op.job_timer is not None:
            rt.timer.cancel(op.job_timer)
            op.job_timer = None
        op.waited += time.monotonic() - op.job_started
        op.job = None
        request = Summarized(
            job=job,
            summary=summary,
            detail=detail,
            waited_seconds=op.waited,
            summarizer=rt.summarizer_name,
            seconds=seconds,
        )
        decision = decide(state, request, tokenizer=rt.tokenizer, new_id=rt.new_id, now=rt.clock)
        self._carry_out(live, op, decision)

    # --- background compaction -------------------------------------------------------------------

    def _pressure(self, live: Live, appended: Sequence[Event]) -> None:
        """After an append or usage report: tell budget if a summary should be prepared now.

        The exact estimate (a whole view) is computed only when it may have crossed: after one,
        appended messages raise an upper bound of it by their size (masking and truncation only
        ever shrink what a message adds), so most appends cost nothing here.
        """
        state = live.state
        assert state is not None
        in_force = marks(state)
        if (
            not in_force.prepare
            or live.pressure_sent
            or live.background is not None
            or state.background is not None
            or state.last_seq < 3
            or state.last_seq < max(state.background_retry_seq, live.quiet_until)
        ):
            return
        tokenizer = self._rt.tokenizer
        if live.bound is not None and appended and type(tokenizer) is CharTokenizer:
            added = sum(message_chars(event.message) for event in appended if _has_message(event))
            live.bound += added // tokenizer.chars_per_token + len(appended)
        else:
            live.bound = None  # a usage report, or a tokenizer whose counts cannot be bounded
        threshold = in_force.threshold
        if live.bound is not None and live.bound < in_force.prepare:
            return
        estimate = draft_view(state, tokenizer=tokenizer).estimated_tokens
        live.bound = estimate
        if estimate < in_force.prepare:
            return
        prepared = usable_prepared(state)
        active = state.active_checkpoint
        if prepared is None and active is not None:
            if live.late_for == active.id:
                return  # judged too late for this checkpoint's cycle: the threshold compacts
            grown = estimate - active.tokens_after
            seconds = self._rt.clock() - active.created_at
            if not ready_in_time(threshold - estimate, grown, seconds, active.summary_seconds):
                live.late_for = active.id
                return
        if prepared is not None:
            # Whether it will absorb the growth changes slowly as messages come (both views
            # grow alike but for masking, which shrinks only the view now): look again each
            # time the view grew by a quarter of the room between the prepare point and the
            # threshold since the last look.
            step = max(1, (threshold - in_force.prepare) // 4)
            checked = live.absorbing
            if (
                checked is not None
                and checked[0] == prepared.compaction_id
                and estimate < checked[1] + step
            ):
                return
            if not extension_due(state, tokenizer, estimate):
                live.absorbing = (prepared.compaction_id, estimate)
                return
        live.pressure_sent = True
        self._rt.budget.tell(Pressure(live.id, estimate / threshold, self.actor_ref))

    def _on_prepare(self, message: Prepare) -> None:
        live = self._lives.get(message.session_id)
        if live is None or live.state is None:
            self._rt.budget.tell(BackgroundEnded(message.session_id))
            return
        if live.op is not None or live.writing is not None:
            live.prepare_pending = True  # after the command in progress
            return
        self._prepare(live)
        self._pump(live)

    def _prepare(self, live: Live) -> None:
        state = live.state
        assert state is not None
        rt = self._rt
        decision = decide(
            state, Background(), tokenizer=rt.tokenizer, new_id=rt.new_id, now=rt.clock
        )
        job = decision.job
        if job is None:
            # Nothing to prepare after all (no cut makes progress yet): look again later.
            live.quiet_until = state.last_seq + BACKGROUND_BACKOFF
            self._background_ended(live)
            return
        live.background = job
        self._write(
            live,
            decision.events,
            on_done=lambda _r, error: self._background_started(live, job, error),
        )

    def _background_started(self, live: Live, job: Job, error: BaseException | None) -> None:
        if error is not None:
            live.background = None
            self._background_ended(live)
            return
        self._run_job(live, None, job)

    def _settled(self, live: Live) -> bool:
        return (
            live.background is None
            and not live.pressure_sent
            and not live.prepare_pending
            and live.writing is None
        )

    def _background_ended(self, live: Live) -> None:
        live.background = None
        live.pressure_sent = False
        self._rt.budget.tell(BackgroundEnded(live.id))
        op = live.op
        state = live.state
        assert state is not None
        if op is not None and op.waiting_for is not None and state.background is None:
            # The caller waited for this summary: decide again, now that its outcome is folded.
            op.waited += time.monotonic() - op.wait_started
            op.waiting_for = None
            self._decide(live, op)

    # --- writes ----------------------------------------------------------------------------------

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
        """Hand ``events`` to the journal (after the session's batch in flight, if any).

        ``folded``: how many of the first ``events`` the state has folded already (a step's
        appends); if the batch fails, the state is ahead of the log and is loaded again.
        """
        self._tokens += 1
        if pressure:
            inner = on_done

            def with_pressure(records: Any, error: Any) -> None:
                if inner is not None:
                    inner(records, error)
                if error is None:
                    appended = [e for e in events if type(e) is MessageAppended]
                    self._pressure(live, appended)

            on_done = with_pressure
        write = Write(self._tokens, events, on_done, reply, value, op)
        write.folded = folded
        if live.writing is not None:
            live.pending_writes.append(write)
            return
        self._submit(live, write)

    def _submit(self, live: Live, write: Write) -> None:
        live.writing = write
        if write.snapshot is not None:
            seq, data = write.snapshot
            interval = live.state.config.snapshot_interval if live.state is not None else 1
            self._rt.projection.save(
                SaveSnapshot(live.id, seq, data, self.actor_ref, write.token, interval)
            )
            return
        if not write.events:
            self._on_durable(Durable(live.id, write.token, [], None))
            return
        me = self.actor_ref
        session_id, token, reply, value = live.id, write.token, write.reply, write.value

        def committed(records: list[RecordedEvent] | None, error: BaseException | None) -> None:
            # On the journal thread. The caller is answered first: its next request waits
            # behind this batch anyway (the session is writing until Durable is handled).
            if reply is not None:
                reply.resolve(value if error is None else None, error)
            with contextlib.suppress(pykka.ActorDeadError):
                me.tell(Durable(session_id, token, records, error))

        log = self._rt.log
        try:
            check_recordable(write.events)
            if live.lease is not None:
                cast(LeaseStore, log).submit(
                    live.id,
                    write.events,
                    expected_seq=live.last_event_seq,
                    callback=committed,
                    fence=live.lease,
                )
            else:
                log.submit(
                    live.id, write.events, expected_seq=live.last_event_seq, callback=committed
                )
        except Exception as exc:  # refused before queueing: the batch fails as a failed commit
            committed(None, refused(exc))

    def _on_durable(self, message: Durable) -> None:
        live = self._lives.get(message.session_id)
        if live is None or live.writing is None or live.writing.token != message.token:
            return
        write = live.writing
        live.writing = None
        state = live.state
        if state is None:  # restarting: the old state's last batch is in, load the new one
            self._reload(live)
            return
        if isinstance(message.error, LeaseLostError) and live.lease is not None:
            self._drop(live, message.error)  # another host serves the session now
            return
        if isinstance(message.error, VersionConflictError):
            # The log moved on without this state (say, a batch of an actor that died): the
            # request fails and the session starts over from the log.
            self._restart(live, message.error)
            return
        if message.error is not None and write.folded:
            # The state folded a step's appends that are not in the log: start over from it.
            self._restart(live, message.error)
            return
        records = message.records
        if message.error is None and records:
            apply = state.apply
            for record in records[write.folded :] if write.folded else records:
                event = record.event
                apply(event)
                if type(event) is not MessageAppended and type(event) is not ViewServed:
                    live.bound = None  # it may change the estimate in any direction
            previous, live.last_event_seq = live.last_event_seq, records[-1].seq
            if snapshot_due(previous, live.last_event_seq, state.config.snapshot_interval):
                # Taken after the fold, so snapshot + tail replays to exactly this state.
                self._tokens += 1
                snapshot = Write(self._tokens, (), None, None, None, None)
                try:
                    snapshot.snapshot = (live.last_event_seq, state.to_snapshot())
                    live.pending_writes.appendleft(snapshot)
                except Exception as exc:  # an optimisation: its loss costs a longer fold
                    log_failure("snapshot_not_taken", exc, session_id=live.id)
        if message.error is not None and write.op is not None and write.op is live.op:
            # A batch of a command in progress failed: the command fails with it.
            op, live.op = live.op, None
            if not op.handed_off:
                fail(op.command.reply, message.error)
        if write.on_done is not None:
            write.on_done(records, message.error)
        if live.pending_writes and live.writing is None:
            self._submit(live, live.pending_writes.popleft())
            return
        self._pump(live)

    # --- activation and eviction -----------------------------------------------------------------

    def _on_loaded(self, message: Loaded) -> None:
        live = self._lives.get(message.session_id)
        rt = self._rt
        lease = message.lease
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
            previous = rt.leases.hold(lease, self.actor_ref)
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

    def _on_evict(self, message: Evict) -> None:
        self._evict(ask_others=False)

    def _evict(self, *, ask_others: bool = True) -> None:
        """While the host holds more than ``max_live`` states, drop this actor's least recently
        used idle ones (their log stays); one pass at most over the states in use. If that is
        not enough, the other history actors are asked to evict theirs (``Evict``)."""
        rt = self._rt
        lives = self._lives
        counts = rt.live_counts
        counts[self._number] = len(lives)
        excess = sum(counts) - rt.max_live
        busy = 0
        while excess > 0 and lives and busy < len(lives):
            session_id = next(iter(lives))
            live = lives[session_id]
            if live.idle:
                del lives[session_id]
                excess -= 1
                if live.lease is not None and rt.leases is not None:
                    rt.leases.release(live.lease)  # another host may take it at once
            else:
                lives.move_to_end(session_id)  # in use: look at it again later
                busy += 1
        counts[self._number] = len(lives)
        if excess > 0 and ask_others:
            for number, ref in enumerate(rt.history):
                if number != self._number and counts[number]:
                    ref.tell(Evict())


class HistoryActorProxy(ActorMemberMixin, pykka.ActorProxy[HistoryActor]):
    """The typed proxy of a :class:`HistoryActor` (the few calls made by ask, not by message)."""

    live_sessions = proxy_method(HistoryActor.live_sessions)


def _has_message(event: Event) -> TypeGuard[MessageAppended]:
    return type(event) is MessageAppended


def _abandoned(compaction_id: str) -> CompactionFailed:
    return CompactionFailed(
        compaction_id=compaction_id,
        reason="interrupted",
        detail="no summariser is running for this background compaction",
        background=True,
    )


def _teller(ref: pykka.ActorRef[Any], message: Any) -> Callable[[], None]:
    def tell() -> None:
        with contextlib.suppress(pykka.ActorDeadError):
            ref.tell(message)

    return tell
