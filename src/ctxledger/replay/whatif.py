"""What-if re-projection: re-run a logged session under another Config; the log is untouched."""

from __future__ import annotations

from collections.abc import Iterator

import msgspec

from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config
from ctxledger.domain import (
    CharTokenizer,
    CompactionPlan,
    SessionState,
    Tokenizer,
    build_view,
    complete_compaction,
    plan_compaction,
    run_summarizer,
)
from ctxledger.errors import UnknownSessionError
from ctxledger.events import (
    CheckpointCreated,
    CompactionStarted,
    Event,
    HistoryCleared,
    MessageAppended,
    MessagePinned,
    MessageRetracted,
    SessionForked,
    SessionOpened,
    ToolResultSynthesized,
    UsageReported,
    ViewServed,
)
from ctxledger.replay.rebuild import LogSource, open_log
from ctxledger.storage import EventLog
from ctxledger.summarizers import ExtractiveSummarizer, Summarizer, SummaryRequest

__all__ = ["WhatIfReport", "WhatIfStep", "what_if"]


class WhatIfStep(msgspec.Struct, frozen=True, kw_only=True):
    """One step of a what-if run: where the original served a view.

    Attributes:
        through_seq: The newest message seq at that step.
        view_tokens: The estimated tokens of the view the policy would have served.
        compacted: Whether the policy compacted at this step.
        original_tokens: The estimated tokens of the view the original served.
    """

    through_seq: int
    view_tokens: int
    compacted: bool
    original_tokens: int = 0


class WhatIfReport(msgspec.Struct, frozen=True, kw_only=True):
    """What a Config would have produced on a logged session.

    Attributes:
        session_id: The session.
        config: The Config tried.
        steps: One entry per served view of the original.
        compactions: Checkpoints the policy would have made.
        peak_tokens: The largest view estimate under the policy.
        summarizer_calls: Summariser invocations needed (ranges not already in the log).
        reused_summaries: Summaries taken from the log (identical covered range and previous
            summary, matched by content address).
        original_compactions: Checkpoints in the log.
        original_peak_tokens: The largest view estimate the original served.
    """

    session_id: str
    config: Config
    steps: list[WhatIfStep]
    compactions: int
    peak_tokens: int
    summarizer_calls: int
    reused_summaries: int
    original_compactions: int
    original_peak_tokens: int


class _CountingSummarizer:
    def __init__(self, inner: Summarizer) -> None:
        self.inner = inner
        self.calls = 0

    def __call__(self, request: SummaryRequest) -> str | None:
        self.calls += 1
        return self.inner(request)


