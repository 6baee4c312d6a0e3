"""The projection and budget actors: each keeps a replica of the session state.

The history actor is the single writer; after every durable append it *tells* each replica the
recorded events. A replica only folds what it is told, so its state never runs ahead of the log.
Because a pykka mailbox is FIFO, a request sent after an append has returned always sees that
append.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pykka
import structlog

from ctxledger.checkpoints import Checkpoint
from ctxledger.domain import (
    CompactionPlan,
    CompactionResult,
    ModelView,
    SessionState,
    Tokenizer,
    build_view,
    complete_compaction,
    estimate_tokens,
    plan_compaction,
)
from ctxledger.storage import RecordedEvent

__all__ = ["BudgetActor", "ProjectionActor", "Published"]


class Published:
    """Pykka message: events that are now durable in the log, in log order."""

    __slots__ = ("records",)

    def __init__(self, records: Sequence[RecordedEvent]) -> None:
        self.records = records


class _ReplicaActor(pykka.ThreadingActor):
    """Folds published events into its own :class:`SessionState`."""

    actor_name = "replica"

    def __init__(self, state: SessionState, tokenizer: Tokenizer) -> None:
        super().__init__()
        self._state = state
        self._tokenizer = tokenizer
        self._log: Any = None

    def on_start(self) -> None:
        # Bind inside the actor thread: contextvars do not cross threads.
        self._log = structlog.get_logger().bind(
            session_id=self._state.session_id, actor=self.actor_name
        )

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Published):
            for record in message.records:
                self._state.apply(record.event)
            return None
        return super().on_receive(message)


class ProjectionActor(_ReplicaActor):
    """Keeps the session's view inputs materialised and serves model views."""

    actor_name = "projection"

    def build(self) -> ModelView:
        """Build the current model view (pure projection of the replica)."""
        return build_view(self._state, tokenizer=self._tokenizer)


class BudgetActor(_ReplicaActor):
    """Estimates the session's tokens and decides when and where to compact."""

    actor_name = "budget"

    def estimate(self, pending: str = "") -> int:
        """Return the current token estimate (DESIGN §2 budget formula)."""
        return estimate_tokens(self._state, tokenizer=self._tokenizer, pending=pending)

    def plan(
        self, trigger: str, pending: str, focus: str | None, attempt: int
    ) -> CompactionPlan | CompactionResult:
        """Plan a compaction, or return the reason none should run."""
        outcome = plan_compaction(
            self._state,
            tokenizer=self._tokenizer,
            trigger=trigger,  # type: ignore[arg-type]
            pending=pending,
            focus=focus,
            attempt=attempt,
        )
        self._log.debug(
            "compaction_decided",
            trigger=trigger,
            decision="plan" if isinstance(outcome, CompactionPlan) else outcome.reason,
            seq=self._state.last_seq,
        )
        return outcome

    def complete(
        self,
        plan: CompactionPlan,
        summary: str,
        checkpoint_id: str,
        created_at: float,
        summarizer: str = "",
        summary_seconds: float = 0.0,
    ) -> tuple[Checkpoint, CompactionResult]:
        """Turn a summary into the checkpoint to persist and the result to return."""
        return complete_compaction(
            self._state,
            plan,
            summary,
            checkpoint_id=checkpoint_id,
            created_at=created_at,
            tokenizer=self._tokenizer,
            summarizer=summarizer,
            summary_seconds=summary_seconds,
        )
