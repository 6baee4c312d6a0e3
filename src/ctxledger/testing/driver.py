"""An in-memory session that follows the host's flow with the pure domain only.

:class:`DomainSession` records every event in a list and folds it, exactly as the host does after
persisting, so tests can drive a policy, check every view and replay the log without actors or
storage. :func:`digest_summarizer` is a small deterministic summariser for such tests.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

from ctxledger.config import Config
from ctxledger.domain.calibration import usage_events
from ctxledger.domain.compaction import CompactionResult, Trigger, run_summarizer
from ctxledger.domain.decide import (
    Compact,
    Decision,
    Job,
    Request,
    Serve,
    Summarized,
    decide,
)
from ctxledger.domain.state import SessionState
from ctxledger.domain.summary import Summarizer, SummaryRequest
from ctxledger.domain.tokenizer import CharTokenizer, Tokenizer
from ctxledger.domain.view import ModelView
from ctxledger.events.types import (
    ConfigChanged,
    Event,
    MessageAppended,
    MessagePinned,
    SessionOpened,
    UsageReported,
)
from ctxledger.messages import Message

__all__ = ["DomainSession", "digest_summarizer"]


def digest_summarizer(request: SummaryRequest) -> str:
    """Summarise deterministically: the previous summary, then one short line per message."""
    lines = [request.previous_summary] if request.previous_summary else []
    if request.focus:
        lines.append(f"Focus: {request.focus}")
    for message in request.messages:
        first = message.content.strip().splitlines()[0][:60] if message.content.strip() else ""
        lines.append(f"[{message.seq}] {message.role}: {first}")
    return "\n".join(lines)[: request.max_chars] or "(nothing)"


class DomainSession:
    """One session driven through the domain functions, its events kept in :attr:`events`.

    Attributes:
        state: The folded state.
        events: Every recorded event, in order; replaying them rebuilds :attr:`state`.
        views: Every served view, in order.
        results: The outcome of every compaction request, in order.
    """

    def __init__(
        self,
        config: Config,
        *,
        summarizer: Summarizer | None = None,
        tokenizer: Tokenizer | None = None,
        session_id: str = "session",
        clock: Callable[[], float] | None = None,
    ) -> None:
        """Open the session (records ``SessionOpened``).

        Args:
            config: The session's Config.
            summarizer: Summarises compactions (default :func:`digest_summarizer`).
            tokenizer: Counts tokens (default :class:`~ctxledger.domain.CharTokenizer`).
            session_id: The session id.
            clock: Returns the time recorded on checkpoints (default: a counter).
        """
        self.summarizer: Summarizer = summarizer or digest_summarizer
        self.tokenizer: Tokenizer = tokenizer or CharTokenizer()
        ticks = itertools.count(1)
        self.clock = clock or (lambda: float(next(ticks)))
        self._ids = itertools.count(1)
        self._opened_with = config
        self.state = SessionState.new(session_id, config)
        self.events: list[Event] = []
        self.views: list[ModelView] = []
        self.results: list[CompactionResult] = []
        self.record(SessionOpened(session_id=session_id, config=config))

    def record(self, event: Event) -> None:
        """Record ``event`` and fold it."""
        self.events.append(event)
        self.state.apply(event)

    def append(self, *messages: Message) -> list[int]:
        """Validate and append messages; return their seqs."""
        checked = self.state.check_append(messages)
        for message in checked:
            self.record(MessageAppended(message=message))
        return [message.seq for message in checked if message.seq is not None]

    def extend(self, messages: Iterable[Message]) -> list[int]:
        """Append messages one at a time; return their seqs."""
        return [seq for message in messages for seq in self.append(message)]

    def record_usage(
        self,
        prompt_tokens: int,
        completion_tokens: int = 0,
        *,
        cached_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> None:
        """Record the provider's usage for the prompt built at the current seq (and the
        calibration step it brings, as the host does)."""
        usage = UsageReported(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            through_seq=self.state.last_seq,
            cached_tokens=cached_tokens,
            cache_write_tokens=cache_write_tokens,
        )
        for event in usage_events(self.state, usage):
            self.record(event)

    def pin(self, seq: int) -> None:
        """Pin message ``seq``."""
        self.state.check_pin(seq)
        self.record(MessagePinned(seq=seq))

    def change_config(self, config: Config) -> None:
        """Record a new Config."""
        self.record(ConfigChanged(config=config))

    def compact(
        self,
        trigger: Trigger = "threshold_exceeded",
        *,
        pending: str = "",
        focus: str | None = None,
        attempt: int = 0,
    ) -> CompactionResult:
        """Compact as the host does (``compact_if_needed``, ``compact``, a reactive attempt)."""
        request: Request
        if trigger == "threshold_exceeded":
            request = Serve(pending=pending, view=False)
        else:
            request = Compact(trigger=trigger, focus=focus, attempt=attempt, pending=pending)
        decision = self.decide(request)
        assert decision.result is not None
        self.results.append(decision.result)
        return decision.result

    def view(self, pending: str = "") -> ModelView:
        """Serve the view without compacting (the host's ``build_model_view``)."""
        decision = self.decide(Serve(pending=pending, compact=False))
        assert decision.view is not None
        self.views.append(decision.view)
        return decision.view

    def step(self, pending: str = "") -> ModelView:
        """Compact if needed, then serve the view (the host's ``prepare_step``)."""
        decision = self.decide(Serve(pending=pending))
        if decision.result is not None:
            self.results.append(decision.result)
        assert decision.view is not None
        self.views.append(decision.view)
        return decision.view

    def decide(self, request: Request) -> Decision:
        """Run the decision step for ``request`` to its end, recording every event on the way.

        A summary the decision asks for is written at once by :attr:`summarizer` (a failing
        summariser is an outcome, as in the host, not a crash).
        """
        decision = self._decide(request)
        while decision.job is not None:
            decision = self._decide(self._summarize(decision.job))
        if decision.wait_for is not None:
            raise AssertionError("a DomainSession runs no background compaction to wait for")
        if decision.error is not None:
            raise decision.error
        return decision

    def _decide(self, request: Request) -> Decision:
        decision = decide(
            self.state,
            request,
            tokenizer=self.tokenizer,
            new_id=self._new_id,
            now=self.clock,
        )
        for event in decision.events:
            self.record(event)
        return decision

    def _new_id(self) -> str:
        return f"c{next(self._ids)}"

    def _summarize(self, job: Job) -> Summarized:
        try:
            summary = run_summarizer(job.plan, self.summarizer)
        except Exception as exc:  # as the host: a failing summariser is an outcome, not a crash
            return Summarized(job=job, summary=None, detail=repr(exc))
        return Summarized(job=job, summary=summary, detail="" if summary else "no summary")

    def replay(self, events: Iterable[Event] | None = None) -> SessionState:
        """Fold ``events`` (default: all recorded) into a fresh state."""
        state = SessionState.new(self.state.session_id, self._opened_with)
        for event in self.events if events is None else events:
            state.apply(event)
        return state
