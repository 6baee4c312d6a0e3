"""An in-memory session that runs the host's decisions with the pure domain only.

:class:`DomainSession` has every command of :class:`ctxledger.Session` (the same names,
arguments, answers and errors; the ``a``-prefixed twins too), each calling the pure domain
function the host's history actor calls (:func:`ctxledger.domain.decide` for views and
compactions, :mod:`ctxledger.domain.commands` for the rest and forks). It records and folds
every event as the host does after persisting, so a property test drives what production runs,
command for command, without actors or storage; from a recorded log too (``from_events``, and
``restart``: what a host does first). :func:`digest_summarizer` is a small summariser for tests."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from ctxledger.actors.arguments import check_flag, check_text, message_batch, usage_report
from ctxledger.actors.recordable import check_recordable
from ctxledger.config import Config
from ctxledger.domain.commands import (
    NO_OUTCOME,
    Command,
    execute,
    reactive_attempt,
)
from ctxledger.domain.compaction import CompactionResult
from ctxledger.domain.decide import (
    Background,
    Compact,
    Decision,
    Request,
    Serve,
    decide,
)
from ctxledger.domain.state import SessionState
from ctxledger.domain.step import Step, decide_step
from ctxledger.domain.summary import Summarizer
from ctxledger.domain.tokenizer import CharTokenizer, Tokenizer
from ctxledger.domain.view import ModelView
from ctxledger.events.types import Event, SessionOpened
from ctxledger.messages import Message
from ctxledger.testing._domain_async import AsyncCommands
from ctxledger.testing._history import HistoryCommands
from ctxledger.testing._reads import SessionReads
from ctxledger.testing._restart import Restarts
from ctxledger.testing._summaries import digest_summarizer, summarized

__all__ = ["DomainSession", "digest_summarizer"]


class DomainSession(HistoryCommands, SessionReads, AsyncCommands, Restarts):
    """One session driven through the domain functions, its events kept in :attr:`events`.

    The commands are :class:`ctxledger.Session`'s, with its arguments, answers and errors; a
    summary a decision needs is written at once by :attr:`summarizer` (a failing summariser is
    an outcome, as in the host, not a crash). Background compaction runs only when asked
    (:meth:`wait_background`), where the host would have started it by itself.

    Attributes:
        state: The folded state.
        events: Every recorded event, in order; replaying them rebuilds :attr:`state`.
        views: Every served view, in order.
        results: The outcome of every compaction request, in order.
        summarizer: Writes the summaries (it may be replaced between commands).
        tokenizer: Counts tokens.
        clock: Returns the time recorded on checkpoints.
    """

    def __init__(
        self,
        config: Config,
        *,
        summarizer: Summarizer | None = None,
        tokenizer: Tokenizer | None = None,
        session_id: str = "session",
        clock: Callable[[], float] | None = None,
        id_factory: Callable[[], str] | None = None,
    ) -> None:
        """Open the session (records ``SessionOpened``).

        Args:
            config: The session's Config.
            summarizer: Summarises compactions (default :func:`digest_summarizer`).
            tokenizer: Counts tokens (default :class:`~ctxledger.domain.CharTokenizer`).
            session_id: The session id.
            clock: Returns the time recorded on checkpoints (default: a counter).
            id_factory: Returns fresh compaction and checkpoint ids (default ``c1``, ``c2``, ...;
                as ``Host(id_factory=...)``).
        """
        self.summarizer: Summarizer = summarizer or digest_summarizer
        self.tokenizer: Tokenizer = tokenizer or CharTokenizer()
        ticks = itertools.count(1)
        self.clock = clock or (lambda: float(next(ticks)))
        ids = itertools.count(1)
        self._new_id: Callable[[], str] = id_factory or (lambda: f"c{next(ids)}")
        self._opened_with, self._lineage = config, {}  # a fork's lineage: see fork()
        # The outcome of each reactive attempt since the last new input (as the host keeps it).
        self._tried: list[str] = []
        self.state = SessionState.new(session_id, config)
        self.events: list[Event] = []
        self.views: list[ModelView] = []
        self.results: list[CompactionResult] = []
        self.record(SessionOpened(session_id=session_id, config=config))

    def __repr__(self) -> str:
        return f"<DomainSession {self.state.session_id!r}>"

    def record(self, event: Event) -> None:
        """Record ``event`` and fold it (no decision: the caller vouches for it)."""
        self.events.append(event)
        self.state.apply(event)

    def fork(self, new_id: str, at_seq: int | None = None) -> DomainSession:
        """Create a session sharing this one's history up to ``at_seq`` (default: all), as
        ``Session.fork`` does (the host's fork point, events and fold); it shares this session's
        summariser, tokenizer, clock and id factory, as a host's sessions share the host's.

        Raises:
            InvalidSessionIdError: ``new_id`` cannot name a session.
            InvalidSeqError: ``at_seq`` is not an int, or names no message.
            SessionExistsError: ``new_id`` is this session's or an ancestor's (a DomainSession
                has no host: it cannot know of other sessions, so any other id is free).
        """
        fork = copy.copy(self)
        fork.state, fork.events, fork._opened_with, fork._lineage = self._fork_start(new_id, at_seq)
        fork.views, fork.results, fork._tried = [], [], []
        return fork

    # --- compaction and views (ctxledger.domain.decide) ------------------------------------------

    def compact_if_needed(self, pending: str = "") -> CompactionResult:
        """Compact when the estimate (plus ``pending``) reaches the threshold
        (``Session.compact_if_needed``).

        Raises:
            InvalidArgumentError: ``pending`` is not a string.
        """
        check_text("pending", pending, utf8=False)
        return self._compaction(Serve(pending=pending, view=False))

    def compact(self, focus: str | None = None) -> CompactionResult:
        """Compact now, optionally telling the summariser what to keep (``Session.compact``).

        Raises:
            InvalidArgumentError: ``focus`` is not None or a string of valid UTF-8.
        """
        check_text("focus", focus, optional=True)
        return self._compaction(Compact(trigger="manual", focus=focus))

    def reactive_compact(self, error: object = None) -> CompactionResult:
        """Compact after the provider rejected the prompt as too long; harder on each retry,
        until an attempt compacts (``Session.reactive_compact``).

        Args:
            error: The provider's error (the host only logs one it does not recognise).

        Raises:
            ContextOverflowError: ``max_reactive_retries`` attempts since the last new input
                (append, usage report, retraction, clear) did not shrink the view.
        """
        while True:
            request = reactive_attempt(self.state, self._tried)
            self._tried.append(NO_OUTCOME)
            result = self.decide(request).result
            self._tried[-1] = result.reason if result is not None else NO_OUTCOME
            if result is not None and result.compacted:
                self.results.append(result)
                return result

    def build_model_view(self, pending: str = "") -> ModelView:
        """Build and record the view without compacting (``Session.build_model_view``).

        Raises:
            InvalidArgumentError: ``pending`` is not a string.
            BudgetExceededError: The session reached ``Config.max_total_tokens``.
            ContextOverflowError: The view cannot fit the window.
        """
        check_text("pending", pending, utf8=False)
        return self._served(self.decide(Serve(pending=pending, compact=False)))

    def prepare_step(self, pending: str = "", *, defer_record: bool = False) -> ModelView:
        """Compact if needed, then build and record the view (``Session.prepare_step``).

        ``defer_record`` changes only when a host commits the record (the events are the same).

        Raises:
            InvalidArgumentError: ``pending`` is not a string, or ``defer_record`` not a bool.
            BudgetExceededError: The session reached ``Config.max_total_tokens``.
            ContextOverflowError: The view cannot fit the window.
        """
        check_text("pending", pending, utf8=False)
        check_flag("defer_record", defer_record)
        return self._served(self.decide(Serve(pending=pending)))

    def wait_background(self) -> None:
        """Run the background compaction that is due now, if any, to its end
        (``Session.wait_background``).

        The host starts a background summary by itself after an append or usage report once
        the estimate crosses the prepare point, and ``wait_background`` waits for it; here it
        runs on this call (the same decision, :class:`~ctxledger.domain.Background`), so that a
        test chooses when a prepared summary appears.
        """
        self.decide(Background())

    def view(self, pending: str = "") -> ModelView:
        """:meth:`build_model_view` (this kit's earlier name for it)."""
        return self.build_model_view(pending)

    def step(
        self, messages: Sequence[Message] = (), pending: str = "", *, usage: object = None
    ) -> ModelView:
        """Append a step's messages (after ``usage``, as :meth:`append_many`), then compact if
        needed and serve the view (``Session.step``: :func:`ctxledger.domain.step.decide_step`,
        as the host decides it).

        The same events, answers and errors as :meth:`append_many` then :meth:`prepare_step`;
        the view's ``appended_seqs`` are the seqs the messages got. ``step()`` with no messages
        is :meth:`prepare_step` (as this kit's ``step`` was before it took messages).

        Raises:
            InvalidMessageError: A message is invalid here; nothing of the step is recorded.
            InvalidUsageError: ``usage`` is no usage report; nothing is recorded.
            InvalidArgumentError: ``pending`` is not a string.
            BudgetExceededError: The session reached ``Config.max_total_tokens`` (the messages
                are recorded).
            ContextOverflowError: The view cannot fit the window (the messages are recorded).
        """
        batch = message_batch(messages)
        check_text("pending", pending, utf8=False)
        step = Step(messages=batch, pending=pending, usage=usage_report(usage))
        stepped = decide_step(
            self.state, step, tokenizer=self.tokenizer, new_id=self._new_id, now=self.clock
        )
        self.events.extend(stepped.appended.events)  # folded by decide_step already
        if step.fresh:
            self._tried.clear()
        self._commit(stepped.decision.events)
        view = self._served(self._run(stepped.decision))
        if batch:
            view = msgspec.structs.replace(view, appended_seqs=stepped.seqs)
            self.views[-1] = view
        return view

    def decide(self, request: Request) -> Decision:
        """Run the decision step for ``request`` to its end, recording every event on the way.

        The lower-level door the commands above use: any :data:`~ctxledger.domain.Request`,
        say a reactive attempt with a given ``attempt`` number.

        Raises:
            CtxLedgerError: The decision's error (recorded events stay recorded, as in the host).
        """
        return self._run(self._decide(request))

    # --- internals -------------------------------------------------------------------------------

    def _run(self, decision: Decision) -> Decision:
        """Carry ``decision`` (recorded already) to its end: write the summaries it needs."""
        while decision.job is not None:
            decision = self._decide(summarized(decision.job, self.summarizer))
        if decision.wait_for is not None:
            raise AssertionError("a DomainSession runs no background compaction to wait for")
        if decision.error is not None:
            raise decision.error
        return decision

    def _execute(self, command: Command) -> Any:
        outcome = execute(self.state, command)
        if command.fresh:
            self._tried.clear()
        self._commit(outcome.events)
        return outcome.answer

    def _served(self, decision: Decision) -> ModelView:
        if decision.result is not None:
            self.results.append(decision.result)
        assert decision.view is not None
        self.views.append(decision.view)
        return decision.view

    def _compaction(self, request: Serve | Compact) -> CompactionResult:
        decision = self.decide(request)
        assert decision.result is not None
        self.results.append(decision.result)
        return decision.result

    def _decide(self, request: Request) -> Decision:
        decision = decide(
            self.state, request, tokenizer=self.tokenizer, new_id=self._new_id, now=self.clock
        )
        self._commit(decision.events)
        return decision

    def _commit(self, events: Sequence[Event]) -> None:
        check_recordable(events)  # the host's check: only what reads back is written
        for event in events:
            self.record(event)
