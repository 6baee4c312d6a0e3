"""Reading a damaged session on past its damage: each unusable record becomes a ``RecordLost``.

:class:`SessionWalk` reads a session's records with :func:`read_around_damage` and folds them.
A record that cannot be read, or that reads but cannot be folded on top of what an earlier loss
left, is replaced by a :class:`~ctxledger.events.RecordLost` at its own event seq, so event seqs
stay dense and every intact record keeps its place. ``salvage`` writes what the walk yields into
a new log; ``ctxledger show`` folds it to print what is readable.

Whether a damaged record held a message is read from what surrounds it: the message seqs of the
next readable message and of the views served in between, and the forks taken of the session
after it (their own messages must still follow their base). A lost message gets a stand-in with
its seq whose role keeps every view valid for a provider: a tool result answering the call that
no later result answers; an assistant message making the calls that later results answer (and
the calls of its lost results); otherwise a user or assistant message, as the neighbours
suggest. A role that would put a tool exchange across a cut that a compaction recorded anywhere
in the session retains from (:class:`~ctxledger.replay.evidence.Cuts`) is tried last, so the
checkpoints after a loss still make views valid. Its content says what was lost and its
metadata is ``{"lost": "damaged"}``.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator

import msgspec

from ctxledger.domain import SessionState
from ctxledger.errors import CtxLedgerError
from ctxledger.events import (
    Event,
    RecordLost,
    SessionForked,
    SessionOpened,
    ViewServed,
    carried_message,
)
from ctxledger.messages import Message, ToolCall
from ctxledger.replay.damage import Unreadable, damaged_before_message, read_around_damage
from ctxledger.replay.evidence import Cuts, forks_of, proves
from ctxledger.storage import EventLog, RecordedEvent

__all__ = [
    "ForkBase",
    "Replaced",
    "SessionWalk",
    "Unsalvageable",
    "WalkedRecord",
    "walk_session",
]

#: Folds a fork's parent through an event seq (``parent_id, parent_event_seq``), as salvaged.
ForkBase = Callable[[str, int], SessionState]

_FOLD_ERRORS = (CtxLedgerError, IndexError, KeyError, ValueError)


class Unsalvageable(CtxLedgerError):
    """Raised when nothing of a session can be folded (its opening records are lost)."""


class Replaced(msgspec.Struct, frozen=True, kw_only=True):
    """A record that a walk replaced by a ``RecordLost``.

    Attributes:
        seq: Its event seq.
        message_seq: The seq of the lost message it stood for, or None (no message).
        reason: ``damaged`` or ``unfoldable`` (as ``RecordLost.reason``).
        detail: The error, for people.
    """

    seq: int
    message_seq: int | None
    reason: str
    detail: str


class WalkedRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One record of a walked session: the original, or its ``RecordLost`` stand-in.

    Attributes:
        seq: The event seq.
        event: The event (the original's, or a ``RecordLost``).
        timestamp: The original's commit time (a stand-in takes its predecessor's).
        position: The original's position in the log; None for a stand-in.
    """

    seq: int
    event: Event
    timestamp: float
    position: int | None