def what_if(
    source: LogSource,
    session_id: str,
    config: Config,
    *,
    summarizer: Summarizer | None = None,
    tokenizer: Tokenizer | None = None,
    use_recorded_usage: bool | None = None,
) -> WhatIfReport:
    """Re-run a session under ``config``, stepping wherever the original served a view.

    Messages, pins and manual or reactive compactions happen where they happened in the log;
    at each served view the policy decides whether to compact (as ``prepare_step`` would) and
    the view it would serve is measured. Summaries already in the log are reused where the
    summariser's input is identical (content-addressed); the summariser is called only for new
    ranges. ``config`` applies throughout (later ``ConfigChanged`` events are ignored).

    Args:
        source: An LMDB folder (opened read-only) or an open event log.
        session_id: The session.
        config: The policy to try.
        summarizer: For new ranges; the offline :class:`ExtractiveSummarizer` by default.
        tokenizer: The tokenizer (chars // 3 by default).
        use_recorded_usage: Feed the provider's recorded usage figures to the budget. They
            measured the original prompts, so by default they are used only when ``config`` is
            the session's own.

    Raises:
        UnknownSessionError: The session is not in the log.
    """
    tokenizer = tokenizer or CharTokenizer()
    counting = _CountingSummarizer(summarizer or ExtractiveSummarizer())
    with open_log(source) as log:
        events = list(_flattened(log, session_id))
    opened = next((e for e in events if isinstance(e, SessionOpened)), None)
    if opened is None:
        raise UnknownSessionError(f"unknown session {session_id!r}")
    if use_recorded_usage is None:
        use_recorded_usage = config == opened.config
    known = {
        e.checkpoint.input_hash: e.checkpoint
        for e in events
        if isinstance(e, CheckpointCreated) and e.checkpoint.input_hash
    }
    run = _Run(SessionState.new(session_id, config), tokenizer, counting, known)
    steps: list[WhatIfStep] = []
    for event in events:
        if isinstance(event, _FOLDED) or (
            isinstance(event, UsageReported) and use_recorded_usage
        ):
            run.state.apply(event)
        elif isinstance(event, CompactionStarted) and event.reason != "threshold_exceeded":
            run.compact(event.reason, event.focus, event.attempt)
        elif isinstance(event, ViewServed):
            compacted = run.compact("threshold_exceeded", None, 0)
            view = build_view(run.state, tokenizer=tokenizer)
            steps.append(
                WhatIfStep(
                    through_seq=view.through_seq,
                    view_tokens=view.estimated_tokens,
                    compacted=compacted,
                    original_tokens=event.estimated_tokens,
                )
            )
    return WhatIfReport(
        session_id=session_id,
        config=config,
        steps=steps,
        compactions=run.compactions,
        peak_tokens=max((step.view_tokens for step in steps), default=0),
        summarizer_calls=counting.calls,
        reused_summaries=run.reused,
        original_compactions=sum(isinstance(e, CheckpointCreated) for e in events),
        original_peak_tokens=max((step.original_tokens for step in steps), default=0),
    )


# Events replayed as recorded: what the agent did (appends, pins, withdrawals), not decisions.
_FOLDED = (
    MessageAppended,
    ToolResultSynthesized,
    MessagePinned,
    MessageRetracted,
    HistoryCleared,
)


class _Run:
    def __init__(
        self,
        state: SessionState,
        tokenizer: Tokenizer,
        summarizer: _CountingSummarizer,
        known: dict[str, Checkpoint],
    ) -> None:
        self.state = state
        self.tokenizer = tokenizer
        self.summarizer = summarizer
        self.known = known
        self.compactions = 0
        self.reused = 0

    def compact(self, trigger: str, focus: str | None, attempt: int) -> bool:
        outcome = plan_compaction(
            self.state,
            tokenizer=self.tokenizer,
            trigger=trigger,  # type: ignore[arg-type]
            focus=focus,
            attempt=attempt,
        )
        if not isinstance(outcome, CompactionPlan):
            return False
        original = self.known.get(outcome.input_hash)
        if original is not None:
            self.reused += 1
            summary: str | None = original.summary
            checkpoint_id, created_at = original.id, original.created_at
        else:
            try:
                summary = run_summarizer(outcome, self.summarizer)
            except Exception:  # a failing summariser means summary_unavailable, as live
                summary = None
            checkpoint_id = f"what-if-{self.compactions + 1}"
            created_at = 0.0
        if not summary:
            return False
        checkpoint, _ = complete_compaction(
            self.state,
            outcome,
            summary,
            checkpoint_id=checkpoint_id,
            created_at=created_at,
            tokenizer=self.tokenizer,
        )
        self.state.apply(CheckpointCreated(compaction_id=checkpoint_id, checkpoint=checkpoint))
        self.compactions += 1
        return True


def _flattened(log: EventLog, session_id: str, through: int | None = None) -> Iterator[Event]:
    """The session's events in fold order, its fork ancestry's prefix first."""
    for record in log.iter_events(session_id, 1, through):
        event = record.event
        if isinstance(event, SessionForked):
            yield from (
                e
                for e in _flattened(log, event.parent_id, event.parent_event_seq)
                if not isinstance(e, SessionOpened)
            )
        yield event
