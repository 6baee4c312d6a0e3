"""What every part of the :class:`~ctxledger.actors.Session` handle shares: its host, its id,
and the one way a call reaches the history actor that owns the session.

A handle holds no state and no thread: each call is a command (:mod:`ctxledger.actors.messages`)
told to the owner, answered through a reply slot the caller waits on (or awaits, for the
``a``-prefixed twins). :class:`SessionBase` sends them; the argument checks shared by a command
and its async twin are the functions below it.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import msgspec

from ctxledger._logging import get_logger
from ctxledger.actors.arguments import check_flag, check_text, usage_report
from ctxledger.actors.messages import Command, Decide, DecideStep, Execute, Query, Read
from ctxledger.actors.waiters import LoopWaiter, Reply, Waiter
from ctxledger.domain import Compact, ModelView, Serve, SessionState, Tokenizer, is_prompt_too_long
from ctxledger.domain.commands import Command as DomainCommand
from ctxledger.errors import InvalidSessionIdError
from ctxledger.messages import Message
from ctxledger.storage import EventLog
from ctxledger.storage import check_session_id as check_stored_id

__all__ = [
    "SessionBase",
    "SessionHost",
    "check_reactive_error",
    "check_session_id",
    "defer_flag",
    "loop_reply",
    "manual_request",
    "pending_text",
    "step_command",
    "with_appended_seqs",
]

# The logger of the Session handle, whichever of its modules logs.
_log = get_logger("ctxledger.actors.session")


class SessionHost(Protocol):
    """What a session needs of its host (the host imports the session's modules, never the
    reverse)."""

    log: EventLog
    tokenizer: Tokenizer

    def _tell(self, session_id: str, command: Command) -> None: ...

    def _submit(self, session_id: str, command: Command) -> None: ...

    def _call(self, session_id: str, command: Command) -> Any: ...


def check_session_id(session_id: object) -> None:
    """Check that ``session_id`` can name a session (:func:`ctxledger.storage.check_session_id`).

    Raises:
        InvalidSessionIdError: It is not a string, or breaks one of the rules for ids.
    """
    if not isinstance(session_id, str):
        raise InvalidSessionIdError(
            f"session id must be a string, got {type(session_id).__name__}", limit="a string"
        )
    check_stored_id(session_id)


class SessionBase:
    """The handle's host and id, and how its calls reach the session's owner."""

    def __init__(self, host: SessionHost, session_id: str) -> None:
        self._host = host
        self.id = session_id

    def __repr__(self) -> str:
        return f"<Session {self.id!r}>"

    def _call(self, command: Command) -> Any:
        return self._host._call(self.id, command)

    async def _acall(self, command: Command) -> Any:
        if isinstance(command, Execute | Decide):  # a step, an append, a view: may run inline
            self._host._submit(self.id, command)
        else:  # reads (which may read the log) and waits go through the mailbox
            self._host._tell(self.id, command)
        reply = command.reply
        assert isinstance(reply, LoopWaiter)
        return await reply.wait()

    def _decide(
        self, request: Serve | Compact, *, reactive: bool = False, defer_record: bool = False
    ) -> Any:
        return self._call(Decide(self.id, Waiter(), request, reactive, defer_record))

    async def _adecide(
        self, request: Serve | Compact, *, reactive: bool = False, defer_record: bool = False
    ) -> Any:
        return await self._acall(Decide(self.id, loop_reply(), request, reactive, defer_record))

    def _execute(self, command: DomainCommand) -> Any:
        return self._host._call(self.id, Execute(self.id, Waiter(), command))

    async def _aexecute(self, command: DomainCommand) -> Any:
        return await self._acall(Execute(self.id, loop_reply(), command))

    def _read(self, query: Query) -> Any:
        return self._call(Read(self.id, Waiter(), query))

    def _positions(self) -> tuple[int, int]:
        """Return (last message seq, last event seq)."""
        positions: tuple[int, int] = self._read(Query(what="positions"))
        return positions

    def _live_state(self) -> SessionState:
        """Return a copy of the owner's folded state (for equivalence tests)."""
        state: SessionState = self._read(Query(what="state"))
        return state


def pending_text(pending: object) -> str:
    """``pending`` checked as the text about to be sent with a view."""
    check_text("pending", pending, utf8=False)  # measured, never recorded
    return pending  # type: ignore[return-value]  # checked just above


def defer_flag(defer_record: object) -> bool:
    """``defer_record`` checked as a flag (``prepare_step(defer_record=...)``)."""
    check_flag("defer_record", defer_record)
    return defer_record  # type: ignore[return-value]  # checked just above


def step_command(
    session_id: str, reply: Reply, batch: tuple[Message, ...], pending: object, usage: object
) -> DecideStep:
    """The command of a step: append ``batch`` (after ``usage``) and serve the view for
    ``pending`` text."""
    request = Serve(pending=pending_text(pending))
    return DecideStep(session_id, reply, request, messages=batch, usage=usage_report(usage))


def with_appended_seqs(view: ModelView, count: int) -> ModelView:
    """``view`` with the seqs of the ``count`` messages its step appended.

    A session's commands run one at a time and a step's view is decided right after its
    messages are appended (a background compaction appends none), so they end at the view's
    newest seq.
    """
    if not count:
        return view
    last = view.through_seq
    return msgspec.structs.replace(view, appended_seqs=tuple(range(last - count + 1, last + 1)))


def manual_request(focus: object) -> Compact:
    """A manual compaction with ``focus`` checked (None or text for the summariser)."""
    check_text("focus", focus, optional=True)  # recorded with the compaction and checkpoint
    return Compact(trigger="manual", focus=focus)  # type: ignore[arg-type]  # checked above


def check_reactive_error(error: object) -> None:
    """Log (never refuse) an ``error`` given to a reactive compaction that does not look like a
    prompt-too-long rejection."""
    if error is not None and not is_prompt_too_long(error):
        _log.warning("reactive_compact_unrecognised_error", error=repr(error)[:200])


def loop_reply() -> Reply:
    """A reply slot awaited on the running event loop."""
    return LoopWaiter(asyncio.get_running_loop())
