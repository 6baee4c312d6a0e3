"""What a session's readable records tell about the messages a damaged record may have held.

A walk past damage (:mod:`ctxledger.replay.standins`) guesses a lost message from what surrounds
it. Two kinds of evidence come from records that are not messages: :func:`proves` (the newest
message seq a record shows existed, so the damaged record before it held a message) and
:func:`named_cut` (a message seq a compaction cut at). A cut is always a round boundary of the
history it was made on (a user or assistant message with no tool call open before it), because
the view retaining from it starts there: no tool exchange (a call and the results that answer
it) spans a cut. :class:`Cuts` checks a stand-in's role against every cut the session names, so
that the checkpoints recorded after a lost message still make views valid for a provider.
A third comes from other sessions: :func:`forks_of` (a fork taken at message ``at_seq`` shows
that the messages up to it existed at its fork point).
"""

from __future__ import annotations

from ctxledger.errors import CtxLedgerError
from ctxledger.events import (
    CheckpointCreated,
    CompactionStarted,
    Event,
    HistoryCleared,
    MessagePinned,
    MessageRetracted,
    SummaryPrepared,
    UsageReported,
    ViewServed,
)
from ctxledger.messages import Message
from ctxledger.replay.positions import fork_of
from ctxledger.storage import EventLog

__all__ = ["Cuts", "forks_of", "named_cut", "proves"]


def forks_of(log: EventLog, session_id: str) -> list[tuple[int, int]]:
    """The fork points of the forks ``log`` holds of ``session_id``: ``(parent_event_seq,
    at_seq)``, each showing that the session's messages up to ``at_seq`` existed by its event
    ``parent_event_seq``. A fork whose ``SessionForked`` (its second record) cannot be read
    shows nothing."""
    points = []
    for other in log.sessions():
        try:
            forked = fork_of(log, other)
        except CtxLedgerError:
            continue
        if forked is not None and forked.parent_id == session_id:
            points.append((forked.parent_event_seq, forked.at_seq))
    return points


def proves(event: Event) -> int:
    """The newest message seq that ``event`` shows existed when it was recorded (0: none)."""
    if isinstance(event, ViewServed | UsageReported):
        return event.through_seq
    if isinstance(event, CompactionStarted | SummaryPrepared):
        return max(event.covers_through_seq, event.retain_from_seq - 1)
    if isinstance(event, CheckpointCreated):
        checkpoint = event.checkpoint
        return max(checkpoint.covers_through_seq, checkpoint.retain_from_seq - 1)
    if isinstance(event, MessagePinned | MessageRetracted):
        return event.seq
    if isinstance(event, HistoryCleared):
        return event.through_seq
    return 0


def named_cut(event: Event) -> int | None:
    """The message seq a compaction recorded by ``event`` retains from, if it names one."""
    if isinstance(event, CompactionStarted | SummaryPrepared):
        return event.retain_from_seq
    if isinstance(event, CheckpointCreated):
        return event.checkpoint.retain_from_seq
    return None


class Cuts:
    """The cuts a session's records name: where no tool exchange may be split by a stand-in."""

    def __init__(self) -> None:
        self.seqs: set[int] = set()

    def add(self, event: Event) -> None:
        """Note the cut ``event`` names, if any."""
        cut = named_cut(event)
        if cut is not None:
            self.seqs.add(cut)

    def between(self, after: int, through: int) -> bool:
        """Whether a cut lies at a seq ``s`` with ``after < s <= through``."""
        return any(after < seq <= through for seq in self.seqs)

    def allow(self, candidate: Message, seq: int, calls_from: int, results_through: int) -> bool:
        """Whether ``candidate`` at message ``seq`` keeps every tool exchange off the cuts.

        Args:
            candidate: The stand-in.
            seq: Its message seq.
            calls_from: The seq of the message making the calls open before it.
            results_through: The last seq of the results that answer the candidate's calls.
        """
        if candidate.role == "tool":  # it ends the exchange its call began
            return not self.between(calls_from, seq)
        if candidate.tool_calls:  # it begins an exchange its results end
            return not self.between(seq, results_through)
        return True
