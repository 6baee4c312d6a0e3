"""A command carried out on its caller's thread while its history actor is idle.

A command of a blocking caller (``Session.append``, ``step``, ``prepare_step``...) takes two
thread hand-offs at least through the actor's mailbox: the caller wakes the history actor and
waits, the actor answers and wakes the caller. Each wake-up costs a few tens of microseconds,
and more when another thread holds the GIL (a framework's own threads, a summary on a
compaction thread): the caller's thread is woken only when it can take the GIL back.

When the session's history actor is idle (nothing in its mailbox and no message in hand), the
caller's thread carries the command out itself, as the actor would: under the actor's lock
(:attr:`CallerRuns._exclusive`, which the actor holds around every message it handles), so the
actor stays the single writer of its sessions (one thread at a time changes their state, in the
order the messages and commands arrived). With the journal idle too, the batch is committed on
the same thread (``GroupCommitter(inline_when_idle=True)``) and folded before the lock is
released: an append with no hand-off at all.

One thing can happen on a caller's thread that cannot on the actor's: an exception that is not
an ``Exception`` (``KeyboardInterrupt`` in the main thread) in the middle of a command. The
sessions the command may have left half-updated then start over from the log (as after a
defect) and the interruption goes on to the caller.

Order is kept: a command is carried out here only if the actor's mailbox is empty, and the
durable batches the journal published before it (posted in the actor's
:class:`~ctxledger.actors.history_base.DurableBox`, maybe with their ``DurablesReady`` taken off
the mailbox by the actor's thread and waiting for the lock) are folded first. A message that
arrives meanwhile is handled after it, as if it had arrived after the command.

A blocking caller's recording command (an ``Execute``: an append, a pin, usage...) whose batch
the journal's thread committed (other batches were outstanding) is folded on the caller's thread
as well, once its answer came and before it goes on (:meth:`CallerRuns.fold_posted`): the
journal posts such a batch without telling the actor, so under many writers the actor's thread
is not woken, nor the GIL handed to it, to fold every few batches. A step's batch (what its fold
starts is the actor's work), a failed one and one the actor committed on its own thread stay the
actor's to fold.

An async caller's command is carried out on its event loop's thread the same way, but only if
the actor is idle at once (it never waits for the actor's own work), and its batch is never
committed there: the group committer leaves a submission made on a thread that runs an event
loop to the journal's thread (the loop must not block on an fsync), which answers the awaiting
task as it would have through the mailbox.
"""

from __future__ import annotations

import contextlib
import threading

import pykka

from ctxledger.actors.failures import internal, log_failure
from ctxledger.actors.history_base import HistoryBase
from ctxledger.actors.messages import Command, Durable, HistoryMessage

__all__ = ["CallerRuns", "acting_for"]


class _Acting(threading.local):
    """Per thread: the number of the history actor whose work it is doing in its place (a class
    default, not ``getattr`` with one: a lookup that misses raises and catches inside)."""

    number: int | None = None


_acting = _Acting()


def acting_for() -> int | None:
    """The number of the history actor whose command this thread is carrying out in its place
    (None on any other thread, the actors' own included): what a thread is doing, for logs and
    tests that tell the actors' work from the callers'."""
    return _acting.number


