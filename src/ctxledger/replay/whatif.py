"""What-if re-projection: re-run a logged session under another Config; the log is untouched.

:func:`what_if` walks the log and sums up; the session it re-projects, and the step it measures
at each served view, are ``_whatif_run.py`` (:class:`WhatIfStep` is importable from here).
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec

from ctxledger._arguments import check_callable, check_flag
from ctxledger.config import Config
from ctxledger.domain import (
    Background,
    CharTokenizer,
    Compact,
    Pricing,
    SessionState,
    Tokenizer,
    background_on,
)
from ctxledger.errors import UnknownSessionError
from ctxledger.events import (
    CheckpointCreated,
    CheckpointReverted,
    CompactionFailed,
    CompactionStarted,
    HistoryCleared,
    MessageAppended,
    MessagePinned,
    MessageRetracted,
    RecordLost,
    SessionForked,
    SessionOpened,
    SummaryPrepared,
    ToolResultSynthesized,
    UsageReported,
    ViewServed,
)
from ctxledger.replay._arguments import check_config, check_pricing, check_read, check_seconds
from ctxledger.replay._whatif_run import CountingSummarizer, Run, WhatIfStep
from ctxledger.replay.rebuild import LogSource, open_log
from ctxledger.storage import EventLog, RecordedEvent
from ctxledger.summarizers import ExtractiveSummarizer, Summarizer

__all__ = ["WhatIfReport", "WhatIfStep", "what_if"]


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
        prepared_in_time: Automatic compactions whose summary would have been prepared in the
            background before it was needed (the agent waits 0 s).
        prepared_late: Those whose background summary would still have been running.
        waited_seconds: Seconds the agent would have waited on summarisers in all.
        summarizer_input_tokens: Tokens (the tokenizer's count) the summariser is given for the
            policy's compactions (the covered messages and the previous summary), whether the
            summary was reused from the log or written anew: what the summaries cost.
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
    prepared_in_time: int = 0
    prepared_late: int = 0
    waited_seconds: float = 0.0
    summarizer_input_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        """Tokens of every view the policy would have served (one model call per step)."""
        return sum(step.view_tokens for step in self.steps if not step.refused)

    @property
    def cached_tokens(self) -> int:
        """Of :attr:`prompt_tokens`, those a provider's prompt cache would have served."""
        return sum(step.cached_tokens for step in self.steps if not step.refused)

    def cost(self, pricing: Pricing, *, caching: bool = True) -> float:
        """Estimated input cost of the policy's model calls and summaries, in dollars.

        With ``caching``, each call reads its head shared with the previous view from the
        provider's cache and writes the rest (as a growing conversation is billed); without,
        every prompt token is billed as input. The summariser's input is billed as input (its
        output and the agent's output are left out: they do not depend on the views).

        Raises:
            InvalidArgumentError: ``pricing`` is not a :class:`~ctxledger.domain.Pricing`, or
                ``caching`` is not a bool.
        """
        check_pricing(pricing)
        check_flag("caching", caching)
        prompt, cached = self.prompt_tokens, self.cached_tokens
        agent = pricing.prompt_cost(prompt, cached, caching=caching)
        return agent + self.summarizer_input_tokens * pricing.input / 1_000_000


