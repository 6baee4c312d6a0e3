"""Measuring cuts: the tokens of the view a candidate cut would make, and step-level cut search."""

from __future__ import annotations

from ctxledger.checkpoints import Checkpoint, CheckpointReason
from ctxledger.domain.projection import assemble, slot_seqs
from ctxledger.domain.render import render_message, render_policy
from ctxledger.domain.state import SessionState
from ctxledger.domain.tokenizer import Tokenizer
from ctxledger.messages import Message

__all__ = ["STEP_CUT_FILL", "CutMeasure"]

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
