"""Measuring cuts: the tokens of the view a candidate cut would make, step-level cut search,
and the small values the policy's steps pass each other (:mod:`ctxledger.domain.policy`)."""

from __future__ import annotations

from typing import NamedTuple

from ctxledger.checkpoints import Checkpoint, CheckpointReason
from ctxledger.domain._compaction_plan import TRIGGERS, Trigger
from ctxledger.domain.projection import FACTS_SEPARATOR, assemble, slot_seqs
from ctxledger.domain.render import render_message, render_policy
from ctxledger.domain.state import SessionState
from ctxledger.domain.tokenizer import Tokenizer
from ctxledger.domain.view import Draft
from ctxledger.messages import Message

__all__ = [
    "STEP_CUT_FILL",
    "TRIGGERS",
    "Cut",
    "CutMeasure",
    "CutRequest",
    "Marks",
    "Rooms",
    "Skip",
    "Trigger",
    "newest_cut",
]


#: A step-level cut keeps the raw tail within this share of the room left after the system
#: messages, the pinned slot and summary, so that the next compaction is not due on the very
#: next step.
STEP_CUT_FILL = 0.5


class CutMeasure:
    """Measures the view a cut would make, with a summary of the full reserved size."""

    def __init__(
        self,
        state: SessionState,
        tokenizer: Tokenizer,
        reason: CheckpointReason,
        max_chars: int,
        pending: str,
    ) -> None:
        self.state = state
        self.tokenizer = tokenizer
        self.reason = reason
        self.placeholder = "x" * max_chars
        self.extra = [Message(role="user", content=pending)] if pending else []
        self._exact: dict[int, int] = {}

    def exact(self, cut: int) -> int:
        """Tokens of the view retaining from ``cut`` (pending text included)."""
        if cut not in self._exact:
            checkpoint = Checkpoint(
                id="",
                summary=self.placeholder,
                retain_from_seq=cut,
                covers_through_seq=cut - 1,
                reason=self.reason,
            )
            messages = assemble(self.state, checkpoint)
            self._exact[cut] = self.tokenizer.count_messages([*messages, *self.extra])
        return self._exact[cut]

    def step_cut(self, lower: int, room: int, fill: float) -> int | None:
        """Return the earliest boundary from ``lower`` on whose view fits, else the last one.

        The tail aims at ``fill`` of the room left by the fixed part (system messages, the pinned
        slot with the kept first request, summary). Per-message costs are summed with one token
        of slack each, so the sum bounds the default tokenizer's total; each pick is then checked
        exactly.
        """
        state = self.state
        candidates = state.boundaries_between(lower, state.last_seq)
        if not candidates:
            return None
        # Nothing raw but the slot (pins, the kept first request): the part no cut removes.
        fixed = self.exact(state.last_seq + 1)
        budget = fixed + int(max(0, room - fixed) * fill)
        always = set(slot_seqs(state, state.last_seq + 1))
        policy = render_policy(state)
        count = self.tokenizer.count_message
        suffix: dict[int, int] = {}
        total = 0
        wanted = set(candidates)
        retracted = state.retracted
        for seq in range(state.last_seq, candidates[0] - 1, -1):
            message = state.history[seq - 1]
            if seq not in always and seq not in retracted and not state.is_head(message):
                total += count(render_message(state, policy, message)) + 1
            if seq in wanted:
                suffix[seq] = total
        for seq in candidates:
            if fixed + suffix[seq] <= budget and self.exact(seq) <= budget:
                return seq
        return candidates[-1]


class Marks(NamedTuple):
    """The marks in force for a state, in tokens.

    Attributes:
        threshold: The high mark (fixed, or the dynamic policy's value now).
        target: The low mark (the threshold itself for a one-mark Config).
        prepare: Where a summary starts in the background (0: never).
        one_mark: A Config recorded before the marks (schema 3): the target is the threshold.
        overshoot: How far the step that reaches the threshold may pass it, for judging
            whether a summary prepared ahead absorbs the growth
            (:func:`ctxledger.domain.policy.extend_due`); None: a quarter of the room between
            the prepare point and the threshold (schema 4).
    """

    threshold: int
    target: int
    prepare: int
    one_mark: bool = False
    overshoot: int | None = None


class Rooms(NamedTuple):
    """Characters reserved for a checkpoint's summary and for its fact block (0: none)."""

    summary: int
    facts: int

    @property
    def reserve(self) -> int:
        """Characters the summary message takes with both texts at full size."""
        return self.summary + (len(FACTS_SEPARATOR) + self.facts if self.facts else 0)


class CutRequest(NamedTuple):
    """What a cut is planned for.

    Attributes:
        state: The session.
        tokenizer: Counts tokens (the session's).
        trigger: ``threshold_exceeded``, ``manual`` or ``prompt_too_long``.
        pending: Text about to be sent with the view.
        attempt: The reactive retry number.
        draft: The view as it is (under the prepared summary, when planning from one).
        marks: The marks in force.
        base: The first seq the summary does not cover yet.
        ahead: Planned ahead of need (a background summary below the threshold).
    """

    state: SessionState
    tokenizer: Tokenizer
    trigger: Trigger
    pending: str
    attempt: int
    draft: Draft
    marks: Marks
    base: int
    ahead: bool


class Cut(NamedTuple):
    """A planned cut: where, its rooms and what the view will be."""

    seq: int
    step_level: bool
    rooms: Rooms
    aim: int
    planned: int
    floor: int


class Skip(NamedTuple):
    """No cut: why (a ``CompactionResult.reason``), with what was measured."""

    reason: str
    floor: int = 0
    planned: int = 0


def newest_cut(state: SessionState, base: int) -> int:
    """The deepest cut: everything before the newest step summarised."""
    newest = state.boundary_at_or_before(state.last_seq + 1)
    return max(newest, base) if newest is not None else base
