"""A history actor's per-session bookkeeping: the state, the command in progress, the writes.

:class:`Live` is everything a history actor holds for one session; :class:`Op` a command being
carried out; :class:`Write` a batch on its way to the journal. :func:`fail_work` is the one
place that fails the callers waiting on a session's work, for every reason the work can end
early (a failed request, a lost lease, a dead or stopped actor), so that none of them is
forgotten and no mark (``writing``, an op, a queue) outlives the work it stood for.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from ctxledger.actors.messages import Command, Fork, Open
from ctxledger.actors.waiters import Reply
from ctxledger.domain import Job, Request, SessionState
from ctxledger.events import Event
from ctxledger.storage import Lease, RecordedEvent

__all__ = ["Live", "Op", "Write", "fail", "fail_work"]


class Write(msgspec.Struct):
    """A batch of one session in the journal; a session has at most one at a time (a Struct:
    built without a call into Python, one per batch).

    Attributes:
        token: The batch's number, matched by its ``Durable``.
        events: The events to commit, in order.
        on_done: Called with the records (or the error) once the batch is durable, or failed.
        reply: Answered by the journal itself once the batch is durable.
        value: The reply's answer.
        op: The command in progress the batch belongs to, if any.
        snapshot: Instead of events, a snapshot ``(seq, data)``, stored by a projection actor;
            it goes through the session's write queue, so a command after it finds it stored.
        pressure: From a command that adds to the estimate (see :mod:`ctxledger.actors.budget`).
        carried: Published to budget carrying the tokens of this many kept-back appends (see
            :mod:`ctxledger.actors.writes`): if the batch fails, they ride on the next one.
        folded: How many of the first events the session's state folded before the batch was
            durable (a step's appends, see :mod:`ctxledger.actors.steps`): not folded again.
    """

    token: int
    events: Sequence[Event]
    on_done: Callable[[list[RecordedEvent] | None, BaseException | None], None] | None
    reply: Reply | None
    value: Any
    op: Op | None
    snapshot: tuple[int, bytes] | None = None
    pressure: bool = False
    carried: int = 0
    folded: int = 0


class Live:
    """A session's state in memory and the work in progress on it."""

    __slots__ = (
        "background",
        "creating",
        "credit",
        "held",
        "id",
        "last_event_seq",
        "lease",
        "op",
        "pending_writes",
        "prepare_pending",
        "pressure_sent",
        "queue",
        "settle_replies",
        "settling",
        "state",
        "told",
        "told_unknown",
        "unpublished",
        "writing",
    )

    def __init__(self, session_id: str) -> None:
        self.id = session_id
        self.state: SessionState | None = None  # None while the projection actors load it
        # The command whose creation of the session is being written (its first events).
        self.creating: Open | Fork | None = None
        self.last_event_seq = 0
        self.lease: Lease | None = None  # on a shared log: every write is fenced with it
        self.queue: deque[Command] = deque()  # commands waiting for the current one
        self.op: Op | None = None  # the command being carried out
        self.writing: Write | None = None
        self.pending_writes: deque[Write] = deque()
        self.background: Job | None = None  # a background summary being written
        self.prepare_pending = False
        # Budget is deciding whether to prepare a summary (from its Measure to its Release, or
        # until the background compaction its Prepare started ended).
        self.pressure_sent = False
        self.settle_replies: list[Reply] = []
        self.settling = False  # asked budget for Settled (wait_background)
        # Budget's credit, in tokens: batches of appends within it are not told to budget; the
        # tokens of those kept back ride on the next batch that is (see actors.writes).
        self.credit = 0
        self.unpublished = 0
        # The running totals told to budget (see messages.Committed): never reset, so that a
        # Release reckoned on older totals still takes off everything published since.
        self.told = self.told_unknown = 0
        # Events folded but not yet recorded (views served with ``defer_record=True``, a
        # background summary's outcome): they go first in the session's next batch (see
        # actors.writes). Only while nothing is in the journal or waiting for it.
        self.held: tuple[Event, ...] = ()

    @property
    def idle(self) -> bool:
        """Whether nothing is in progress or waiting on the session (it may be evicted)."""
        return (
            self.state is not None
            and self.op is None
            and not self.queue
            and self.writing is None
            and self.background is None
            and not self.pending_writes
            and not self.settle_replies
            and not self.held
        )


class Op:
    """A command in progress: a decision writing, or waiting for a summary (its own or one in the
    background)."""

    __slots__ = (
        "attempt",
        "command",
        "handed_off",
        "job",
        "job_started",
        "request",
        "wait_started",
        "waited",
        "waiting_for",
    )

    def __init__(self, command: Command, request: Request | None = None) -> None:
        self.command = command
        self.request = request
        self.attempt = 0
        self.job: Job | None = None
        self.job_started = 0.0
        self.waiting_for: str | None = None
        self.wait_started = 0.0
        self.waited = 0.0
        self.handed_off = False  # the reply went to the journal with the last batch


def fail(reply: Reply, error: BaseException) -> None:
    """Make the caller waiting on ``reply`` raise ``error`` (a no-op if it was answered)."""
    reply.resolve(None, error)


def fail_work(live: Live, error: BaseException, *, queued: bool) -> None:
    """Fail the callers waiting on the work in progress of ``live`` and forget that work.

    The command in progress (unless its reply already went to the journal with its last batch,
    which answers it), a fork being created and the batches not yet handed to the journal fail
    with ``error``. With ``queued`` the commands waiting for their turn and the callers of
    ``wait_background`` fail too; without, they stay queued for the session's next state. The
    batch in the journal, if any (``live.writing``), is left to the journal, which answers its
    caller.
    """
    op = live.op
    if op is not None and not op.handed_off:
        fail(op.command.reply, error)
    if isinstance(live.creating, Fork):  # answered by the history actor, not by the journal
        fail(live.creating.reply, error)
    for write in live.pending_writes:
        if write.reply is not None:
            fail(write.reply, error)
    live.op = None
    live.pending_writes.clear()
    live.prepare_pending = False
    if queued:
        for command in live.queue:
            fail(command.reply, error)
        for reply in live.settle_replies:
            fail(reply, error)
        live.queue.clear()
        live.settle_replies.clear()
