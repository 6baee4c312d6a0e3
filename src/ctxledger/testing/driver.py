"""An in-memory session that follows the host's flow with the pure domain only.

:class:`DomainSession` records every event in a list and folds it, exactly as the host does after
persisting, so tests can drive a policy, check every view and replay the log without actors or
storage. :func:`digest_summarizer` is a small deterministic summariser for such tests.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

from ctxledger.config import Config
from ctxledger.domain.compaction import (
    CompactionPlan,
    CompactionResult,
    Trigger,
    complete_compaction,
    fail_compaction,
    plan_compaction,
    run_summarizer,
)
from ctxledger.domain.state import SessionState
from ctxledger.domain.tokenizer import CharTokenizer, Tokenizer
from ctxledger.domain.view import ModelView, build_view
from ctxledger.events.types import (
    CheckpointCreated,
    CompactionFailed,
    ConfigChanged,
    Event,
    MessageAppended,
    MessagePinned,
    SessionOpened,
    UsageReported,
    ViewServed,
)
from ctxledger.messages import Message
from ctxledger.summarizers.base import Summarizer, SummaryRequest

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

    def record_usage(self, prompt_tokens: int, completion_tokens: int = 0) -> None:
        """Record the provider's usage for the prompt built at the current seq."""
        self.record(
            UsageReported(
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                through_seq=self.state.last_seq,
            )
        )

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
        """Plan, summarise and record a compaction as the host does; return the outcome."""
        outcome = plan_compaction(
            self.state,
            tokenizer=self.tokenizer,
            trigger=trigger,
            pending=pending,
            focus=focus,
            attempt=attempt,
        )
        if isinstance(outcome, CompactionResult):
            self.results.append(outcome)
            return outcome
        result = self._run(outcome)
        self.results.append(result)
        return result

    def _run(self, plan: CompactionPlan) -> CompactionResult:
        compaction_id = f"c{next(self._ids)}"
        self.record(plan.started(compaction_id))
        try:
            summary = run_summarizer(plan, self.summarizer)
        except Exception as exc:  # as the host: a failing summariser is an outcome, not a crash
            summary, detail = None, repr(exc)
        else:
            detail = "no summary"
        if not summary:
            self.record(CompactionFailed(compaction_id=compaction_id, detail=detail))
            return fail_compaction(plan)
        checkpoint, result = complete_compaction(
            self.state,
            plan,
            summary,
            checkpoint_id=f"cp{next(self._ids)}",
            created_at=self.clock(),
            tokenizer=self.tokenizer,
        )
        self.record(CheckpointCreated(compaction_id=compaction_id, checkpoint=checkpoint))
        return result

    def view(self, pending: str = "") -> ModelView:
        """Build the view and record that it was served."""
        view = build_view(self.state, tokenizer=self.tokenizer, pending=pending)
        self.record(
            ViewServed(
                through_seq=view.through_seq,
                estimated_tokens=view.estimated_tokens,
                view_hash=view.view_hash,
                checkpoint_id=view.checkpoint_id,
                message_count=len(view.messages),
            )
        )
        self.views.append(view)
        return view

    def step(self, pending: str = "") -> ModelView:
        """Compact if needed, then serve the view (the host's ``prepare_step``)."""
        self.compact("threshold_exceeded", pending=pending)
        return self.view(pending)

    def replay(self, events: Iterable[Event] | None = None) -> SessionState:
        """Fold ``events`` (default: all recorded) into a fresh state."""
        state = SessionState.new(self.state.session_id, self._opened_with)
        for event in self.events if events is None else events:
            state.apply(event)
        return state
