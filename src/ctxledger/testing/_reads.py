"""The reads of :class:`~ctxledger.testing.DomainSession`: ``Session``'s, on the folded state."""

from __future__ import annotations

from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config
from ctxledger.domain.cost import Pricing
from ctxledger.domain.placement import Placement, place_message
from ctxledger.domain.state import SessionState
from ctxledger.domain.usage import UsageTotals
from ctxledger.domain.withdrawal import shown_messages
from ctxledger.errors import InvalidArgumentError
from ctxledger.messages import Message
from ctxledger.runtime.arguments import check_limit, check_seq

__all__ = ["SessionReads"]


class SessionReads:
    """What a :class:`ctxledger.Session` answers without recording, computed on :attr:`state`
    by the same domain functions the host's history actor answers with."""

    state: SessionState

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
