"""What a failed request leaves behind: the error its caller gets, and nothing else.

Supervision as Erlang and Akka mean it, at the grain of one request: an exception while an
actor handles a message fails the request(s) that message belongs to, with a ``ctxledger``
error, and the actor goes on serving every other session. These helpers are the pieces the
actors share: the error a caller gets (:func:`refused` for a batch the log would not take,
:func:`internal` for a defect), the ERROR log line of every failure, the commands stranded in
the inbox of an actor that died or stopped (:func:`stranded_commands`), and
:class:`LoggedFailures`, which makes a pykka actor log its death under ``ctxledger.*`` (pykka's
own log line goes to the ``pykka`` logger, which applications rarely watch).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, Generic, TypeVar

import pykka

from ctxledger._logging import get_logger
from ctxledger.actors.messages import Command
from ctxledger.errors import (
    CtxLedgerError,
    HostClosedError,
    InternalError,
    InvalidMessageError,
)

__all__ = [
    "LoggedFailures",
    "Restarting",
    "hand_to",
    "internal",
    "log_failure",
    "refused",
    "stranded_commands",
]

_log = get_logger(__name__)

A = TypeVar("A", bound=pykka.Actor)

#: Exceptions the log's checks raise on the caller's data (an encoder's refusal, a recursion
#: limit hit by deeply nested metadata): the caller's fault, not a defect.
_DATA_ERRORS = (TypeError, ValueError, OverflowError, RecursionError)


def refused(exc: BaseException) -> CtxLedgerError:
    """The error of a batch the event log refused before queueing it.

    A ``ctxledger`` error is kept; an encoder's complaint about the data (``TypeError``,
    ``ValueError``, ``OverflowError``, ``RecursionError``) becomes
    :class:`~ctxledger.errors.InvalidMessageError`; anything else is a defect
    (:class:`~ctxledger.errors.InternalError`). The original is the ``__cause__``.
    """
    if isinstance(exc, CtxLedgerError):
        return exc
    error: CtxLedgerError
    if isinstance(exc, _DATA_ERRORS):
        error = InvalidMessageError(
            f"the event log cannot store the batch: {type(exc).__name__}: {_short(exc)}",
            limit="encodable as msgpack (JSON-like values, valid UTF-8 text, bounded nesting)",
        )
    else:
        error = internal(f"the event log failed to take the batch: {exc!r}")
    error.__cause__ = exc
    return error


def internal(what: str, cause: BaseException | None = None) -> InternalError:
    """An :class:`~ctxledger.errors.InternalError` saying ``what``, caused by ``cause``."""
    error = InternalError(f"{what} (a ctxledger defect, logged with its traceback)")
    error.__cause__ = cause
    return error


def log_failure(event: str, exc: BaseException, **bound: Any) -> None:
    """Log an actor's failure at ERROR under ``ctxledger.*``, with its traceback."""
    _log.error(event, error=_short(exc), exc_info=(type(exc), exc, exc.__traceback__), **bound)


def stranded_commands(ref: pykka.ActorRef[A]) -> list[Command]:
    """Empty the inbox of an actor that died or stopped; return the commands found there.

    pykka drops the messages a stopped actor never handled; callers waiting on one of these
    commands would wait forever. A message someone waits on through pykka (a proxy call) gets
    ``ActorDeadError``, as pykka would give it; the other messages (reports of the actor's own
    work) are dropped: that work ended with the actor. Safe to call from several threads at
    once: each message is taken once.
    """
    inbox = ref.actor_inbox
    commands: list[Command] = []
    while True:
        try:
            envelope = inbox.get_nowait()  # type: ignore[attr-defined]
        except queue.Empty:
            return commands
        message = getattr(envelope, "message", None)
        reply_to = getattr(envelope, "reply_to", None)
        if isinstance(message, Command):
            commands.append(message)
        elif reply_to is not None:
            dead = pykka.ActorDeadError(f"{ref} stopped before handling the message")
            reply_to.set_exception(exc_info=(type(dead), dead, None))


def hand_to(successor: pykka.ActorRef[A] | None, commands: list[Command], name: str) -> None:
    """Hand ``commands`` (none of them started) to ``successor``, the actor that replaced
    ``name``; with no successor (the host is closed) they fail with ``HostClosedError``."""
    for command in commands:
        if successor is None:
            command.reply.resolve(None, HostClosedError("the host is closed"))
            continue
        try:
            successor.tell(command)
        except pykka.ActorDeadError:
            command.reply.resolve(None, internal(f"the successor of {name} died at its start"))


class LoggedFailures:
    """Mixin for a pykka actor: log its death at ERROR under ``ctxledger.*``."""

    def on_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Log the exception that ended the actor."""
        if exception_value is not None:
            log_failure("actor_failed", exception_value, actor=type(self).__name__)


class Restarting(Generic[A]):
    """A ref to a host's actor that is started afresh when it is found dead (restart on use).

    Its state (say, the budget actor's queue of background compactions) is lost with it; what it
    decides is an optimisation that the requests themselves never wait for. Once stopped, messages
    to it are dropped.

    Args:
        start: Starts the actor and returns its ref.
        name: Named in the log line of a restart.
    """

    def __init__(self, start: Callable[[], pykka.ActorRef[A]], name: str) -> None:
        self._start = start
        self._name = name
        self._lock = threading.Lock()
        self._stopped = False
        self.ref = start()

    def tell(self, message: object) -> None:
        """Tell the actor ``message``, starting it again first if it died."""
        ref = self.ref
        try:
            ref.tell(message)
        except pykka.ActorDeadError:
            with self._lock:
                if self._stopped:
                    return
                if self.ref is ref:
                    _log.error("actor_restarted", actor=self._name)
                    self.ref = self._start()
                ref = self.ref
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(message)

    def stop(self, timeout: float) -> None:
        """Stop the actor (after the messages before this), waiting at most ``timeout`` s."""
        with self._lock:
            self._stopped = True
        with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
            self.ref.stop(block=True, timeout=timeout)


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 300 else text[:300] + "…"
