"""The reads of :class:`~ctxledger.testing.DomainSession`: ``Session``'s, on the folded state."""

from __future__ import annotations

from ctxledger.actors.arguments import check_limit, check_seq, check_text
from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config
from ctxledger.domain.audit import LossReport
from ctxledger.domain.cost import Pricing
from ctxledger.domain.placement import Placement, place_message
from ctxledger.domain.state import SessionState
from ctxledger.domain.tokenizer import Tokenizer
from ctxledger.domain.usage import UsageTotals
from ctxledger.domain.view import ModelView
from ctxledger.domain.withdrawal import shown_messages
from ctxledger.errors import InvalidArgumentError, InvalidSeqError
from ctxledger.events.types import Event
from ctxledger.messages import Message
from ctxledger.replay import audit as audit_log
from ctxledger.replay import view_at as view_at_log
from ctxledger.storage.memory import MemoryEventLog

__all__ = ["SessionReads"]


class SessionReads:
    """What a :class:`ctxledger.Session` answers without recording, computed on :attr:`state`
    by the same domain functions the host's history actor answers with."""

    state: SessionState
    events: list[Event]
    tokenizer: Tokenizer

    @property
    def id(self) -> str:
        """The session id (as :attr:`ctxledger.Session.id`)."""
        return self.state.session_id

    @property
    def config(self) -> Config:
        """The Config in force (``Session.config``)."""
        return self.state.config

    def usage(self) -> UsageTotals:
        """Return the cumulative usage reported (``Session.usage``)."""
        return self.state.accounting.totals

    def cost(self, pricing: Pricing) -> float:
        """Return what the reported usage costs under ``pricing`` (``Session.cost``).

        Raises:
            InvalidArgumentError: ``pricing`` is not a :class:`ctxledger.Pricing`.
        """
        if not isinstance(pricing, Pricing):
            raise InvalidArgumentError(
                "pricing", f"expected a ctxledger.Pricing, got {type(pricing).__name__}"
            )
        return pricing.cost(self.usage())

    def history(self) -> list[Message]:
        """Return every appended message with its seq, unaltered (``Session.history``)."""
        return list(self.state.history)

    def checkpoints(self) -> list[Checkpoint]:
        """Return every checkpoint made so far, oldest first (``Session.checkpoints``)."""
        return list(self.state.checkpoints)

    def current_messages(self, limit: int | None = None) -> list[Message]:
        """Return the messages still in the conversation (``Session.current_messages``).

        Raises:
            InvalidArgumentError: ``limit`` is not a non-negative integer.
        """
        check_limit(limit)
        return shown_messages(self.state, limit)

    def explain(self, seq: int) -> Placement:
        """Say where message ``seq`` is in the current view (``Session.explain``).

        Raises:
            InvalidSeqError: No message has that seq.
        """
        check_seq(self.id, seq)
        return place_message(self.state, seq)

    def view_at(self, seq: int) -> ModelView:
        """Return the view served (or that would have been served) while ``seq`` was the
        newest (``Session.view_at``: :func:`ctxledger.replay.view_at` over :attr:`events`).

        Raises:
            InvalidSeqError: ``seq`` names no message.
        """
        check_seq(self.id, seq)
        if not 0 <= seq <= self.state.last_seq:
            raise InvalidSeqError(f"session {self.id!r} has no message with seq {seq!r}")
        return view_at_log(self._log(), self.id, seq, tokenizer=self.tokenizer)

    def audit(self, checkpoint_id: str | None = None) -> LossReport:
        """Report what a compaction lost (``Session.audit``: :func:`ctxledger.replay.audit`
        over :attr:`events`).

        Raises:
            InvalidCheckpointError: The session has no checkpoint, or none with that id.
            InvalidArgumentError: ``checkpoint_id`` is not None or a string.
        """
        check_text("checkpoint_id", checkpoint_id, optional=True)
        return audit_log(self._log(), self.id, checkpoint_id)

    def _log(self) -> MemoryEventLog:
        """The recorded events in an in-memory log, as the host's log holds them."""
        log = MemoryEventLog()
        log.append(self.id, self.events, expected_seq=0)
        return log
