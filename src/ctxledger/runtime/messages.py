"""The typed messages the runtime's actors exchange.

Commands come from :class:`~ctxledger.runtime.Session` handles and go to the history actor that
owns the session; each carries the caller's reply slot. The other messages flow between the
actors and the journal: a load finished, a batch is durable, a summary arrived or timed out, a
session's token pressure changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from ctxledger.config import Config
from ctxledger.domain import Compact, Job, Serve, SessionState, place_message, shown_messages
from ctxledger.domain.commands import Command as DomainCommand
from ctxledger.messages import Message
from ctxledger.runtime.waiters import Reply
from ctxledger.storage import Lease, RecordedEvent

__all__ = [
    "BackgroundEnded",
    "Command",
    "Decide",
    "DecideStep",
    "Durable",
    "Evict",
    "Execute",
    "Load",
    "Loaded",
    "Open",
    "Prepare",
    "Pressure",
    "Query",
    "Read",
    "SaveSnapshot",
    "Settle",
    "SummaryDone",
    "SummaryTimeout",
    "answer_query",
]


# --- reads ---------------------------------------------------------------------------------------


class Query(msgspec.Struct, frozen=True, kw_only=True):
    """A read of a session's folded state, answered by its owner (data, not a callable).

    Attributes:
        what: ``usage`` (the totals), ``history``, ``checkpoints``, ``config``, ``positions``
            (last message seq, last event seq), ``state`` (a copy), ``explain`` (where message
            ``seq`` is in the view) or ``shown`` (the newest ``limit`` messages still shown).
        seq: The message ``explain`` asks about.
        limit: The most messages ``shown`` returns (None: all).
    """

    what: Literal["usage", "history", "checkpoints", "config", "positions", "state", "explain",
                  "shown"]  # fmt: skip
    seq: int = 0
    limit: int | None = None


def answer_query(query: Query, state: SessionState, last_event_seq: int) -> Any:
    """Answer ``query`` on ``state`` (whose newest event is ``last_event_seq``)."""
    match query.what:
        case "usage":
            return state.accounting.totals
        case "history":
            return list(state.history)
        case "checkpoints":
            return list(state.checkpoints)
        case "config":
            return state.config
        case "positions":
            return (state.last_seq, last_event_seq)
        case "state":
            return state.copy()
        case "explain":
            return place_message(state, query.seq)
        case "shown":
            return shown_messages(state, query.limit)


# --- commands: Session handle -> history actor ---------------------------------------------------


@dataclass(slots=True)
class Command:
    """A request of a session's caller; ``reply`` receives the answer (or the error)."""

    session_id: str
    reply: Reply


@dataclass(slots=True)
class Open(Command):
    """Activate the session, creating it with ``config`` when it does not exist.

    An existing session whose Config differs from a given ``config`` records ``ConfigChanged``.
    A ``system`` prompt is appended while the conversation is empty, else checked against the
    recorded one (:func:`ctxledger.domain.system_prompt.system_prompt_messages`).
    """

    config: Config | None
    create_config: Config
    system: str | None = None


@dataclass(slots=True)
class Execute(Command):
    """Decide ``command`` on the session's current state
    (:func:`ctxledger.domain.commands.execute`), record its events and answer its answer; a
    command the domain refuses is answered with the error, and nothing is recorded."""

    command: DomainCommand


@dataclass(slots=True)
class Decide(Command):
    """Run the decision step for ``request`` (a step, a compaction) to its end.

    ``reactive``: retry with ``prompt_too_long`` compactions, harder each time, until one
    compacts or ``max_reactive_retries`` attempts are spent.
    """

    request: Serve | Compact
    reactive: bool = False


@dataclass(slots=True)
class DecideStep(Decide):
    """Append ``messages`` and serve the next view (``request``, a :class:`Serve`): one batch,
    when no compaction is due (:func:`ctxledger.domain.step.decide_step`)."""

    messages: tuple[Message, ...] = ()


@dataclass(slots=True)
class Settle(Command):
    """Answer once no background summary is being prepared for the session (nor about to be)."""


@dataclass(slots=True)
class Read(Command):
    """Answer ``query`` on a consistent state of the session (:func:`answer_query`)."""

    query: Query


# --- between the actors and the journal ----------------------------------------------------------


@dataclass(slots=True)
class Load:
    """Projection actor: fold the session (creating it with ``create_config`` if missing).

    Without ``create_config`` a missing session fails the load (``UnknownSessionError``).
    """

    session_id: str
    create_config: Config | None
    owner: Any  # the history actor's ref, told ``Loaded``
    #: On a shared log: when (``time.monotonic()``) to stop waiting for another host's lease
    #: (set by the first attempt).
    lease_deadline: float | None = None


@dataclass(slots=True)
class Loaded:
    """History actor: a session's state is ready (or could not be loaded: ``error``)."""

    session_id: str
    state: SessionState | None
    last_event_seq: int
    error: BaseException | None
    lease: Lease | None = None  # on a shared log: the lease this host now serves it under


@dataclass(slots=True)
class Durable:
    """History actor: the write ``token`` of a session is durable (``records``) or failed."""

    session_id: str
    token: int
    records: list[RecordedEvent] | None
    error: BaseException | None


@dataclass(slots=True)
class SummaryDone:
    """History actor: the summariser answered ``job`` (``summary`` None when it failed)."""

    session_id: str
    job: Job
    summary: str | None
    detail: str
    seconds: float


@dataclass(slots=True)
class SummaryTimeout:
    """History actor: ``job`` has run for ``summary_timeout`` seconds."""

    session_id: str
    job: Job


@dataclass(slots=True)
class Pressure:
    """Budget actor: a session's estimate crossed the point where a summary should be prepared.

    ``urgency`` is the estimate over the compaction threshold: sessions closest to it first.
    """

    session_id: str
    urgency: float
    owner: Any  # the history actor's ref, told ``Prepare``


@dataclass(slots=True)
class Prepare:
    """History actor: start a background compaction for the session if one is still due."""

    session_id: str


@dataclass(slots=True)
class BackgroundEnded:
    """Budget actor: a session's background compaction ended (or never started)."""

    session_id: str


@dataclass(slots=True)
class Evict:
    """To a history actor: the host holds more session states than ``max_active_sessions`` and
    the actor that noticed could not evict enough of its own; evict idle ones here."""


@dataclass(slots=True)
class SaveSnapshot:
    """Projection actor: store ``data``, the session's snapshot after event ``seq``, and drop
    the older ones it no longer needs (:func:`~ctxledger.replay.loading.snapshots_to_drop`).

    ``owner`` is then told ``Durable(session_id, token, [], None)`` (a snapshot that cannot be
    stored is logged, not reported: it only makes a later fold longer).
    """

    session_id: str
    seq: int
    data: bytes
    owner: Any
    token: int
    interval: int  # the session's snapshot interval (for which older snapshots to keep)
