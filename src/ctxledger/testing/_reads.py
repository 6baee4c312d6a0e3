"""The reads of :class:`~ctxledger.testing.DomainSession`: ``Session``'s, on the folded state
and its log (and where a fork of it starts, which records nothing in it)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ctxledger.actors.arguments import check_limit, check_seq, check_text
from ctxledger.actors.session import check_session_id
from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config
from ctxledger.domain.audit import LossReport
from ctxledger.domain.commands import fork_events
from ctxledger.domain.cost import Pricing
from ctxledger.domain.placement import Placement, place_message
from ctxledger.domain.state import SessionState
from ctxledger.domain.tokenizer import Tokenizer
from ctxledger.domain.usage import UsageTotals
from ctxledger.domain.view import ModelView
from ctxledger.domain.withdrawal import shown_messages
from ctxledger.errors import InvalidArgumentError, InvalidSeqError, SessionExistsError
from ctxledger.events.types import Event
from ctxledger.messages import Message
from ctxledger.replay import audit as audit_log
from ctxledger.replay import view_at as view_at_log
from ctxledger.replay.loading import fold_session, fork_point
from ctxledger.replay.recall_index import DEFAULT_RECALL_LIMIT, RecallHit, answer_tool_call, recall
from ctxledger.storage.memory import MemoryEventLog

__all__ = ["SessionReads"]


class SessionReads:
    """What a :class:`ctxledger.Session` answers without recording, computed on :attr:`state`
    by the same domain functions the host's history actor answers with."""

    state: SessionState
    events: list[Event]
    tokenizer: Tokenizer
    _opened_with: Config
    #: The events of the sessions a fork descends from, by id, the parent last (empty if none).
    _lineage: dict[str, list[Event]]

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
        self._check_message_seq(seq)
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

    def recall(self, query: str, *, limit: int = DEFAULT_RECALL_LIMIT) -> list[RecallHit]:
        """Search the messages the view no longer shows raw (``Session.recall``:
        :func:`ctxledger.replay.recall_index.recall` over :attr:`events`).

        Raises:
            InvalidQueryError: ``query`` is not text or ``limit`` is out of range.
        """
        return recall(self._log(), self.state, query, limit=limit)

    def call_tool(self, name: str, arguments: str | dict[str, Any]) -> str:
        """Answer a model's call of a ctxledger tool (``Session.call_tool``).

        Raises:
            InvalidToolCallError: No such tool, or invalid arguments.
        """
        return answer_tool_call(self.recall, name, arguments)

    def _check_message_seq(self, seq: int) -> None:
        """Check that ``seq`` names a message of the session, as the host's session does."""
        check_seq(self.id, seq)
        if not 0 <= seq <= self.state.last_seq:
            raise InvalidSeqError(f"session {self.id!r} has no message with seq {seq!r}")

    def replay(self, events: Iterable[Event] | None = None) -> SessionState:
        """Fold ``events`` (default: all recorded) into a fresh state (a fork's over its
        parent's prefix, as :func:`ctxledger.replay.loading.fold_session` folds it)."""
        if self._lineage:
            return fold_session(self._log(None if events is None else list(events)), self.id)[0]
        state = SessionState.new(self.state.session_id, self._opened_with)
        for event in self.events if events is None else events:
            state.apply(event)
        return state

    def _fork_start(
        self, new_id: str, at_seq: int | None
    ) -> tuple[SessionState, list[Event], Config, dict[str, list[Event]]]:
        """The state, first events, Config and lineage of fork ``new_id`` at ``at_seq`` (what
        :meth:`DomainSession.fork` starts from), decided as the host decides them: the fork
        point found as ``Host`` finds it, the events of
        :func:`ctxledger.domain.commands.fork_events`, the state folded by
        :func:`ctxledger.replay.loading.fold_session`. Nothing is recorded in this session.

        Raises:
            InvalidSessionIdError: ``new_id`` cannot name a session.
            InvalidSeqError: ``at_seq`` is not an int, or names no message.
            SessionExistsError: ``new_id`` is this session's or an ancestor's.
        """
        check_session_id(new_id)
        if at_seq is not None:
            self._check_message_seq(at_seq)
        if new_id == self.id or new_id in self._lineage:
            raise SessionExistsError(f"session {new_id!r} already exists")
        log = self._log()
        owner, at, event_seq, prefix = fork_point(
            log, self.id, at_seq, self.state.last_seq, len(self.events)
        )
        config = prefix.config
        events = fork_events(
            new_id, parent_id=owner, at_seq=at, parent_event_seq=event_seq, config=config
        )
        log.append(new_id, events, expected_seq=0)
        lineage = {**self._lineage, self.id: list(self.events)}
        return fold_session(log, new_id)[0], events, config, lineage

    def _log(self, events: Sequence[Event] | None = None) -> MemoryEventLog:
        """The recorded events (or ``events``) in an in-memory log, as the host's log holds
        them, after those of the sessions a fork descends from."""
        log = MemoryEventLog()
        for session_id, logged in self._lineage.items():
            log.append(session_id, logged, expected_seq=0)
        log.append(self.id, self.events if events is None else events, expected_seq=0)
        return log
