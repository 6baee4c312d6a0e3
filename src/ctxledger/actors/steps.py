"""The history actor's decision step: serve, compact, the reactive retries, the summaries.

A ``Decide`` command runs :func:`ctxledger.domain.decide` on the session's state, the same
function :class:`ctxledger.testing.DomainSession` and what-if call (a ``DecideStep``, an agent's
step, runs :func:`ctxledger.domain.step.decide_step`: its appends and the serve decision in one
batch), and carries the decision out:
record its events, hand a job to the compaction pool and decide again with its summary, wait for
a background compaction that is running, retry a reactive compaction harder until one compacts
or the attempts are spent (:func:`ctxledger.domain.commands.reactive_attempt`), or fail the
command with the decision's error (after recording its events).

A background summary's outcome (``SummaryPrepared``) that finds the session with no batch in the
journal is folded at once and held for the session's next batch, as a deferred served view is
(``Live.held``, see :mod:`ctxledger.actors.writes`): the log holds the same events in the same
order, and a session being appended to does not wait for a commit of its own for it. The host's
timer records it alone after :data:`HELD_FLUSH_SECONDS` if no batch came (``FlushHeld``), and
``wait_background`` answers once it is recorded.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import msgspec
import pykka

from ctxledger._logging import get_logger
from ctxledger.actors.failures import internal
from ctxledger.actors.history_base import HistoryBase
from ctxledger.actors.live import Live, Op
from ctxledger.actors.messages import Decide, DecideStep, FlushHeld, SummaryDone
from ctxledger.actors.waiters import LoopWaiter
from ctxledger.domain import CompactionResult, Decision, Job, ModelView, Serve, Summarized, decide
from ctxledger.domain.commands import NO_OUTCOME, reactive_attempt
from ctxledger.domain.step import Step, decide_step
from ctxledger.errors import ContextOverflowError
from ctxledger.events import CompactionFailed, Event, SummaryPrepared, ViewServed

__all__ = ["HELD_FLUSH_SECONDS", "DecisionSteps"]

#: How long a background summary's outcome may wait, folded, for the session's next batch
#: before it is recorded alone (see the module docstring).
HELD_FLUSH_SECONDS = 0.05

_log = get_logger(__name__)


class DecisionSteps(HistoryBase):
    """The decision step of the history actor (see the module docstring)."""

    def _step(self, live: Live, command: DecideStep) -> None:
        """Append a step's messages and serve the next view
        (:func:`ctxledger.domain.step.decide_step`): one batch, unless a summary is needed or a
        background one awaited; then the appends go first (durable before a summariser runs)
        and the decision is carried out as ``prepare_step``'s. A refused message raises here,
        before anything is folded."""
        state = live.state
        assert state is not None and isinstance(command.request, Serve)
        rt = self._rt
        step = Step(messages=command.messages, pending=command.request.pending, usage=command.usage)
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
        folded = len(appended)  # not to be folded again (see actors.writes)
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
            self._rt.compaction.hurry(decision.wait_for)  # not after a worker process's start
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
        if command.defer_record and _holds(live, decision.events):
            self._hold(live, decision.events)
            live.op = None
            command.reply.resolve(value)
        elif decision.events:
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

    def _hold(self, live: Live, events: tuple[Event, ...]) -> None:
        """Fold ``events`` (served views, a background summary's outcome) now and hold them
        back for the session's next batch (:meth:`_write` puts them first, after those held
        already); see :mod:`ctxledger.actors.writes`."""
        state = live.state
        assert state is not None
        for event in events:
            state.apply(event)
        live.held = (*live.held, *events)

    def _flush_later(self, live: Live) -> Callable[[], None]:
        """The timer's callback that has this actor record what ``live`` still holds. Nothing
        is told once a batch took it (the usual case while the session is busy): the message
        would wait for the session's command in progress, and the next command for it."""
        me, session_id = self._me, live.id

        def flush() -> None:
            if not live.held:  # read on the timer's thread: a stale answer costs one message
                return
            # Stopped: it recorded what every session held first (HistoryActor.on_stop).
            with contextlib.suppress(pykka.ActorDeadError):
                me.tell(FlushHeld(session_id))

        return flush

    def _on_flush_held(self, message: FlushHeld) -> None:
        live = self._lives.get(message.session_id)
        if live is not None:
            self._flush_held(live)

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
        """The job's ``CompactionStarted`` is durable: hand it to the compaction pool, which
        answers ``SummaryDone`` once (the summary, a failure or its timeout)."""
        state = live.state
        assert state is not None
        loop = None
        if op is not None:
            if live.op is not op:
                return  # the command failed meanwhile
            op.job_started = time.monotonic()
            if isinstance(op.command.reply, LoopWaiter):
                loop = op.command.reply.loop
        active = state.active_checkpoint
        served = state.last_view_seq >= (active.retain_from_seq if active is not None else 1)
        rt = self._rt
        timeout = state.config.summary_timeout
        rt.compaction.run(live.id, job, self._me, loop, timeout, served=served)
        if live.settle_replies:  # wait_background waits for it
            rt.compaction.hurry(job.compaction_id)

    def _on_summary(self, message: SummaryDone) -> None:
        live = self._lives.get(message.session_id)
        if live is None or live.state is None:
            return
        owner = self._current_job(live, message.job)
        if owner is None:
            return  # a late answer to a job that was abandoned
        rt, state = self._rt, live.state
        request = Summarized(
            job=message.job,
            summary=message.summary,
            detail=message.detail,
            summarizer=rt.summarizer_name,
            seconds=message.seconds,
        )
        if owner is True:
            decision = decide(
                state, request, tokenizer=rt.tokenizer, new_id=rt.new_id, now=rt.clock
            )
            if _holds_outcome(live, decision.events):
                self._hold(live, decision.events)
                rt.timer.call_later(HELD_FLUSH_SECONDS, self._flush_later(live))
                self._background_ended(live)
                self._pump(live)  # a wait_background may be answered now (once it is recorded)
                return
            self._write(live, decision.events, on_done=lambda _r, _e: self._background_ended(live))
            return
        assert isinstance(owner, Op)
        op = owner
        op.waited += time.monotonic() - op.job_started
        op.job = None
        request = msgspec.structs.replace(request, waited_seconds=op.waited)
        decision = decide(state, request, tokenizer=rt.tokenizer, new_id=rt.new_id, now=rt.clock)
        self._carry_out(live, op, decision)

    def _current_job(self, live: Live, job: Job) -> Op | bool | None:
        if live.background is not None and live.background.compaction_id == job.compaction_id:
            return True
        op = live.op
        if op is not None and op.job is not None and op.job.compaction_id == job.compaction_id:
            return op
        return None


def _writes_idle(live: Live) -> bool:
    """Whether the session has no batch in the journal or waiting for it: only then may events
    be held for its next batch."""
    return live.writing is None and not live.pending_writes


def _holds(live: Live, events: tuple[Event, ...]) -> bool:
    """Whether the served view ``events`` may be held back: they are served views alone (no
    compaction), the session's writes are idle (:func:`_writes_idle`) and it holds no views."""
    return (
        bool(events)
        and _writes_idle(live)
        and not live.held
        and all(type(event) is ViewServed for event in events)
    )


def _holds_outcome(live: Live, events: tuple[Event, ...]) -> bool:
    """Whether a background summary's outcome ``events`` may be held back: a prepared summary
    alone, and the session's writes are idle (:func:`_writes_idle`)."""
    return len(events) == 1 and type(events[0]) is SummaryPrepared and _writes_idle(live)


def _abandoned(compaction_id: str) -> CompactionFailed:
    return CompactionFailed(
        compaction_id=compaction_id,
        reason="interrupted",
        detail="no summariser is running for this background compaction",
        background=True,
    )
