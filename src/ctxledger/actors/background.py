"""The history actor's side of background compaction: what budget asks of a session.

Budget (:mod:`ctxledger.actors.budget`) decides when a session gets a summary prepared ahead of
need, from the committed batches it folds; what only the session's state can say it asks here
(``Measure``, answered ``Measured``). When budget allows one (``Prepare``), the background
compaction is planned on the state (``decide(state, Background())``), its ``CompactionStarted``
written and its job handed to the compaction pool; its summary is recorded as ``SummaryPrepared``
(:mod:`ctxledger.actors.steps`). ``wait_background`` (``Settle``) is answered once nothing is
being prepared for the session and budget has nothing due for it (``Settling`` → ``Settled``).
"""

from __future__ import annotations

import time

from ctxledger.actors.history_base import HistoryBase
from ctxledger.actors.live import Live
from ctxledger.actors.messages import BackgroundEnded, Measure, Measured, Prepare, Release, Settled
from ctxledger.domain import (
    BACKGROUND_BACKOFF,
    Background,
    Job,
    current_estimate,
    decide,
    extension_due,
    marks,
    usable_prepared,
)
from ctxledger.domain._pressure import Measurement
from ctxledger.domain.decide import block_gives_way

__all__ = ["BackgroundSteps", "credit_left"]

#: The measure of a session whose background compaction is off (or that is not active here).
_OFF = Measurement(off=True)


def credit_left(live: Live, release: Release) -> int:
    """The credit ``release`` grants ``live``, less the tokens of the batches the session
    published after the last one budget had folded when it reckoned it (see
    :class:`~ctxledger.actors.messages.Release`): they are on their way to budget, which will
    add them to its bound. None is left if one of them may have changed the estimate otherwise
    (budget will measure again), or if the totals are not this state's."""
    if live.told_unknown != release.told_unknown or live.told < release.told:
        return 0
    return max(0, release.credit - (live.told - release.told))


class BackgroundSteps(HistoryBase):
    """Background compaction on the history actor (see the module docstring)."""

    def _on_measure(self, message: Measure) -> None:
        """Budget asks for what only the session's state can say (see actors.budget); until
        it answers ``Prepare`` or ``Release``, a summary may be about to be prepared."""
        session_id, rt, me = message.session_id, self._rt, self._me
        live = self._lives.get(session_id)
        state = live.state if live is not None else None
        if live is None or state is None:
            rt.budget.tell(Measured(session_id=session_id, owner=me, measurement=_OFF))
            return
        live.pressure_sent = True
        live.credit = 0  # every batch is told to budget until it grants a new credit
        in_force = marks(state)
        if not in_force.prepare:
            rt.budget.tell(Measured(session_id=session_id, owner=me, measurement=_OFF))
            return
        last_seq = state.last_seq
        if live.background is not None or state.background is not None:
            blocked = last_seq + 1  # look again once it ended and the session grew
        elif last_seq < 3 or last_seq < state.background_retry_seq:
            blocked = max(3, state.background_retry_seq)
        else:
            blocked = 0
        if blocked:
            rt.budget.tell(
                Measured(
                    session_id=session_id,
                    owner=me,
                    measurement=Measurement(blocked_until=blocked, last_seq=last_seq),
                )
            )
            return
        tokenizer = rt.tokenizer
        estimate = current_estimate(state, tokenizer=tokenizer)  # O(appended since the last)
        prepared, active = usable_prepared(state), state.active_checkpoint
        extension = None
        if message.extension and prepared is not None and estimate >= message.extension_from:
            extension = extension_due(state, tokenizer, estimate)
        rt.budget.tell(
            Measured(
                session_id=session_id,
                owner=me,
                measurement=Measurement(
                    last_seq=last_seq,
                    estimate=estimate,
                    threshold=in_force.threshold,
                    prepare=in_force.prepare,
                    dynamic=state.config.threshold_policy != "fixed",
                    prepared=prepared.compaction_id if prepared is not None else None,
                    active=active.id if active is not None else None,
                    grown=estimate - active.tokens_after if active is not None else 0,
                    seconds=rt.clock() - active.created_at if active is not None else 0.0,
                    summary_seconds=active.summary_seconds if active is not None else 0.0,
                    extension=extension,
                    recheck_pace=block_gives_way(state.config),
                ),
            )
        )

    def _on_release(self, message: Release) -> None:
        live = self._lives.get(message.session_id)
        if live is not None and live.background is None and not live.prepare_pending:
            # Without a measure pending, the release answers an older state: no credit.
            live.credit = credit_left(live, message) if live.pressure_sent else 0
            live.pressure_sent = False
            self._pump(live)

    def _on_settled(self, message: Settled) -> None:
        live = self._lives.get(message.session_id)
        if live is not None:
            live.settling = False
            self._pump(live)

    def _on_prepare(self, message: Prepare) -> None:
        live = self._lives.get(message.session_id)
        if live is None or live.state is None:
            self._rt.budget.tell(BackgroundEnded(message.session_id))
            return
        live.credit = 0
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
            self._background_ended(live, quiet_until=state.last_seq + BACKGROUND_BACKOFF)
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
            and not live.settling
            and live.writing is None
        )

    def _background_ended(self, live: Live, *, quiet_until: int = 0) -> None:
        live.background = None
        live.pressure_sent = False
        self._rt.budget.tell(BackgroundEnded(live.id, quiet_until))
        op = live.op
        state = live.state
        assert state is not None
        if op is not None and op.waiting_for is not None and state.background is None:
            # The caller waited for this summary: decide again, now that its outcome is folded.
            op.waited += time.monotonic() - op.wait_started
            op.waiting_for = None
            self._decide(live, op)
