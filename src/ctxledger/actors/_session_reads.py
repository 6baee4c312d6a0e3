"""The reads of a :class:`~ctxledger.actors.Session`: what it holds, what it costs, and what
its compactions did (audit, explain, recall).

Each read is answered by the history actor that owns the session, after every command asked of
it before, or is a pure function of the log once those are durable: the substance is pure domain
code (:mod:`ctxledger.domain.audit`, :mod:`~ctxledger.domain.placement`), the folds in
:mod:`ctxledger.replay.loading` and the index in :mod:`ctxledger.replay.recall_index`, which the
offline :mod:`ctxledger.replay` functions of the same names call too: the answers are identical
live, after recovery and offline.
"""

from __future__ import annotations

from typing import Any

from ctxledger.actors._session_base import SessionBase
from ctxledger.actors.arguments import check_limit, check_seq, check_text
from ctxledger.actors.messages import Query
from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config
from ctxledger.domain import ModelView
from ctxledger.domain.audit import LossReport, audit_checkpoint
from ctxledger.domain.cost import Pricing
from ctxledger.domain.placement import Placement
from ctxledger.domain.usage import UsageTotals
from ctxledger.errors import InvalidArgumentError, InvalidSeqError
from ctxledger.messages import Message
from ctxledger.replay.loading import fold_view_at, state_at_checkpoint
from ctxledger.replay.recall_index import DEFAULT_RECALL_LIMIT, RecallHit, answer_tool_call, recall

__all__ = ["SessionReads"]


class SessionReads(SessionBase):
    """The reads of :class:`~ctxledger.actors.Session` (see the module docstring)."""

    def usage(self) -> UsageTotals:
        """Return the session's cumulative usage as the provider reported it.

        Input tokens (cached and cache writes included, and each broken out), output tokens and
        the number of model calls, summed over every ``record_usage`` of the session (a fork's
        include its parent's up to the fork point).
        """
        totals: UsageTotals = self._read(Query(what="usage"))
        return totals

    def cost(self, pricing: Pricing) -> float:
        """Return what the session's reported usage costs under ``pricing``, in dollars.

        Cached input, cache writes, other input and output tokens each at their price (see
        :class:`ctxledger.Pricing`; ``pricing.uncached()`` prices a provider without caching).
        """
        if not isinstance(pricing, Pricing):
            raise InvalidArgumentError(
                "pricing", f"expected a ctxledger.Pricing, got {type(pricing).__name__}"
            )
        return pricing.cost(self.usage())

    def history(self) -> list[Message]:
        """Return every appended message with its seq, unaltered."""
        history: list[Message] = self._read(Query(what="history"))
        return history

    def checkpoints(self) -> list[Checkpoint]:
        """Return every checkpoint made so far, oldest first (the last one is active)."""
        checkpoints: list[Checkpoint] = self._read(Query(what="checkpoints"))
        return checkpoints

    @property
    def config(self) -> Config:
        """The Config in force for this session."""
        config: Config = self._read(Query(what="config"))
        return config

    def view_at(self, seq: int) -> ModelView:
        """Return the view served (or that would have been served) while ``seq`` was the newest.

        See :func:`ctxledger.replay.view_at`; forks replay their parent's prefix.

        Raises:
            InvalidSeqError: ``seq`` names no message.
        """
        check_seq(self.id, seq)
        last_seq, _ = self._positions()
        if not 0 <= seq <= last_seq:
            raise InvalidSeqError(f"session {self.id!r} has no message with seq {seq!r}")
        host = self._host
        return fold_view_at(host.log, self.id, seq, tokenizer=host.tokenizer)

    def current_messages(self, limit: int | None = None) -> list[Message]:
        """Return the messages still in the conversation, oldest first (raw, never masked).

        Unlike :meth:`history` (every message ever appended), retracted and cleared messages are
        left out; messages covered by a checkpoint are included.

        Args:
            limit: Return only the newest ``limit`` messages.

        Raises:
            InvalidArgumentError: ``limit`` is not a non-negative integer (a ``ValueError``).
            HostClosedError: The host is closed.
        """
        check_limit(limit)
        shown: list[Message] = self._read(Query(what="shown", limit=limit))
        return shown

    def audit(self, checkpoint_id: str | None = None) -> LossReport:
        """Report what a compaction lost: the facts of its covered messages its view lacks.

        The same report as :func:`ctxledger.replay.audit` on the log (a pure function of it).

        Args:
            checkpoint_id: The checkpoint to audit; the active one when omitted.

        Raises:
            InvalidCheckpointError: The session has no checkpoint, or none with that id.
            InvalidArgumentError: ``checkpoint_id`` is not None or a string.
        """
        check_text("checkpoint_id", checkpoint_id, optional=True)
        self._positions()  # everything asked of the session so far is in the log
        return audit_checkpoint(state_at_checkpoint(self._host.log, self.id, checkpoint_id))

    def explain(self, seq: int) -> Placement:
        """Say where message ``seq`` is in the current view: raw, masked, truncated, pinned or
        summarised (and by which checkpoint, with its reason and time).

        Raises:
            InvalidSeqError: No message has that seq.
        """
        check_seq(self.id, seq)
        placement: Placement = self._read(Query(what="explain", seq=seq))
        return placement

    def recall(self, query: str, *, limit: int = DEFAULT_RECALL_LIMIT) -> list[RecallHit]:
        """Search the messages the view no longer shows raw (summarised, masked or truncated).

        Ranked by SQLite FTS5's BM25 over an index that is a projection of the log (see
        :mod:`ctxledger.replay.recall_index`).

        Args:
            query: Free text: words, a command, a file name, error text.
            limit: The most hits (1 to 50).

        Raises:
            InvalidQueryError: ``query`` is not text or ``limit`` is out of range.
        """
        return recall(self._host.log, self._live_state(), query, limit=limit)

    def call_tool(self, name: str, arguments: str | dict[str, Any]) -> str:
        """Answer a model's call of a ctxledger tool (see :mod:`ctxledger.tools`).

        Args:
            name: The tool the model called (``"recall"``).
            arguments: Its arguments, as JSON text (as providers deliver them) or decoded.

        Returns:
            The text to append as the tool result (``Message.tool(answer, call_id, name)``).

        Raises:
            InvalidToolCallError: No such tool, or invalid arguments (answer the call with
                ``str(error)`` so the model can correct it).
        """
        return answer_tool_call(self.recall, name, arguments)
