"""The history actor's write path: batches to the journal, one at a time per session.

A session has at most one batch in the journal; the next waits in its queue. The journal's
commit callback publishes the durable batch (``Durable`` to this actor, ``Committed`` to budget
for a session with background compaction on) BEFORE it answers the caller, so that the caller's
next command, queued behind the publication in the same FIFO mailboxes, always finds its own
writes folded. Budget may grant a credit of tokens (:class:`~ctxledger.actors.messages.Release`):
batches of appends alone that stay within it are not told to budget one by one (it would only add
them up); their tokens ride on the next batch that is. Nor are the batches of a session whose
background compaction runs: budget decides nothing for it until that has ended. A snapshot is
taken after the fold that crosses a snapshot point and stored by a projection actor, in the
session's write queue.

A view served with ``defer_record`` is folded at once and its ``ViewServed`` held
(``Live.held``, while no batch of the session is in the journal): it goes first in the session's
next batch, so the log holds the same events in the same order, one commit fewer. A background
summary's outcome is held so too (:mod:`ctxledger.actors.steps`). A command that writes nothing
flushes what is held alone first, as do eviction, the actor's stop, ``wait_background``'s
answer and, for a summary's outcome, the host's timer.

The journal answers a group's requests one after another on its thread; the batches it publishes
to one history actor wait in the actor's :class:`~ctxledger.actors.history_base.DurableBox`, and
only the first of a burst tells the actor (``DurablesReady``): a group of 30 batches wakes the
actor once, not 30 times.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import msgspec
import pykka

from ctxledger._logging import get_logger
from ctxledger.actors.budget import appended_tokens
from ctxledger.actors.failures import internal, log_failure, refused
from ctxledger.actors.history_base import HistoryBase
from ctxledger.actors.live import Live, Op, Write, fail
from ctxledger.actors.messages import Committed, Durable, SaveSnapshot
from ctxledger.actors.recordable import check_recordable
from ctxledger.actors.waiters import Reply, Waiter
from ctxledger.domain import SessionState, background_on
from ctxledger.domain.calibration import session_tokenizer
from ctxledger.errors import LeaseLostError, VersionConflictError
from ctxledger.events import ConfigChanged, Event, ViewServed
from ctxledger.replay.loading import snapshot_due
from ctxledger.storage import LeaseStore, RecordedEvent, queued_commits

if TYPE_CHECKING:
    from ctxledger.actors.budget import BudgetActor
    from ctxledger.actors.failures import Restarting

__all__ = ["Writes"]

_logger = get_logger(__name__)


class Writes(HistoryBase):
    """The write path of the history actor (see the module docstring)."""

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

        ``pressure``: they come from a command that adds to the estimate (budget looks at the
        session's pressure after them). ``folded``: how many of the first ``events`` the state
        has folded already (a step's appends); if the batch fails, the state is ahead of the log
        and is loaded again. The session's held events (``Live.held``) go first in the batch.
        """
        if live.held:  # events held back go first, already folded
            events, folded, live.held = (*live.held, *events), folded + len(live.held), ()
        self._tokens += 1
        write = Write(self._tokens, events, on_done, reply, value, op, None, pressure, 0, folded)
        if live.writing is not None:
            live.pending_writes.append(write)
            return
        self._submit(live, write)

    def _submit(self, live: Live, write: Write) -> None:
        """Make ``write`` the session's batch in flight and hand it over.

        A defect before it reaches the journal fails this batch alone, as a refused commit
        would: left in flight, it would keep every later command of the session waiting.
        """
        live.writing = write
        try:
            self._send_batch(live, write)
        except Exception as exc:
            if live.writing is not write:  # answered already: the failure is a later one's
                raise
            log_failure("batch_not_submitted", exc, session_id=live.id, actor=self._number)
            error = internal(
                f"session {live.id!r}: a batch could not be handed to the journal: {exc!r}", exc
            )
            self._on_durable(Durable(live.id, write.token, None, error))
            if write.reply is not None:
                write.reply.resolve(None, error)

    def _send_batch(self, live: Live, write: Write) -> None:
        """Hand ``write``, the session's batch in flight, to the journal (or, a snapshot, to a
        projection actor); its reply is answered once it is durable."""
        if write.snapshot is not None:
            seq, data = write.snapshot
            interval = self._snapshot_interval(live.state)
            self._rt.projection.save(
                SaveSnapshot(live.id, seq, data, self._me, write.token, interval)
            )
            return
        if not write.events:
            self._on_durable(Durable(live.id, write.token, [], None))
            return
        # While the session's background compaction runs, budget folds nothing of its batches
        # (it looks again, from a fresh measure, once it has ended): they are not told.
        state = live.state
        publish = (
            state is not None
            and live.background is None
            and _publishes(state, write.events, write.pressure)
        )
        rt = self._rt
        committed = _Committed(
            self, rt.budget, rt.on_commit, live.id, write.token, write.pressure, write.reply,
            write.value,
        )
        if publish and state is not None:
            # At the session's own ratio: a calibrated tokenizer counts more tokens a character.
            cost = appended_tokens(write.events, session_tokenizer(state, rt.tokenizer))
            if live.credit:
                # Budget's credit: appends that keep the session below its prepare point need
                # not be told one by one; their tokens ride on the next batch that is.
                if cost is not None and live.unpublished + cost < live.credit:
                    live.unpublished += cost
                    publish = False
                else:
                    live.credit = 0
            if publish:
                unpublished, live.unpublished = live.unpublished, 0
                write.carried = unpublished
                if cost is None:
                    live.told_unknown += 1
                else:
                    live.told += cost + unpublished
                committed.told = (unpublished, live.told, live.told_unknown, cost)
        try:
            check_recordable(write.events)
            if not self._mailbox:
                self._submit_to_log(live, write, committed)
            else:
                # Commands wait in the mailbox: their batches, submitted right after this one,
                # join its group on the journal's thread. Committed here one by one, each would
                # wait for the last one's fsync (one history actor, 64 writers: 1,800 appends/s
                # instead of ~9,000).
                with queued_commits():
                    self._submit_to_log(live, write, committed)
        except Exception as exc:  # refused before queueing: the batch fails as a failed commit
            committed(None, refused(exc))

    def _submit_to_log(self, live: Live, write: Write, committed: _Committed) -> None:
        log = self._rt.log
        if live.lease is not None:
            cast(LeaseStore, log).submit(
                live.id,
                write.events,
                expected_seq=live.last_event_seq,
                callback=committed,
                fence=live.lease,
            )
        else:
            log.submit(live.id, write.events, expected_seq=live.last_event_seq, callback=committed)

    def _on_durables(self, durables: list[Durable] | None = None) -> None:
        """Fold ``durables`` (by default every batch waiting in the actor's durable box); a
        defect in one fails its own session's request (:meth:`_contain`), not the batches after
        it."""
        for durable in self._durables.take() if durables is None else durables:
            try:
                self._on_durable(durable)
            except Exception as exc:
                self._contain(durable, exc)

    def _on_durable(self, message: Durable) -> None:
        live = self._lives.get(message.session_id)
        if live is None or live.writing is None or live.writing.token != message.token:
            return
        write = live.writing
        live.writing = None
        if message.error is not None and write.carried:
            # Budget never heard of the failed batch: the kept-back appends it told of (they
            # are in the log) ride on the next batch published instead.
            live.unpublished += write.carried
        if live.creating is not None:
            self._created(live, message)
            return
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
            self._fold(live, state, records, skip=write.folded)
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

    def _fold(
        self, live: Live, state: SessionState, records: list[RecordedEvent], *, skip: int = 0
    ) -> None:
        """Fold a durable batch into the session's state (and take a snapshot when due); its
        first ``skip`` events are folded already (a step's appends)."""
        apply = state.apply
        for record in records[skip:] if skip else records:
            apply(record.event)
        previous, live.last_event_seq = live.last_event_seq, records[-1].seq
        if snapshot_due(previous, live.last_event_seq, self._snapshot_interval(state)):
            # Taken after the fold, so snapshot + tail replays to exactly this state.
            self._tokens += 1
            snapshot = Write(self._tokens, (), None, None, None, None)
            try:
                snapshot.snapshot = (live.last_event_seq, state.to_snapshot())
                live.pending_writes.appendleft(snapshot)
            except Exception as exc:  # an optimisation: its loss costs a longer fold
                log_failure("snapshot_not_taken", exc, session_id=live.id)

    def _snapshot_interval(self, state: SessionState | None) -> int:
        """Events between the session's snapshots: the host's if it sets one (it takes
        precedence), else the session's Config's; 1 for a state being loaded again."""
        if self._rt.snapshot_interval is not None:
            return self._rt.snapshot_interval
        return state.config.snapshot_interval if state is not None else 1