class SessionWalk:
    """Walk one session of a damaged log, folding what can be used.

    Iterate :meth:`records` once; then :attr:`state` is the fold of everything yielded and
    :attr:`replaced` lists the records replaced.

    Args:
        log: The damaged log (only read).
        session_id: The session.
        fork_base: How to fold a fork's parent through its fork point (raising
            :class:`Unsalvageable` when that cannot be done).
        through: The last event seq to walk (the session's last when omitted).
    """

    def __init__(
        self,
        log: EventLog,
        session_id: str,
        fork_base: ForkBase,
        through: int | None = None,
    ) -> None:
        self.log = log
        self.session_id = session_id
        self.fork_base = fork_base
        self.through = through
        self.state: SessionState | None = None
        self.replaced: list[Replaced] = []
        self._ahead: deque[RecordedEvent | Unreadable] = deque()
        self._opened: SessionOpened | None = None
        self._cuts = Cuts()  # of the records folded, and of the whole rest once one is lost
        self._cuts_read = False
        self._forks: list[tuple[int, int]] | None = None  # read at the first damaged record

    def records(self) -> Iterator[WalkedRecord]:
        """Yield the session's records in order, each unusable one replaced by ``RecordLost``.

        Raises:
            Unsalvageable: The session's first record (``SessionOpened``) is lost, or a fork's
                parent cannot be folded through the fork point.
            EventDecodeError: The session's own entry cannot be read.
        """
        source = read_around_damage(self.log, self.session_id, self.through)
        stamp = 0.0
        while True:
            entry = self._ahead.popleft() if self._ahead else next(source, None)
            if entry is None:
                return
            if isinstance(entry, Unreadable):
                event = self._stand_in(entry, source)
                yield WalkedRecord(seq=entry.seq, event=event, timestamp=stamp, position=None)
                continue
            stamp = entry.timestamp
            yield self._fold(entry)

    # --- folding ----------------------------------------------------------------------------------

    def _fold(self, record: RecordedEvent) -> WalkedRecord:
        event = record.event
        self._cuts.add(event)
        if self.state is None:
            if not isinstance(event, SessionOpened):
                raise Unsalvageable(
                    f"its first record is a {type(event).__name__}, not SessionOpened"
                )
            self._opened = event
            self.state = SessionState.new(self.session_id, event.config)
        elif isinstance(event, SessionForked):
            assert self._opened is not None
            self.state = self.fork_base(event.parent_id, event.parent_event_seq)
            self.state.rebase(self.session_id, self._opened.config)
        problem = self._check(event)
        lost = None
        if problem is not None:
            lost = self._unfoldable(event, problem)
            self.state.apply(lost)  # counted as a fold of the salvaged log counts it
        else:
            try:
                self.state.apply(event)
            except _FOLD_ERRORS as exc:
                # The failed apply counted the event, as a fold of the salvaged log counts the
                # RecordLost in its place; nothing else changed (the fold checks first).
                problem = str(exc)
                lost = self._unfoldable(event, problem)
        if lost is None or problem is None:
            return WalkedRecord(
                seq=record.seq, event=event, timestamp=record.timestamp, position=record.position
            )
        self.replaced.append(
            Replaced(seq=record.seq, message_seq=None, reason="unfoldable", detail=problem)
        )
        return WalkedRecord(seq=record.seq, event=lost, timestamp=record.timestamp, position=None)

    @staticmethod
    def _unfoldable(event: Event, problem: str) -> RecordLost:
        return RecordLost(
            reason="unfoldable", detail=problem, lost_type=str(type(event).__struct_config__.tag)
        )

    def _check(self, event: Event) -> str | None:
        """Why ``event`` cannot be folded here, for what the fold itself does not refuse."""
        assert self.state is not None
        message = carried_message(event)
        if message is not None and message.seq != self.state.last_seq + 1:
            return f"message seq {message.seq} does not follow {self.state.last_seq}"
        return None

    # --- stand-ins --------------------------------------------------------------------------------

    def _stand_in(
        self, entry: Unreadable, source: Iterator[RecordedEvent | Unreadable]
    ) -> RecordLost:
        state = self.state
        detail = str(entry.error)
        if state is None:
            raise Unsalvageable(f"its first record cannot be read: {detail}")
        window = self._window(source)
        if entry.seq == 2 and state.last_seq == 0 and self._fork_lost(window):
            raise Unsalvageable(f"its SessionForked record (event 2) cannot be read: {detail}")
        if not self._holds_message(entry, window):
            self.replaced.append(
                Replaced(seq=entry.seq, message_seq=None, reason="damaged", detail=detail)
            )
            state.apply(RecordLost(detail=detail))
            return RecordLost(detail=detail)
        self._read_cuts(entry.seq)
        seq = state.last_seq + 1
        text = f"[lost: message {seq} could not be read (damaged record at event {entry.seq})]"
        message = self._message(text, window, entry)
        lost = RecordLost(message=message, detail=detail)
        self.replaced.append(
            Replaced(seq=entry.seq, message_seq=seq, reason="damaged", detail=detail)
        )
        state.apply(lost)
        return lost

    def _read_cuts(self, seq: int) -> None:
        """Once, at the first lost message: note the cuts every record after ``seq`` names.

        A checkpoint made rounds after a loss may retain from a message near it, so the window
        is not enough; the session is read to its end (even past ``through``: a fork's base
        gets the stand-ins its parent's own walk gets).
        """
        if self._cuts_read:
            return
        self._cuts_read = True
        for ahead in read_around_damage(self.log, self.session_id, from_seq=seq + 1):
            if not isinstance(ahead, Unreadable):
                self._cuts.add(ahead.event)

    def _window(
        self, source: Iterator[RecordedEvent | Unreadable]
    ) -> list[RecordedEvent | Unreadable]:
        """The records after the current one up to the next readable message, and the tool
        results that follow it (read ahead, kept for the walk)."""
        index = 0
        found_message = False
        while True:
            if index == len(self._ahead):
                entry = next(source, None)
                if entry is None:
                    break
                self._ahead.append(entry)
            entry = self._ahead[index]
            index += 1
            message = None if isinstance(entry, Unreadable) else carried_message(entry.event)
            if message is None:
                continue
            if found_message and message.role != "tool":
                index -= 1
                break
            found_message = True
            if message.role != "tool":
                break
        return list(self._ahead)[:index]

    def _fork_lost(self, window: list[RecordedEvent | Unreadable]) -> bool:
        """Whether the session's own messages start after more messages than damaged records
        could hold: it was a fork, and its parent is unknown."""
        first = next(
            (
                m.seq
                for a in window
                if not isinstance(a, Unreadable)
                if (m := carried_message(a.event)) is not None
            ),
            None,
        )
        return first is not None and first - 1 > damaged_before_message(window)

    def _holds_message(self, entry: Unreadable, window: list[RecordedEvent | Unreadable]) -> bool:
        """Whether the damaged record was a message, by what the records after it show."""
        assert self.state is not None
        last = self.state.last_seq
        needed = 0  # messages missing between the last folded one and the evidence ahead
        until = None  # the event seq of the next readable message
        for ahead in window:
            if isinstance(ahead, Unreadable):
                continue
            event = ahead.event
            message = carried_message(event)
            if message is not None and message.seq is not None:
                needed, until = max(needed, message.seq - 1 - last), ahead.seq
                break
            needed = max(needed, proves(event) - last)
        if self._forks is None:  # a fork between here and the next message shows its base
            self._forks = forks_of(self.log, self.session_id)
        shown = [
            at
            for point, at in self._forks
            if entry.seq <= point and (until is None or point < until)
        ]
        needed = max([needed, *(at_seq - last for at_seq in shown)])
        if needed <= 0:
            return False
        # A view served before the next damaged record that shows no new message says this one
        # was not a message; otherwise the earliest damaged records take the missing messages.
        for ahead in window:
            if isinstance(ahead, Unreadable):
                break
            event = ahead.event
            if isinstance(event, ViewServed):
                return event.through_seq > last
            if carried_message(event) is not None:
                break
        return True

    def _message(
        self, text: str, window: list[RecordedEvent | Unreadable], entry: Unreadable
    ) -> Message:
        """The stand-in: the first candidate role that keeps the history valid."""
        state = self.state
        assert state is not None
        marker = {"lost": "damaged"}
        results = [
            message
            for ahead in window
            if not isinstance(ahead, Unreadable)
            and (message := carried_message(ahead.event)) is not None
            and message.role == "tool"
        ]
        answered = {message.tool_call_id for message in results}
        open_calls = state.open_tool_calls()
        candidates = [
            Message(
                role="tool", content=text, tool_call_id=call.id, name=call.name, metadata=marker
            )
            for call in open_calls.values()
            if call.id not in answered
        ]
        orphans = [m for m in results if m.tool_call_id not in open_calls]
        if orphans:
            # Lost messages between it and the results, or between two of its results, can only
            # be results of its calls too: make a call for each, so their stand-ins answer it.
            seqs = [state.last_seq + 1, *(m.seq or 0 for m in results)]
            lost_results = sum(later - earlier - 1 for earlier, later in itertools.pairwise(seqs))
            calls = [ToolCall(m.tool_call_id or "", m.name or "unknown", "{}") for m in orphans]
            calls += [
                ToolCall(f"lost-{self.session_id}-{entry.seq}-{n}", "unknown", "{}")
                for n in range(lost_results)
            ]
            candidates.append(
                Message(role="assistant", content=text, tool_calls=tuple(calls), metadata=marker)
            )
        previous = state.history[-1].role if state.last_seq else None
        plain = "assistant" if previous in ("user", "tool") else "user"
        candidates.append(Message(role=plain, content=text, metadata=marker))
        # A candidate whose tool exchange a recorded cut would split goes last: the checkpoint
        # retaining from that cut would show a result without its call (or the reverse).
        seq = state.last_seq + 1
        calls_from = state.last_seq  # the message making the open calls: the last before results
        while calls_from and state.history[calls_from - 1].role == "tool":
            calls_from -= 1
        results_through = max((m.seq or 0 for m in orphans), default=seq)
        candidates.sort(key=lambda c: not self._cuts.allow(c, seq, calls_from, results_through))
        for candidate in candidates:
            try:
                (checked,) = state.check_append([candidate])
            except CtxLedgerError:
                continue
            return checked
        # Nothing fits (the log around the damage was not valid either): keep it plain.
        return candidates[-1].with_seq(state.last_seq + 1)


def walk_session(log: EventLog, session_id: str, through: int | None = None) -> SessionWalk:
    """Walk a session of a damaged log in memory (its fork ancestry walked the same way).

    Returns:
        The finished walk: its :attr:`~SessionWalk.state` folds everything that can be used,
        lost messages as stand-ins, and :attr:`~SessionWalk.replaced` lists the losses.

    Raises:
        Unsalvageable: Nothing of the session (or of a fork's parent) can be folded.
        EventDecodeError: The session's own entry cannot be read.
    """

    def fork_base(parent_id: str, parent_through: int) -> SessionState:
        parent = walk_session(log, parent_id, parent_through)
        if parent.state is None:
            raise Unsalvageable(f"its fork parent {parent_id!r} has no events")
        return parent.state

    walk = SessionWalk(log, session_id, fork_base, through)
    for _ in walk.records():
        pass
    return walk
