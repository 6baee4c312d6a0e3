"""The typed messages the runtime's actors exchange: frozen Structs in one closed union per actor.

Commands come from :class:`~ctxledger.actors.Session` handles and go to the history actor that
owns the session; each carries the caller's reply slot (a :class:`Read` carries a
:class:`Query`, defined with its answer in the private ``_query`` and importable from here).
The other messages flow between the actors and the journal: a load finished, a batch is
durable, a summary arrived or timed out, a session's token pressure changed. Each actor's
``on_receive`` matches its union (:data:`HistoryMessage`, :data:`BudgetMessage`,
:data:`ProjectionMessage`, :data:`CompactionMessage`, :data:`LeaseMessage`) exhaustively, with
``assert_never`` as the default: a message added to a union and not handled is a type error.
"""

from __future__ import annotations

from typing import Protocol

import msgspec

from ctxledger.actors._query import Query, answer_query
from ctxledger.actors.waiters import Reply
from ctxledger.config import Config
from ctxledger.domain import Compact, Job, Serve, SessionState
from ctxledger.domain._pressure import Measurement
from ctxledger.domain.commands import Command as DomainCommand
from ctxledger.domain.usage import ReportedUsage
from ctxledger.errors import LeaseLostError
from ctxledger.events import Event
from ctxledger.messages import Message
from ctxledger.storage import Lease, RecordedEvent

__all__ = [
    "BackgroundEnded",
    "BudgetMessage",
    "Command",
    "Committed",
    "CompactionMessage",
    "Decide",
    "DecideStep",
    "Durable",
    "DurablesReady",
    "Evict",
    "Execute",
    "FlushHeld",
    "Forgotten",
    "Fork",
    "HistoryMessage",
    "HistoryRef",
    "LeaseLost",
    "LeaseMessage",
    "Load",
    "Loaded",
    "Measure",
    "Measured",
    "Open",
    "Prepare",
    "ProjectionMessage",
    "Query",
    "Read",
    "Release",
    "ReleaseLease",
    "RenewLeases",
    "SaveSnapshot",
    "Settle",
    "Settled",
    "Settling",
    "Summarize",
    "SummaryDone",
    "answer_query",
]


class HistoryRef(Protocol):
    """What the other actors hold of a history actor: where to tell it a message of its union
    (its ``pykka.ActorRef`` is one). Typed by what it accepts, not by the actor's class, so that
    budget, compaction, projection and leases answer it without importing it."""

    def tell(self, message: HistoryMessage) -> None:
        """Put ``message`` in the history actor's mailbox."""


# --- commands: Session handle -> history actor ---------------------------------------------------
# The one field of a message that is not plain data is a command's ``reply``: the caller's
# one-shot reply slot (:mod:`ctxledger.actors.waiters`), the envelope's return address as
# pykka's own ``Envelope.reply_to`` future is. Nothing in a message is ever called; a reply slot
# is only resolved, once, by whoever finishes the request (the history actor, or the journal's
# commit callback for a request whose last batch it committed).


class Command(msgspec.Struct, frozen=True):
    """A request of a session's caller; ``reply`` receives the answer (or the error)."""

    session_id: str
    reply: Reply


class Open(Command, frozen=True):
    """Activate the session, creating it with ``create_config`` when it does not exist.

    An existing session whose Config differs from a given ``config`` records ``ConfigChanged``.
    A ``system`` prompt is appended while the conversation is empty, else checked against the
    recorded one (:func:`ctxledger.domain.system_prompt.system_prompt_messages`).
    """

    config: Config | None
    create_config: Config
    system: str | None = None


class Execute(Command, frozen=True):
    """Decide ``command`` on the session's current state
    (:func:`ctxledger.domain.commands.execute`), record its events and answer its answer; a
    command the domain refuses is answered with the error, and nothing is recorded."""

    command: DomainCommand


class Decide(Command, frozen=True):
    """Run the decision step for ``request`` (a step, a compaction) to its end.

    ``reactive``: retry with ``prompt_too_long`` compactions, harder each time, until one
    compacts or ``max_reactive_retries`` attempts are spent. ``defer_record``: a view served
    without compacting is answered at once and its ``ViewServed`` held back, to be recorded with
    the session's next batch (``Session.prepare_step(defer_record=True)``).
    """

    request: Serve | Compact
    reactive: bool = False
    defer_record: bool = False