class CallerRuns(HistoryBase):
    """The history actor's side of :mod:`ctxledger.actors.inline`."""

    #: Held by whichever thread handles one of the actor's messages or carries out a command
    #: in its place; reentrant, for the hooks pykka calls on the actor's own thread.
    _exclusive: threading.RLock
    #: Set (under the lock) once the actor stops or fails: no command is carried out inline.
    _stopped: bool
    #: Set by the actor's thread while it waits for the lock: no command starts inline until
    #: it had its turn (a caller appending in a loop never starves the actor's messages).
    _wanted: bool
    #: Whether the actor's own thread has one of its own messages in hand (or waits for the
    #: lock to handle one): not a caller's command; written by that thread only.
    _own_work: bool
    #: Messages the actor's own thread has handled (written by that thread only); callers
    #: waiting for the actor (:meth:`_turn`) wait on ``_progress`` for it to change.
    _handled: int
    _progress: threading.Condition
    #: Callers waiting on ``_progress`` (changed under it).
    _waiting: int
    #: The session of the last command carried out (by the actor's thread or a caller's):
    #: a caller waits for the actor's own work only as the session's lone writer, the one
    #: whose commands the actor has been carrying out (written under the actor's lock).
    _last_session: str | None

    def _init_turns(self) -> None:
        self._own_work = False
        self._handled = self._waiting = 0
        self._progress = threading.Condition(threading.Lock())
        self._last_session = None

    def _starting(self, message: HistoryMessage) -> None:
        """The actor's thread takes ``message`` off the mailbox: a caller's command, or its own
        work (which a caller may wait for)."""
        if isinstance(message, Command):
            self._own_work = False
            self._last_session = message.session_id
        else:
            self._own_work = True

    def _handled_one(self) -> None:
        """The actor's thread ends a message: wake the callers waiting for their turn (a caller
        counts itself in ``_waiting`` before it looks at ``_handled``: none is missed)."""
        self._own_work = False
        self._handled += 1
        if self._waiting:
            with self._progress:
                self._progress.notify_all()

    def run_inline(self, command: Command, *, wait: bool = True) -> bool:
        """Carry ``command`` out on the calling thread if the actor is idle; return whether it
        was (if not, the caller hands it to the mailbox as usual).

        The caller's reply slot is answered as it would be by the actor (at once for a batch
        committed on this thread; else when the journal commits it, or when the session's
        state is loaded). ``wait=False`` (an async caller): never wait for the actor's own
        work (:meth:`_turn`).
        """
        if not self._turn(command.session_id, wait):
            return False
        taken: list[Durable] = []
        try:
            _acting.number = self._number
            taken = self._durables.hold()
            if taken:
                self._on_durables(taken)
            self._run_command(command)
            self._last_session = command.session_id
            taken = self._durables.take()
            if taken:
                self._on_durables(taken)
            return True
        except BaseException as exc:  # the handlers contain every Exception: an interruption
            self._interrupted(command, taken, exc)
            raise
        finally:
            _acting.number = None
            self._exclusive.release()

    def fold_posted(self) -> None:
        """Fold the durable batches waiting in the actor's box on this thread, unless another
        thread holds the actor's lock (then the actor is told, ``DurablesReady``, as the
        journal would have told it).

        Called by a blocking caller once its answer came (``Host._call``): the journal posts
        the durable batch of such a caller without waking the actor's thread
        (:meth:`~ctxledger.actors.history_base.DurableBox.post_quiet`), which saves that thread
        a wake-up and the GIL a hand-off a batch. No batch is left unfolded: the journal posts
        the batch, then names the actor on the caller's reply slot (``Waiter.posted_to``), then
        tells the actor itself if the caller no longer waits (``Waiter.abandoned``); the caller
        marks itself so, then calls this if an actor is named: whichever comes second sees the
        other's mark. Nor is the caller's next command ahead of its batch: this returns once
        the batch is folded or the actor told, and a command goes behind that message.

        Folding here is folding early, not out of order: the box is a channel of its own, its
        batches are folded in the order posted, always under the actor's lock, by whichever
        thread takes them first (the actor's on ``DurablesReady``, a command carried out here
        before it starts, this); taking them before the actor's thread had its turn
        (``_wanted``) spares it that work. On a thread already carrying out a command of this
        actor (a nested call) nothing is folded: that command takes them when it ends.
        """
        box = self._durables
        if not box.waiting():  # taken already by whoever came first (it folds them)
            return
        if _acting.number is None and not self._stopped and self._exclusive.acquire(False):
            taken: list[Durable] = []
            try:
                if not self._stopped:
                    _acting.number = self._number
                    taken = box.take()
                    if taken:
                        self._on_durables(taken)
                    return
            except BaseException as exc:  # the handlers contain every Exception: see run_inline
                self._interrupted(None, taken, exc)
                raise
            finally:
                _acting.number = None
                self._exclusive.release()
        with contextlib.suppress(pykka.ActorDeadError):  # gone: its batches are of no use
            box.tell_unless_told(self.actor_ref)

    def _turn(self, session_id: str, wait: bool = True) -> bool:
        """Take the actor's lock for a command of this thread, if it is the command's turn.

        Not while a caller's command is carried out (on that caller's thread or the actor's):
        the command takes the mailbox, and the actor commits it in one batch with the others.
        While the actor's own thread has one of its own messages in hand (a ``Measure`` of
        budget's, a summary's outcome), waits for its turn to handle one, or has messages ahead
        of the command, the command waits for them if its session had the actor's last command
        and no other caller waits already: through the mailbox it would wait for them too, and
        then for two thread hand-offs (the actor woken, then this thread), the tail of a lone
        writer's appends. Callers on several sessions at once take the mailbox (as one caller
        behind another): one waiting behind the other, they were ~4 % slower at 64 at once.
        """
        while True:
            seen = self._handled  # read first: a message ending after it wakes the wait below
            if self._stopped or self.actor_stopped.is_set():
                return False
            if not self._wanted and self._exclusive.acquire(blocking=False):
                if not self._stopped and not self._mailbox:  # (set under this lock)
                    return True
                self._exclusive.release()  # messages ahead of the command: they go first
            elif not self._own_work:
                return False  # a caller's command is carried out: the mailbox (one batch)
            if not wait or session_id != self._last_session or self._waiting:
                return False  # (another caller waits already: several, and they are a batch)
            with self._progress:
                self._waiting += 1
                try:  # the timeout only re-checks the actor (stopped: it handles nothing more)
                    if self._handled == seen:  # else a message ended meanwhile: look again
                        self._progress.wait(timeout=0.5)
                finally:
                    self._waiting -= 1

    def _interrupted(
        self, command: Command | None, taken: list[Durable], exc: BaseException
    ) -> None:
        """A ``KeyboardInterrupt`` (or another ``BaseException``) raised in the caller's thread
        while it carried ``command`` out: the sessions it may have left half-updated (the
        command's, and those of the batches it was folding) start over from the log, and the
        batches it took go back to the actor. On the actor's own thread this cannot happen.
        ``command`` None: the thread was folding the batches of its answer
        (:meth:`fold_posted`)."""
        doing = "the batches of its answer" if command is None else type(command).__name__
        error = internal(f"interrupted while carrying out {doing}: {exc!r}", exc)
        sessions = {durable.session_id for durable in taken}
        if command is not None:
            sessions.add(command.session_id)
        try:
            self._durables.unhold(self.actor_ref, taken)
            for session_id in sessions:
                live = self._lives.get(session_id)
                if live is not None and live.state is not None:
                    self._restart(live, error)
        except Exception as failure:  # best effort: the interruption is what the caller sees
            log_failure("interrupted_command_not_contained", failure, actor=self._number)

    def _stop_inline(self) -> None:
        """No command is carried out inline from now on (the actor stops or failed)."""
        with self._exclusive:
            self._stopped = True
        with self._progress:  # callers waiting for their turn take the mailbox
            self._handled += 1
            self._progress.notify_all()
