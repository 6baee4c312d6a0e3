"""The loss audit: which facts of the messages a checkpoint summarised its view no longer shows.

A pure function of the fold: given the state right after a checkpoint was recorded, take the
messages it newly covered (after the checkpoint it extended, head system messages excluded),
extract their facts (:mod:`ctxledger.domain.facts`) and look each one up in the view that
checkpoint gave (summary, fact block, pinned messages and the retained tail). The log is never
needed beyond that state, so the report is the same live, after recovery and offline.
"""

from __future__ import annotations

import msgspec

from ctxledger.domain.facts import FACT_KINDS, Fact, extract_facts, shown_text
from ctxledger.domain.projection import assemble
from ctxledger.domain.state import SessionState
from ctxledger.errors import InvalidCheckpointError

__all__ = ["KindCount", "LossReport", "audit_checkpoint"]


class KindCount(msgspec.Struct, frozen=True, kw_only=True):
    """The facts of one kind in a :class:`LossReport`.

    Attributes:
        facts: Facts of this kind in the covered messages.
        kept: Of those, shown by the new view.
        lost: Of those, not shown.
    """

    facts: int
    kept: int
    lost: int


class LossReport(msgspec.Struct, frozen=True, kw_only=True):
    """What one compaction lost: the facts of its covered messages its view no longer shows.

    Attributes:
        session_id: The session.
        checkpoint_id: The audited checkpoint.
        previous_checkpoint_id: The checkpoint it extended (its covered messages start after
            that one's), if any.
        reason: Why the checkpoint was made (``threshold_exceeded``, ``prompt_too_long`` or
            ``manual``).
        created_at: When it was made (unix time).
        first_seq: The first seq it newly covered.
        covers_through_seq: The last seq it covers.
        messages: Messages it newly covered (head system messages excluded).
        counts: Per fact kind (every kind of :data:`~ctxledger.domain.facts.FACT_KINDS`).
        kept: The facts the new view shows, oldest first.
        lost: The facts it does not show, oldest first, each with the newest covered message
            that holds it.
    """

    session_id: str
    checkpoint_id: str
    previous_checkpoint_id: str | None
    reason: str
    created_at: float
    first_seq: int
    covers_through_seq: int
    messages: int
    counts: dict[str, KindCount]
    kept: tuple[Fact, ...]
    lost: tuple[Fact, ...]

    @property
    def facts(self) -> int:
        """All facts of the covered messages."""
        return len(self.kept) + len(self.lost)

    @property
    def retention(self) -> float | None:
        """The share of facts kept (``None`` when the covered messages hold none)."""
        return len(self.kept) / self.facts if self.facts else None


def audit_checkpoint(state: SessionState) -> LossReport:
    """Audit the checkpoint ``state`` has just recorded (its active one).

    Args:
        state: The fold right after the checkpoint's ``CheckpointCreated`` event: the view it
            gives is the one served next. (A later state would look the facts up in a later
            view; rebuild the state at the checkpoint instead, as
            :meth:`ctxledger.Session.audit` and :func:`ctxledger.replay.audit` do.)

    Returns:
        The report.

    Raises:
        InvalidCheckpointError: ``state`` has no active checkpoint.
    """
    checkpoint = state.active_checkpoint
    if checkpoint is None:
        raise InvalidCheckpointError(f"session {state.session_id!r} has no checkpoint to audit")
    checkpoints = state.checkpoints
    previous = checkpoints[-2] if len(checkpoints) >= 2 else None
    base = previous.retain_from_seq if previous is not None else 1
    covered = [
        message
        for message in state.history[base - 1 : checkpoint.retain_from_seq - 1]
        if not state.is_head(message)
    ]
    shown = shown_text(assemble(state, checkpoint))
    kept: list[Fact] = []
    lost: list[Fact] = []
    for fact in extract_facts(covered):
        (kept if fact.text in shown else lost).append(fact)
    counts: dict[str, KindCount] = {}
    for kind in FACT_KINDS:
        held = sum(fact.kind == kind for fact in kept)
        missing = sum(fact.kind == kind for fact in lost)
        counts[kind] = KindCount(facts=held + missing, kept=held, lost=missing)
    return LossReport(
        session_id=state.session_id,
        checkpoint_id=checkpoint.id,
        previous_checkpoint_id=checkpoint.previous_checkpoint_id,
        reason=checkpoint.reason,
        created_at=checkpoint.created_at,
        first_seq=base,
        covers_through_seq=checkpoint.covers_through_seq,
        messages=len(covered),
        counts=counts,
        kept=tuple(kept),
        lost=tuple(lost),
    )