def what_if(
    source: LogSource,
    session_id: str,
    config: Config,
    *,
    summarizer: Summarizer | None = None,
    tokenizer: Tokenizer | None = None,
    use_recorded_usage: bool | None = None,
    summary_seconds: float | None = None,
) -> WhatIfReport:
    """Re-run a session under ``config``, stepping wherever the original served a view.

    Messages, pins and manual or reactive compactions happen where they happened in the log;
    at each served view the policy decides whether to compact (as ``prepare_step`` would) and
    the view it would serve is measured. Summaries already in the log are reused where the
    summariser's input is identical (content-addressed); the summariser is called only for new
    ranges. ``config`` applies throughout (later ``ConfigChanged`` events are ignored). A
    revert (``CheckpointReverted``) is the agent's act, replayed where the log made it: the
    re-run's active checkpoint is undone (under the log's own Config, the same one), through
    the host's command (``domain.commands.revert_compaction``); a re-run with none to undo
    there records nothing for it.

    Unless ``config.prepare_threshold`` is 0, summaries are prepared in the background as a
    host would: where the log started one under its own Config, or else after each batch of
    appended messages and each usage report. The time a summary takes is the log's, for a
    summary taken from it, else ``summary_seconds`` (by default the call's measured time); it
    decides whether each prepared compaction would have been ready in time. Under the log's own
    Config a background summary becomes available where the log recorded it (its
    ``SummaryPrepared`` or ``CompactionFailed``), or earlier where a step waited for it, as the
    host did, so the compactions are the log's whatever the timing was.

    Args:
        source: An LMDB folder (opened read-only) or an open event log.
        session_id: The session.
        config: The policy to try.
        summarizer: For new ranges; the offline :class:`ExtractiveSummarizer` by default.
        tokenizer: The tokenizer (chars // 3 by default).
        use_recorded_usage: Feed the provider's recorded usage figures to the budget. They
            measured the original prompts, so by default they are used only when ``config`` is
            the session's own.
        summary_seconds: Assumed duration of a summariser call for summaries not in the log.

    Raises:
        UnknownSessionError: The session is not in the log.
        InvalidSessionIdError: ``session_id`` is not a string.
        ConfigError: ``config`` is not a :class:`~ctxledger.Config`.
        InvalidArgumentError: ``source`` is not a folder, a URI or an event log, ``summarizer``
            cannot be called, ``tokenizer`` is not a Tokenizer, ``use_recorded_usage`` is not
            None or a bool, or ``summary_seconds`` is not None or a finite number >= 0;
            nothing is opened.
        StorageError: The folder is not an event log.
    """
    check_read(source, session_id, tokenizer=tokenizer)
    check_config(config)
    check_callable("summarizer", summarizer, optional=True)
    check_flag("use_recorded_usage", use_recorded_usage, optional=True)
    check_seconds("summary_seconds", summary_seconds)
    tokenizer = tokenizer or CharTokenizer()
    counting = CountingSummarizer(summarizer or ExtractiveSummarizer())
    with open_log(source) as log:
        records = list(_flattened(log, session_id))
    events = [record.event for record in records]
    opened = next((e for e in events if isinstance(e, SessionOpened)), None)
    if opened is None:
        raise UnknownSessionError(f"unknown session {session_id!r}")
    own = config == opened.config
    if use_recorded_usage is None:
        use_recorded_usage = own
    run = Run(SessionState.new(session_id, config), tokenizer, counting, records, summary_seconds)
    background = background_on(config)
    steps: list[WhatIfStep] = []
    for index, record in enumerate(records):
        event = record.event
        now = record.timestamp
        run.release_ready(now)
        if isinstance(event, _FOLDED) or (isinstance(event, UsageReported) and use_recorded_usage):
            run.state.apply(event)
            if background and not own and _ends_batch(records, index):
                run.decide(Background(), now)
        elif isinstance(event, CompactionStarted) and event.background:
            if background and own:
                run.decide(Background(timed=False), now, log_id=event.compaction_id)
        elif isinstance(event, SummaryPrepared | CompactionFailed) and background and own:
            failed = event if isinstance(event, CompactionFailed) else None
            run.release(event.compaction_id, failed=failed)
        elif isinstance(event, CheckpointReverted):
            run.revert(event.reason)
        elif isinstance(event, CompactionStarted) and event.reason != "threshold_exceeded":
            run.decide(Compact(trigger=event.reason, focus=event.focus, attempt=event.attempt), now)
        elif isinstance(event, ViewServed):
            steps.append(run.step(event, now))
    in_time = [step.in_time for step in steps if step.prepared]
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
        prepared_in_time=sum(1 for ok in in_time if ok),
        prepared_late=sum(1 for ok in in_time if not ok),
        waited_seconds=sum(step.waited_seconds for step in steps),
        summarizer_input_tokens=run.summary_input_tokens,
    )


def _ends_batch(records: list[RecordedEvent], index: int) -> bool:
    """Whether the event at ``index`` ends its commit (the next one was recorded apart)."""
    record = records[index]
    following = records[index + 1] if index + 1 < len(records) else None
    return following is None or following.timestamp != record.timestamp


# Events replayed as recorded: what the agent did (appends, pins, withdrawals), not decisions.
# A salvaged log's stand-in for a lost message is history too.
_FOLDED = (
    MessageAppended,
    ToolResultSynthesized,
    RecordLost,
    MessagePinned,
    MessageRetracted,
    HistoryCleared,
)


def _flattened(
    log: EventLog, session_id: str, through: int | None = None
) -> Iterator[RecordedEvent]:
    """The session's records in fold order, its fork ancestry's prefix first."""
    for record in log.iter_events(session_id, 1, through):
        event = record.event
        if isinstance(event, SessionForked):
            yield from (
                r
                for r in _flattened(log, event.parent_id, event.parent_event_seq)
                if not isinstance(r.event, SessionOpened)
            )
        yield record