class DecideStep(Decide, frozen=True):
    """Append ``messages`` (after ``usage``, the usage of the call that answered with them) and
    serve the next view (``request``, a :class:`Serve`): one batch, when no compaction is due
    (:func:`ctxledger.domain.step.decide_step`)."""

    messages: tuple[Message, ...] = ()
    usage: ReportedUsage | None = None


class Settle(Command, frozen=True):
    """Answer once no background summary is being prepared for the session (nor about to be)."""


class Read(Command, frozen=True):
    """Answer ``query`` on a consistent state of the session (:func:`answer_query`)."""

    query: Query


class Fork(Command, frozen=True):
    """Create the session as a fork of ``parent_id`` at its message ``at_seq`` (event
    ``parent_event_seq``), with the parent's Config there; answered once the fork's first
    events are durable, or with ``SessionExistsError`` if the session exists."""

    parent_id: str
    at_seq: int
    parent_event_seq: int
    config: Config


# --- between the actors and the journal ----------------------------------------------------------


class Load(msgspec.Struct, frozen=True):
    """Projection actor: fold the session from its newest snapshot and the events after it.

    A missing session is answered with ``UnknownSessionError``: its history actor, the single
    writer, creates it if a command asks for that (on a shared log, under the lease the load
    took).
    """

    session_id: str
    owner: HistoryRef  # told ``Loaded``
    #: On a shared log: when (``time.monotonic()``) to stop waiting for another host's lease
    #: (set by the first attempt).
    lease_deadline: float | None = None


class Loaded(msgspec.Struct, frozen=True):
    """History actor: a session's state is ready (or could not be loaded: ``error``)."""

    session_id: str
    state: SessionState | None
    last_event_seq: int
    error: BaseException | None
    lease: Lease | None = None  # on a shared log: the lease this host now serves it under


class Durable(msgspec.Struct, frozen=True):
    """History actor: the write ``token`` of a session is durable (``records``) or failed."""

    session_id: str
    token: int
    records: list[RecordedEvent] | None
    error: BaseException | None


class DurablesReady(msgspec.Struct, frozen=True):
    """History actor: durable batches wait in its :class:`~ctxledger.actors.writes.DurableBox`
    (one message for all the batches the journal answered before the actor took them)."""


class SummaryDone(msgspec.Struct, frozen=True):
    """History actor: the compaction pool's one answer to ``job``: its summary, or None when
    the summariser failed or timed out (``detail`` says which)."""

    session_id: str
    job: Job
    summary: str | None
    detail: str
    seconds: float


class Prepare(msgspec.Struct, frozen=True):
    """History actor: start a background compaction for the session if one is still due."""

    session_id: str


class FlushHeld(msgspec.Struct, frozen=True):
    """History actor (from the host's timer): record what the session still holds for its next
    batch (``Live.held``), so that a summary prepared in the background reaches the log within
    :data:`~ctxledger.actors.steps.HELD_FLUSH_SECONDS` even when no command follows."""

    session_id: str


class Evict(msgspec.Struct, frozen=True):
    """History actor: the host holds more session states than ``max_active_sessions`` and the
    actor that noticed could not evict enough of its own; evict idle ones here."""


class LeaseLost(msgspec.Struct, frozen=True):
    """History actor: the host no longer holds ``lease`` (another host took the session over)."""

    session_id: str
    lease: Lease
    error: LeaseLostError


class Committed(msgspec.Struct, frozen=True):
    """Budget actor: a batch of the session is durable (published by the journal's commit
    callback before the caller is answered).

    ``pressure``: the batch came from a command that adds to the estimate (an append, a usage
    report, a Config): budget looks at the session's pressure after it. ``unpublished``: the
    tokens of the batches of appends alone kept back since budget's last credit (see
    :class:`Release`). ``told`` and ``told_unknown``: the history actor's running totals for
    the session, this batch included: the tokens of the batches it published (kept-back ones
    riding on them included), and how many it published whose effect on the estimate is not a
    count of characters. Budget echoes the last ones it saw in its :class:`Release`, so that a
    credit is never granted twice for a batch that crossed the release on its way. ``cost``:
    what the batch adds to the bound of the estimate, in tokens, counted at the session's own
    ratio (a calibrated session's tokenizer counts more tokens a character than the host's);
    None when it may change the estimate otherwise (``budget.appended_tokens``).
    """

    session_id: str
    events: tuple[Event, ...]
    owner: HistoryRef
    pressure: bool
    unpublished: int = 0
    told: int = 0
    told_unknown: int = 0
    cost: int | None = None


