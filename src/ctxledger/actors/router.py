"""Routing commands to a host's history actors, and restarting one that died.

Each session belongs to one history actor, chosen by a hash of its id. The router is the
actors' supervisor (one-for-one, as in Erlang): an actor found dead while the host is open is
replaced by a fresh one under the same number, which reloads its sessions from the log on their
next command, so that no session is ever left pointing at a dead mailbox. A command that lands
in the inbox of an actor just as it dies or stops is taken out again and handed to its successor
(or, once the host is closed, failed with :class:`~ctxledger.errors.HostClosedError`): no caller
waits for an answer that cannot come.

The router holds no reference to its :class:`~ctxledger.actors.host.Host`, so that a host
dropped without ``close()`` can be garbage-collected (and warn about it).
"""

from __future__ import annotations

import contextlib
import threading
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import pykka

from ctxledger._logging import get_logger
from ctxledger.actors.failures import hand_to, internal, stranded_commands
from ctxledger.actors.messages import Command
from ctxledger.errors import HostClosedError

if TYPE_CHECKING:
    from ctxledger.actors.history import HistoryActor

__all__ = ["HistoryRouter"]

_log = get_logger(__name__)


class HistoryRouter:
    """The history actors of a host, by number, and the commands' way to them.

    Args:
        start: Starts history actor number ``n`` and returns its ref.
        count: How many history actors the host runs.
        actors: The list to keep their refs in (shared with the actors themselves).
    """

    def __init__(
        self,
        start: Callable[[int], pykka.ActorRef[HistoryActor]],
        count: int,
        actors: list[pykka.ActorRef[HistoryActor]],
        instances: dict[int, HistoryActor] | None = None,
    ) -> None:
        self._start = start
        self._lock = threading.Lock()
        self.closed = False
        self.actors: list[pykka.ActorRef[HistoryActor]] = actors
        self._instances: dict[int, HistoryActor] = {} if instances is None else instances
        actors[:] = [start(number) for number in range(count)]

    def number(self, session_id: str) -> int:
        """The number of the history actor that owns ``session_id``."""
        return zlib.crc32(session_id.encode("utf-8", "surrogatepass")) % len(self.actors)

    def owner(self, session_id: str) -> pykka.ActorRef[HistoryActor]:
        """The history actor that owns ``session_id``."""
        return self.actors[self.number(session_id)]

    def run_inline(self, session_id: str, command: Command, *, wait: bool = True) -> bool:
        """Carry ``command`` out on the calling thread if the owner of ``session_id`` is idle
        (see :mod:`ctxledger.actors.inline`; ``wait``: a lone writer may wait for the owner's
        own work); return whether it was."""
        number = self.number(session_id)
        actor = self._instances.get(number)
        return (
            actor is not None
            and actor.actor_ref is self.actors[number]  # not a stopped predecessor
            and actor.run_inline(command, wait=wait)
        )

    def tell(self, session_id: str, command: Command) -> None:
        """Hand ``command`` to the owner of ``session_id``.

        Raises:
            HostClosedError: The host is closed.
        """
        number = self.number(session_id)
        for _attempt in range(3):
            ref = self.actors[number]
            try:
                ref.tell(command)
            except pykka.ActorDeadError:
                if self.restart(number, ref) is None:
                    raise HostClosedError("the host is closed") from None
                continue
            if not ref.is_alive():  # it died or stopped just now: the command may be stranded
                self.rescue(number, ref)
            return
        raise internal(f"history actor {number} died at every start")

    def restart(
        self, number: int, dead: pykka.ActorRef[HistoryActor]
    ) -> pykka.ActorRef[HistoryActor] | None:
        """Return the successor of ``dead`` (history actor ``number``), starting it if need be;
        None once the host is closed."""
        with self._lock:
            if self.closed:
                return None
            current = self.actors[number]
            if current is dead:
                _log.error("history_actor_restarted", actor=number)
                current = self.actors[number] = self._start(number)
            return current

    def rescue(self, number: int, dead: pykka.ActorRef[HistoryActor]) -> None:
        """Hand the commands stranded in the inbox of ``dead`` to its successor (or fail them
        once the host is closed)."""
        commands = stranded_commands(dead)
        if commands:
            hand_to(self.restart(number, dead), commands, f"history actor {number}")

    def close(self, timeout: float) -> None:
        """Stop the actors, failing every command they had not started; no restart after this."""
        with self._lock:
            self.closed = True
        for number, ref in enumerate(self.actors):
            with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
                ref.stop(block=True, timeout=timeout)
            self.rescue(number, ref)
