"""The budget actor: each session's token pressure, and when a summary is prepared ahead of need.

Budget is a read model of the committed event stream. The journal publishes every durable batch
of a session with background compaction on (:class:`~ctxledger.actors.messages.Committed`)
here before it answers the caller, and budget folds, per session, what the pressure needs: an
upper bound of the estimate (an exact measure, raised by the size of each message appended
since: masking and truncation only ever shrink what a message adds; any other event but a served
view drops it, unless the batch ends with a view served on every message: a step's, whose
estimate is a measure), the newest message seq, and the memos of its own decisions (no summary
before a seq, a checkpoint judged too late for, a prepared summary found to absorb the growth).

Budget owns the decision to prepare a summary in the background and rations those summaries
host-wide: at most ``background_compactions`` at once (they cost summariser calls, which is
money and LLM capacity), the sessions closest to their threshold first. What only the session's
whole state can say (the exact masked view, the marks of a dynamic policy, a usable prepared
summary, whether its extension is due) is measured by the history actor that owns the session,
on request (``Measure`` → ``Measured``). The verdict on a measure (release, ask whether the
extension is due, queue) is the domain's pure
:func:`ctxledger.domain._pressure.measured_verdict`, over the session's memo and the measure;
the actor keeps its mailbox, each measure's phase, the queue and the telling. The history actor
then plans the background compaction itself (``decide(state, Background())``: it writes its
``CompactionStarted``) when budget says ``Prepare``, or drops it when budget says ``Release``.
Budget never blocks on another actor.

The threshold, target and cap decisions of a step stay in the step's own decision
(``decide(state, Serve(...))`` on the history actor): they are on the critical path, where a
hop to budget and back would cost two hand-offs per step (see ``docs/architecture.md``).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
from collections.abc import Sequence
from typing import assert_never

import pykka

from ctxledger._logging import get_logger
from ctxledger.actors.failures import LoggedFailures, log_failure
from ctxledger.actors.messages import (
    BackgroundEnded,
    BudgetMessage,
    Committed,
    Forgotten,
    HistoryMessage,
    HistoryRef,
    Measure,
    Measured,
    Prepare,
    Release,
    Settled,
    Settling,
)
from ctxledger.domain import Tokenizer, message_chars
from ctxledger.domain._pressure import (
    ExtensionWanted,
    Off,
    PressureMemo,
    Queued,
    Released,
    measured_verdict,
)
from ctxledger.domain.calibration import tokens_of_chars
from ctxledger.events import Event, MessageAppended, ViewServed

__all__ = ["BudgetActor", "appended_tokens"]

_log = get_logger(__name__)

_IDLE, _MEASURING, _QUEUED, _RUNNING = range(4)


def appended_tokens(events: Sequence[Event], counting: Tokenizer) -> int | None:
    """What ``events`` add to the bound of the estimate, in tokens: the appended messages'
    characters as ``counting`` (the session's tokenizer, calibrated or not) counts them, plus
    one a message. None when they may change the estimate otherwise (any event but an append
    or a served view) or the tokenizer does not count characters
    (:func:`~ctxledger.domain.calibration.tokens_of_chars`)."""
    added = count = 0
    for event in events:
        if type(event) is MessageAppended:
            added += message_chars(event.message)
            count += 1
        elif type(event) is not ViewServed:
            return None
    if not count:
        return 0
    tokens = tokens_of_chars(counting, added)
    return None if tokens is None else tokens + count


class _Pressure:
    """What budget folds for one session (see the module docstring): the decision's
    :class:`~ctxledger.domain._pressure.PressureMemo`, the owner and the measure's phase."""

    __slots__ = (
        "absorb_until",
        "absorbing",
        "bound",
        "last_seq",
        "late_for",
        "looked",
        "owner",
        "phase",
        "prepare",
        "quiet_until",
        "since",
        "told",
        "told_unknown",
    )  # fmt: skip

    def __init__(self, owner: HistoryRef) -> None:
        self.owner = owner
        self.phase = _IDLE
        # The memo the decision reads and writes (see PressureMemo, which documents each).
        self.bound: int | None = None
        self.since: int | None = 0
        self.prepare: int | None = None
        self.last_seq = 0
        self.quiet_until = 0
        self.absorbing: tuple[str, int, int] | None = None
        self.absorb_until: int | None = None
        self.late_for: str | None = None
        self.looked: tuple[int, int] | None = None
        # The running totals of the last Committed folded (echoed in a Release, see there).
        self.told = self.told_unknown = 0


class BudgetActor(LoggedFailures, pykka.ThreadingActor):
    """Folds the sessions' token pressure and rations background summaries (see the module
    docstring).

    Args:
        max_running: Background compactions at once, host-wide.
    """

    use_daemon_thread = True  # never keeps the interpreter alive (see actors.lifecycle)

    def __init__(self, max_running: int) -> None:
        super().__init__()
        self._max_running = max_running
        self._sessions: dict[str, _Pressure] = {}
        self._running: set[str] = set()
        self._queued: dict[str, tuple[float, int]] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._order = itertools.count()

    def on_receive(self, message: BudgetMessage) -> None:
        """Handle one message of the actor's closed union.

        A defect while handling one is logged and costs that session its background summary
        (it is compacted in the foreground instead); the actor goes on.
        """
        try:
            match message:
                case Committed():
                    self._on_committed(message)
                case Measured():
                    self._on_measured(message)
                case BackgroundEnded():
                    self._ended(message.session_id, message.quiet_until)
                case Settling():
                    _tell(message.owner, Settled(message.session_id))
                case Forgotten():
                    self._forget(message.session_id)
                case _:
                    assert_never(message)
        except Exception as exc:
            log_failure("budget_failed", exc, session_id=getattr(message, "session_id", None))
        try:
            self._start()
        except Exception as exc:  # the actor goes on: a restart would drop every session's memo
            log_failure("budget_failed", exc, session_id=None)

    def pressure(self) -> dict[str, float]:
        """Return the sessions waiting for a background compaction, with their urgency."""
        return {session_id: -entry[0] for session_id, entry in self._queued.items()}

    # --- the fold --------------------------------------------------------------------------------

    def _on_committed(self, message: Committed) -> None:
        session = self._sessions.get(message.session_id)
        if session is None:
            session = self._sessions[message.session_id] = _Pressure(message.owner)
        session.owner = message.owner
        session.told, session.told_unknown = message.told, message.told_unknown
        appended = False
        for event in message.events:
            if type(event) is MessageAppended:
                appended = True
                session.last_seq = event.message.seq or session.last_seq
        cost = message.cost
        if cost is not None:
            cost += message.unpublished  # appends the history actor kept within the credit
        else:
            session.bound = None  # it may change the estimate in any direction
        if session.phase == _MEASURING and (appended or cost is None):
            since = session.since
            session.since = None if since is None or cost is None else since + cost
        if not message.pressure or session.phase != _IDLE:
            return
        if session.last_seq < session.quiet_until:
            return
        if session.bound is not None and appended and cost is not None:
            session.bound += cost
        else:
            session.bound = None  # a usage report, or a tokenizer whose counts cannot be bounded
            session.absorb_until = session.looked = None
        served = message.events[-1]
        if type(served) is ViewServed and served.through_seq == session.last_seq:
            # A step's batch ends with the view it served, decided after everything before it
            # (a usage report included): its estimate is a measure (with its pending text: an
            # upper bound), and no round trip to the history actor is needed for one.
            exact = served.estimated_tokens
            session.bound = exact if session.bound is None else min(session.bound, exact)
        if (
            session.bound is not None
            and session.absorb_until is not None
            and session.bound < session.absorb_until
        ):
            return  # the prepared summary still absorbs (see _on_measured)
        if (
            session.bound is not None
            and session.prepare is not None
            and session.bound < session.prepare
        ):
            return
        session.phase = _MEASURING
        session.since = 0
        # A look at a prepared summary found to absorb the growth asks at once whether its
        # extension is due, from the view a step above that look on (below it the answer is
        # not needed): a second round trip would hold the history actor twice, and the answer
        # costs it a draft of the view the summary gives (its next append waits behind both).
        checked = session.absorbing
        if checked is None:
            measure = Measure(message.session_id)
        else:
            measure = Measure(message.session_id, extension=True, extension_from=checked[2])
        _tell(session.owner, measure)

    # --- the decision ----------------------------------------------------------------------------

    def _on_measured(self, message: Measured) -> None:
        session_id = message.session_id
        session = self._sessions.get(session_id)
        if session is None:
            # Forgotten meanwhile (the state left its history actor and may be back): the
            # measure that actor took still waits for a verdict.
            _tell(message.owner, Release(session_id))
            return
        if session.phase != _MEASURING:
            return  # an earlier measure, already answered by a newer one
        memo, verdict = measured_verdict(_memo(session), message.measurement)
        match verdict:
            case Off():
                self._forget(session_id)
                _tell(session.owner, Release(session_id))
            case Released():
                _keep(session, memo)
                self._release(session_id, session, until=verdict.until)
            case ExtensionWanted():
                _keep(session, memo)
                _tell(session.owner, Measure(session_id, extension=True))
            case Queued():
                _keep(session, memo)
                session.phase = _QUEUED
                entry = (verdict.priority, next(self._order))
                self._queued[session_id] = entry
                heapq.heappush(self._heap, (entry[0], entry[1], session_id))
            case _:
                assert_never(verdict)

    def _release(self, session_id: str, session: _Pressure, *, until: int | None = None) -> None:
        """Answer the measure: no summary now. With ``until`` (the prepare point, or the next
        look at a prepared summary that absorbs the growth), the history actor may keep back
        the batches of appends alone while the bound stays below it (counted as
        ``unpublished`` on the next batch it publishes): budget would only add them up. The
        running totals of the last batch folded go with it: the history actor takes off the
        credit what it published after that batch (it is on its way here, and will be added to
        the bound, which the credit did not count)."""
        session.phase = _IDLE
        room = 0
        if until is not None and session.bound is not None:
            room = max(0, until - session.bound)
        _tell(session.owner, Release(session_id, room, session.told, session.told_unknown))

    # --- rationing -------------------------------------------------------------------------------

    def _start(self) -> None:
        while len(self._running) < self._max_running and self._heap:
            _, order, session_id = heapq.heappop(self._heap)
            entry = self._queued.get(session_id)
            if entry is None or entry[1] != order:
                continue  # superseded or forgotten
            del self._queued[session_id]
            session = self._sessions[session_id]
            session.phase = _RUNNING
            self._running.add(session_id)
            _tell(session.owner, Prepare(session_id))

    def _ended(self, session_id: str, quiet_until: int) -> None:
        self._running.discard(session_id)
        session = self._sessions.get(session_id)
        if session is not None and session.phase == _RUNNING:
            session.phase = _IDLE
            session.quiet_until = max(session.quiet_until, quiet_until)
            # The batches while it ran were not told (and its own events may have changed the
            # estimate any way): the next look measures.
            session.bound = None

    def _forget(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)
        self._queued.pop(session_id, None)
        self._running.discard(session_id)


def _memo(session: _Pressure) -> PressureMemo:
    """What the decision reads of ``session``."""
    return PressureMemo(
        last_seq=session.last_seq,
        quiet_until=session.quiet_until,
        bound=session.bound,
        since=session.since,
        prepare=session.prepare,
        absorbing=session.absorbing,
        absorb_until=session.absorb_until,
        late_for=session.late_for,
        told=session.told,
        looked=session.looked,
    )


def _keep(session: _Pressure, memo: PressureMemo) -> None:
    """Store in ``session`` what the decision wrote (``since`` and ``told`` it only reads)."""
    session.last_seq = memo.last_seq
    session.quiet_until = memo.quiet_until
    session.bound = memo.bound
    session.prepare = memo.prepare
    session.absorbing = memo.absorbing
    session.absorb_until = memo.absorb_until
    session.late_for = memo.late_for
    session.looked = memo.looked


def _tell(owner: HistoryRef, message: HistoryMessage) -> None:
    with contextlib.suppress(pykka.ActorDeadError):  # its successor starts the session afresh
        owner.tell(message)
