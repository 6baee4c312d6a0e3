"""A :class:`~ctxledger.testing.DomainSession` rebuilt from a recorded log, and what a host does
with such a session after a restart (:meth:`~Restarts.restart`: the domain's ``Recover``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Self

from ctxledger.config import Config
from ctxledger.domain.decide import Decision, Recover, Request
from ctxledger.domain.state import SessionState
from ctxledger.errors import InvalidArgumentError
from ctxledger.events.types import Event, SessionForked, SessionOpened

__all__ = ["Restarts"]


class Restarts:
    """:meth:`from_events` and :meth:`restart` of :class:`~ctxledger.testing.DomainSession`."""

    state: SessionState
    events: list[Event]
    _opened_with: Config

    if TYPE_CHECKING:  # DomainSession's

        def __init__(self, config: Config, **options: Any) -> None: ...

        def decide(self, request: Request) -> Decision: ...

        def record(self, event: Event) -> None: ...

    @classmethod
    def from_events(cls, events: Sequence[Event], **options: Any) -> Self:
        """The session whose log holds ``events`` (its own log, ``SessionOpened`` first, as
        ``[record.event for record in log.read(session_id)]`` reads it back), folded as a host
        folds it and nothing decided yet: call :meth:`restart` for what a host does first.

        Args:
            events: The session's recorded events, in order.
            options: :class:`~ctxledger.testing.DomainSession`'s keywords but ``session_id``
                (the log's): ``summarizer``, ``tokenizer``, ``clock``, ``id_factory`` (give one
                whose ids the log has not used, as the host's are unique).

        Raises:
            InvalidArgumentError: ``events`` is empty, does not start with ``SessionOpened``,
                or is a fork's (its first messages are in its parent's log, not in these), or
                ``session_id`` is given.
        """
        if "session_id" in options:
            raise InvalidArgumentError("session_id", "the log's SessionOpened names the session")
        events = list(events)
        opened = events[0] if events else None
        if not isinstance(opened, SessionOpened):
            raise InvalidArgumentError("events", "a session's log, SessionOpened first")
        if any(isinstance(event, SessionForked) for event in events):
            raise InvalidArgumentError(
                "events",
                f"session {opened.session_id!r} is a fork: its first messages are in its "
                "parent's log (start from the parent and fork it instead)"
            )
        session = cls(opened.config, session_id=opened.session_id, **options)
        session.events = []
        session.state = SessionState.new(opened.session_id, opened.config)
        for event in events:
            session.record(event)
        return session

    def restart(self) -> list[Event]:
        """Do what a host does the first time it uses this session after a (re)start, and
        return the events recorded (``decide(state, Recover())``, the function the history
        actor calls when it activates a session): a tool call left without its result gets an
        interrupted one (``ToolResultSynthesized``), and a background summary that was being
        made is recorded as failed (``CompactionFailed``, reason ``interrupted``), so that a
        new one may start. Nothing, for a session its process left in order.
        """
        before = len(self.events)
        self.decide(Recover())
        return self.events[before:]