class Measure(msgspec.Struct, frozen=True):
    """History actor: measure what budget cannot fold (answered :class:`Measured`); with
    ``extension``, whether the summary's extension is due, from ``extension_from`` tokens on."""

    session_id: str
    extension: bool = False
    extension_from: int = 0


class Measured(msgspec.Struct, frozen=True, kw_only=True):
    """Budget actor: the history actor's measure of a session (see :class:`Measure`).

    Attributes:
        session_id: The session.
        owner: The history actor that measured it (answered ``Prepare`` or ``Release``).
        measurement: What it measured, as budget's decision reads it
            (:class:`ctxledger.domain._pressure.Measurement`).
    """

    session_id: str
    owner: HistoryRef
    measurement: Measurement = Measurement()


class Release(msgspec.Struct, frozen=True):
    """History actor: budget decided not to prepare a summary for the session now.

    ``credit``: the tokens of appends that budget would only add up (below the prepare point,
    or below its next look at a prepared summary that absorbs the growth): until they are
    spent, a batch of appends alone need not be published to budget (its tokens ride on the
    next one that is). ``told`` and ``told_unknown``: the running totals of the last
    :class:`Committed` budget had folded when it reckoned the credit: budget adds the batches
    published after that one to its bound after the credit, so the history actor takes their
    tokens off it (and grants none if one of them may have changed the estimate otherwise).
    """

    session_id: str
    credit: int = 0
    told: int = 0
    told_unknown: int = 0


class BackgroundEnded(msgspec.Struct, frozen=True):
    """Budget actor: a session's background compaction ended (or never started); none is
    looked for before message seq ``quiet_until``."""

    session_id: str
    quiet_until: int = 0


class Forgotten(msgspec.Struct, frozen=True):
    """Budget actor: the session's state left its history actor (evicted, dropped, reloaded):
    forget its pressure, its place in the queue and its running background compaction."""

    session_id: str


class Settling(msgspec.Struct, frozen=True):
    """Budget actor: answer ``owner`` :class:`Settled` (after every ``Measure`` sent before)."""

    session_id: str
    owner: HistoryRef


class Settled(msgspec.Struct, frozen=True):
    """History actor: budget sent every ``Measure`` of the session it had due before this."""

    session_id: str


class SaveSnapshot(msgspec.Struct, frozen=True):
    """Projection actor: store ``data``, the session's snapshot after event ``seq``, and drop
    the older ones it no longer needs (:func:`~ctxledger.replay.loading.snapshots_to_drop`).

    ``owner`` is then told ``Durable(session_id, token, [], None)`` (a snapshot that cannot be
    stored is logged, not reported: it only makes a later fold longer).
    """

    session_id: str
    seq: int
    data: bytes
    owner: HistoryRef
    token: int
    interval: int  # the session's snapshot interval (for which older snapshots to keep)


class Summarize(msgspec.Struct, frozen=True):
    """Compaction actor (a worker of the pool): summarise ``job.plan`` and tell ``owner``
    :class:`SummaryDone`. ``served``: the session was served a view since its active
    checkpoint's cut (see :mod:`ctxledger.actors.fact_warming`)."""

    session_id: str
    job: Job
    owner: HistoryRef
    served: bool = True


class RenewLeases(msgspec.Struct, frozen=True):
    """Lease actor: renew every lease the host holds, in one batch."""


class ReleaseLease(msgspec.Struct, frozen=True):
    """Lease actor: give ``lease`` back (its session was evicted or could not be loaded)."""

    lease: Lease


# --- the closed union of each actor's messages (each actor matches its union exhaustively) -----

#: What a history actor is told: its sessions' commands and the reports of their work.
HistoryMessage = (
    Execute | DecideStep | Decide | Read | Settle | Open | Fork
    | Durable | DurablesReady | Loaded | SummaryDone | Measure | Prepare | Release | Settled
    | LeaseLost | Evict | FlushHeld
)  # fmt: skip
#: What the budget actor is told.
BudgetMessage = Committed | Measured | BackgroundEnded | Settling | Forgotten
#: What a projection actor is told.
ProjectionMessage = Load | SaveSnapshot
#: What a compaction actor (a summariser worker) is told.
CompactionMessage = Summarize
#: What the lease actor is told.
LeaseMessage = RenewLeases | ReleaseLease