class _Committed(msgspec.Struct):
    """The journal's callback for one batch of a history actor (see ``_send_batch``).

    On the journal's thread (or on the actor's, or a caller's, when the journal was idle and the
    batch was committed there): the durable batch is published to the actors that fold it
    BEFORE the caller is answered, so that the caller's next command, queued behind it in the
    same FIFO mailboxes, always finds it folded. One Struct per batch rather than a closure over
    a dozen variables: a batch in flight keeps one object alive for the collector, not one per
    variable, and it is built without a call into Python.

    Attributes:
        actor: The history actor that owns the session (its durable box and its ref).
        budget: The budget actor, told of the batch when it folds it.
        observe: The host's commit observer when the batch was handed over (a later one does
            not see it).
        told: Budget is told of the batch: the kept-back tokens it carries, the session's
            running totals and the batch's cost (None: not told).
    """

    actor: Writes
    budget: Restarting[BudgetActor]
    observe: Callable[[str, list[RecordedEvent]], None] | None
    session_id: str
    token: int
    pressure: bool
    reply: Reply | None
    value: Any
    told: tuple[int, int, int, int | None] | None = None

    def __call__(self, records: list[RecordedEvent] | None, error: BaseException | None) -> None:
        session_id, actor = self.session_id, self.actor
        box = actor._durables
        reply = self.reply
        durable = Durable(session_id, self.token, records, error)
        try:
            if (
                error is None
                and type(reply) is Waiter
                and reply.folds
                and threading.get_ident() != actor._thread_id
            ):
                # Its caller folds it before it goes on (CallerRuns.fold_posted): the actor's
                # thread is not woken for it. Not when this is the actor's thread (committed
                # there, the journal idle): awake, it folds the batch while the caller wakes.
                # Nor a failed batch: what the failure undoes is the actor's to undo. The order
                # of these three steps, and of the caller's (abandoned, then posted_to), leaves
                # no batch unfolded.
                box.post_quiet(durable)
                reply.posted_to = actor
                if reply.abandoned:  # the caller left without its answer: the actor folds it
                    box.tell_unless_told(actor._me)
            else:
                box.post(durable, actor._me)
        except pykka.ActorDeadError:  # the actor is gone: its batches are of no use any more
            pass
        if records:
            if self.told is not None:
                unpublished, told, told_unknown, cost = self.told
                events = tuple(record.event for record in records)
                self.budget.tell(
                    Committed(
                        session_id, events, actor._me, self.pressure, unpublished, told,
                        told_unknown, cost,
                    )
                )
            if self.observe is not None:
                _observed(self.observe, session_id, records)
        if reply is not None:
            reply.resolve(self.value if error is None else None, error)


def _publishes(state: SessionState, events: Sequence[Event], pressure: bool) -> bool:
    """Whether budget folds the batch ``events`` of ``state``'s session: every batch of a
    session with background compaction on (or turning it on), but served views alone."""
    if not pressure and all(type(event) is ViewServed for event in events):
        return False
    if background_on(state.config):
        return True
    return any(type(event) is ConfigChanged and background_on(event.config) for event in events)


def _observed(
    observe: Callable[[str, list[RecordedEvent]], None],
    session_id: str,
    records: list[RecordedEvent],
) -> None:
    """Tell the commit observer (telemetry) of a durable batch; its failure fails nothing."""
    try:
        observe(session_id, records)
    except Exception:
        _logger.exception("the commit observer failed", session_id=session_id)
