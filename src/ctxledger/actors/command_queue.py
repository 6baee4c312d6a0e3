"""The history actor's command queue: each session's commands, one at a time.

A session's commands wait in its queue (``Live.queue``) while one is in progress (``Live.op``),
its batch is in the journal (``Live.writing``) or its state is being loaded; :meth:`_pump`
starts them in order as soon as nothing is in progress. Commands that record without compacting
(:class:`~ctxledger.actors.messages.Execute`: append, pin, usage, Config changes...) are decided
by :func:`ctxledger.domain.commands.execute` and written at once; a step, a view or a compaction
by the decision step (:mod:`~ctxledger.actors.steps`).
"""

from __future__ import annotations

from typing import cast

from ctxledger.actors.failures import internal, log_failure
from ctxledger.actors.history_base import HistoryBase
from ctxledger.actors.live import Live, Op, fail
from ctxledger.actors.messages import (
    Command,
    Decide,
    DecideStep,
    Execute,
    Fork,
    HistoryMessage,
    Load,
    Open,
    Read,
    Settle,
    Settling,
    answer_query,
)
from ctxledger.actors.waiters import Reply
from ctxledger.domain import background_on
from ctxledger.domain.commands import AppendMessages, Configure, ReportUsage, execute
from ctxledger.domain.commands import Command as DomainCommand
from ctxledger.errors import CtxLedgerError, SessionExistsError

__all__ = ["CommandQueue"]

#: Commands after which the session's token pressure is looked at (they add to the estimate).
_PRESSURE = frozenset({AppendMessages, ReportUsage, Configure})


class CommandQueue(HistoryBase):
    """The command queue of the history actor (see the module docstring)."""

    def _run_command(self, command: Command) -> None:
        """Carry out a caller's ``command`` in the actor's place, its lock held (see
        :mod:`ctxledger.actors.inline`).

        A recording command (``Execute``: an append, a pin, usage...) of a session that is
        loaded, with nothing in progress and nothing queued, goes straight to its decision:
        what :meth:`_on_command` and :meth:`_pump` would do with it, without the queue (about
        ten calls fewer on an append's path). Any other command is handled as the actor's
        thread handles it.
        """
        live = self._lives.get(command.session_id)
        if (
            type(command) is not Execute
            or live is None
            or live.state is None
            or live.op is not None
            or live.writing is not None
            or live.queue
        ):
            self._handle(cast("HistoryMessage", command))  # one of the union's commands
            return
        try:
            self._lives.move_to_end(command.session_id)
            try:
                self._execute(live, command.reply, command.command)
            except Exception as exc:
                self._not_started(live, command, exc)
            if live.writing is None:  # nothing written: what _pump does once nothing is in progress
                self._pump(live)
            # Else _pump would only evict, and the batch's fold ends in that pass (_on_durable).
        except Exception as exc:  # a defect: as _handle contains it
            self._contain(command, exc)

    def _on_command(self, command: Command) -> None:
        live = self._lives.get(command.session_id)
        if live is None:
            live = self._lives[command.session_id] = Live(command.session_id)
            self._rt.projection.load(Load(command.session_id, self._me))
        else:
            self._lives.move_to_end(command.session_id)
        live.queue.append(command)
        self._pump(live)

    def _pump(self, live: Live) -> None:
        """Start the queued commands of ``live`` while nothing is in progress."""
        while live.state is not None and live.op is None and live.writing is None and live.queue:
            if live.held and not isinstance(live.queue[0], Execute | Decide | Open):
                self._flush_held(live)  # a command that writes nothing: the views go first
                continue
            command = live.queue.popleft()
            try:
                self._start(live, command)
            except Exception as exc:
                self._not_started(live, command, exc)
        if live.op is None and live.writing is None and live.prepare_pending:
            live.prepare_pending = False
            self._prepare(live)
        if live.settle_replies and self._settled(live):
            if live.held:  # wait_background: answered once what the background made is recorded
                self._flush_held(live)
            else:
                replies, live.settle_replies = live.settle_replies, []
                for reply in replies:
                    reply.resolve(None)
        self._evict()

    def _not_started(self, live: Live, command: Command, exc: Exception) -> None:
        """``command`` failed as it started: the caller's bad input (a validation error) fails
        only the caller; a defect fails it too, with an internal error, and is logged."""
        if live.op is not None and live.op.command is command:
            live.op = None
        if not isinstance(exc, CtxLedgerError):
            log_failure("request_failed", exc, actor=self._number, session_id=live.id)
            exc = internal(f"session {live.id!r}: {type(command).__name__}: {exc!r}", exc)
        fail(command.reply, exc)

    def _start(self, live: Live, command: Command) -> None:
        state = live.state
        assert state is not None
        match command:
            case Execute():
                self._execute(live, command.reply, command.command)
            case DecideStep():
                self._step(live, command)
            case Decide():
                op = live.op = Op(command, command.request)
                if command.reactive:
                    tried = self._reactive.setdefault(live.id, [])
                    op.attempt = len(tried)
                    self._attempt(live, op, tried)
                    return
                self._decide(live, op)
            case Read():
                command.reply.resolve(answer_query(command.query, state, live.last_event_seq))
            case Settle():
                if not background_on(state.config) and self._settled(live):
                    command.reply.resolve(None)
                    return
                live.settle_replies.append(command.reply)
                if live.background is not None:  # not after a worker process's start
                    self._rt.compaction.hurry(live.background.compaction_id)
                if background_on(state.config) and not live.settling:
                    # Budget may be about to ask for a summary (a batch it has, not yet
                    # measured): its Settled comes after any Measure it sends before.
                    live.settling = True
                    self._rt.budget.tell(Settling(live.id, self._me))
            case Open():
                configure = Configure(config=command.config, system=command.system)
                self._execute(live, command.reply, configure)
            case Fork():
                fail(command.reply, SessionExistsError(f"session {live.id!r} already exists"))

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
