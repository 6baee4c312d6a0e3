"""What-if re-projection: re-run a logged session under another Config; the log is untouched."""

from __future__ import annotations

import time
from collections.abc import Iterator

import msgspec

from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config
from ctxledger.domain import (
    Background,
    CharTokenizer,
    Compact,
    Decision,
    Job,
    Pricing,
    Request,
    Serve,
    SessionState,
    Summarized,
    Tokenizer,
    background_on,
    decide,
    draft_view,
    run_summarizer,
    session_tokenizer,
)
from ctxledger.errors import UnknownSessionError
from ctxledger.events import (
    CheckpointCreated,
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
from ctxledger.messages import Message
from ctxledger.replay.rebuild import LogSource, open_log
from ctxledger.storage import EventLog, RecordedEvent
from ctxledger.summarizers import ExtractiveSummarizer, Summarizer, SummaryRequest

__all__ = ["WhatIfReport", "WhatIfStep", "what_if"]


class WhatIfStep(msgspec.Struct, frozen=True, kw_only=True):
    """One step of a what-if run: where the original served a view.

    Attributes:
        through_seq: The newest message seq at that step.
        view_tokens: The estimated tokens of the view the policy would have served.
        compacted: Whether the policy compacted at this step.
        original_tokens: The estimated tokens of the view the original served.
        prepared: The compaction at this step activated a summary prepared in the background.
        in_time: For a prepared compaction: whether the summary would have been ready when the
            step came (its background start plus the summariser's time, against the step's
            time in the log); None otherwise.
        waited_seconds: How long the agent would have waited on a summariser at this step.
        cached_tokens: Tokens at the head of the view that are the same messages as the
            previous step's view (what a provider's prompt cache would serve).
        refused: The policy would have refused to serve a view here (a token cap reached, or a
            view over the window); ``view_tokens`` is then the view it would not serve.
        view_hash: The hash of the view the policy would have served ("" when refused).
    """

    through_seq: int
    view_tokens: int
    compacted: bool
    original_tokens: int = 0
    prepared: bool = False
    in_time: bool | None = None
    waited_seconds: float = 0.0
    cached_tokens: int = 0
    refused: bool = False
    view_hash: str = ""


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
        """
        prompt, cached = self.prompt_tokens, self.cached_tokens
        agent = pricing.prompt_cost(prompt, cached, caching=caching)
        return agent + self.summarizer_input_tokens * pricing.input / 1_000_000


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
    summary_seconds: float | None = None,
) -> WhatIfReport:
    """Re-run a session under ``config``, stepping wherever the original served a view.

    Messages, pins and manual or reactive compactions happen where they happened in the log;
    at each served view the policy decides whether to compact (as ``prepare_step`` would) and
    the view it would serve is measured. Summaries already in the log are reused where the
    summariser's input is identical (content-addressed); the summariser is called only for new
    ranges. ``config`` applies throughout (later ``ConfigChanged`` events are ignored).

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
    """
    tokenizer = tokenizer or CharTokenizer()
    counting = _CountingSummarizer(summarizer or ExtractiveSummarizer())
    with open_log(source) as log:
        records = list(_flattened(log, session_id))
    events = [record.event for record in records]
    opened = next((e for e in events if isinstance(e, SessionOpened)), None)
    if opened is None:
        raise UnknownSessionError(f"unknown session {session_id!r}")
    own = config == opened.config
    if use_recorded_usage is None:
        use_recorded_usage = own
    run = _Run(SessionState.new(session_id, config), tokenizer, counting, records, summary_seconds)
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


class _Run:
    """The re-projected session: the decision step, with summaries reused from the log."""

    def __init__(
        self,
        state: SessionState,
        tokenizer: Tokenizer,
        summarizer: _CountingSummarizer,
        records: list[RecordedEvent],
        summary_seconds: float | None,
    ) -> None:
        self.state = state
        self.tokenizer = tokenizer
        self.summarizer = summarizer
        self.summary_seconds = summary_seconds
        self.known: dict[str, tuple[str, float, Checkpoint | None]] = _known_summaries(records)
        self.compactions = 0
        self._ids = 0
        self.reused = 0
        self.ready_at: dict[str, float] = {}  # background compaction id -> when its summary is
        self._original: Checkpoint | None = None  # the log's checkpoint for the job in hand
        self._now = 0.0
        self._activated: str | None = None  # the prepared summary the last decision activated
        self.last_seconds = 0.0  # the summariser time the last decision waited for
        self._previous_view: tuple[Message, ...] = ()
        self.summary_input_tokens = 0
        # Background compactions held until the log's outcome of the same compaction (own
        # Config), with when they started: by the log's compaction id, and that id by the job's.
        self._held: dict[str, tuple[Job, float]] = {}
        self._log_ids: dict[str, str] = {}
        # Background summaries of the policy tried, running until their ready time: by job id,
        # the answer and when it is ready (folded then, or when a step waits for it).
        self._running: dict[str, tuple[Summarized, float]] = {}

    def step(self, served: ViewServed, now: float) -> WhatIfStep:
        before = self.compactions
        decision = self.decide(Serve(), now)
        view = decision.view
        if view is None:  # refused: a cap reached, or a floor above the window
            refused = draft_view(self.state, tokenizer=self.tokenizer).estimated_tokens
            return WhatIfStep(
                through_seq=self.state.last_seq,
                view_tokens=refused,
                compacted=self.compactions > before,
                original_tokens=served.estimated_tokens,
                refused=True,
            )
        cached = self._shared_head(view.messages)
        prepared = False
        in_time: bool | None = None
        waited = 0.0
        result = decision.result
        if result is not None and result.prepared:
            prepared = True
            ready = self.ready_at.get(self._activated or "", now)
            in_time = ready <= now
            waited = max(0.0, ready - now)
        elif result is not None and result.compacted:
            waited = self.last_seconds
        return WhatIfStep(
            through_seq=view.through_seq,
            view_tokens=view.estimated_tokens,
            compacted=self.compactions > before,
            original_tokens=served.estimated_tokens,
            prepared=prepared,
            in_time=in_time,
            waited_seconds=waited,
            cached_tokens=cached,
            view_hash=view.view_hash,
        )

    def _shared_head(self, messages: tuple[Message, ...]) -> int:
        """Tokens of the messages at the head of ``messages`` equal to the previous view's."""
        previous, self._previous_view = self._previous_view, messages
        shared = 0
        for old, new in zip(previous, messages, strict=False):
            if old != new:
                break
            shared += 1
        return session_tokenizer(self.state, self.tokenizer).count_messages(list(messages[:shared]))

    def decide(self, request: Request, now: float, log_id: str | None = None) -> Decision:
        """Decide ``request`` at time ``now``, running summaries as the host would.

        With ``log_id`` (a background compaction the log started), its summary is held until
        :meth:`release` (the log's outcome of it) or until a step waits for it; one the log never
        finished (the host stopped first) is never run.
        """
        self._now = now
        self._activated = None
        self.last_seconds = 0.0
        decision = self._step(request)
        while decision.job is not None or decision.wait_for is not None:
            if decision.wait_for is not None:  # the host waits for the running summary
                waited = self._finish(decision.wait_for)
                if waited is None and not self.release(
                    self._log_ids.get(decision.wait_for, ""), waiting=True
                ):
                    break  # nothing held to wait for: serve as decided
                self.last_seconds += waited or 0.0
                decision = self._step(request)
                continue
            job = decision.job
            assert job is not None
            if job.background and log_id is not None:
                self._held[log_id] = (job, now)
                self._log_ids[job.compaction_id] = log_id
                return decision
            summarized, seconds = self._run(job)
            if job.background:
                # It runs as a host would run it: the session has it in progress (no other
                # starts) until it is ready, and a step at the threshold waits for it.
                self.ready_at[job.compaction_id] = now + seconds
                self._running[job.compaction_id] = (summarized, now + seconds)
                return decision
            self.last_seconds += seconds
            decision = self._step(summarized)
        return decision

    def release_ready(self, now: float) -> None:
        """Fold the background summaries of the policy tried that are ready by ``now``."""
        for job_id, (_, ready) in sorted(self._running.items(), key=lambda item: item[1][1]):
            if ready <= now:
                self._finish(job_id)

    def _finish(self, job_id: str) -> float | None:
        """Fold the running background summary ``job_id``; how long a step at the current
        time waits for it (None: it is not running)."""
        running = self._running.pop(job_id, None)
        if running is None:
            return None
        summarized, ready = running
        self._step(summarized)
        return max(0.0, ready - self._now)

    def release(
        self, log_id: str, *, failed: CompactionFailed | None = None, waiting: bool = False
    ) -> bool:
        """Run and fold the held background compaction the log started as ``log_id`` (as failed,
        where the log recorded its failure); whether one was held. ``waiting``: a step waits
        for it now, so the time it still needed is counted as waited."""
        held = self._held.pop(log_id, None)
        if held is None:
            return False
        job, started = held
        if failed is not None:
            summarized = Summarized(job=job, summary=None, detail=failed.detail)
        else:
            summarized, seconds = self._run(job)
            self.ready_at[job.compaction_id] = started + seconds
            if waiting:
                self.last_seconds += max(0.0, started + seconds - self._now)
        self._step(summarized)
        return True

    def _run(self, job: Job) -> tuple[Summarized, float]:
        """Summarise ``job`` (reusing the log's summary of the same input), counting its input."""
        plan = job.plan
        tokenizer = session_tokenizer(self.state, self.tokenizer)
        self.summary_input_tokens += tokenizer.count_messages(list(plan.messages))
        self.summary_input_tokens += tokenizer.count_text(plan.previous_summary or "")
        return self._summarize(job)

    def _step(self, request: Request) -> Decision:
        decision = decide(
            self.state, request, tokenizer=self.tokenizer, new_id=self._new_id, now=self._clock
        )
        for event in decision.events:
            self.state.apply(event)
            if isinstance(event, CheckpointCreated):
                self.compactions += 1
                if event.prepared:
                    self._activated = event.compaction_id
        return decision

    def _summarize(self, job: Job) -> tuple[Summarized, float]:
        known = self.known.get(job.plan.input_hash)
        if known is not None:
            summary, seconds, checkpoint = known
            self._original = checkpoint
            self.reused += 1
            return Summarized(job=job, summary=summary), seconds
        started = time.perf_counter()
        try:
            summary_or_none = run_summarizer(job.plan, self.summarizer)
        except Exception as exc:  # a failing summariser means summary_unavailable, as live
            return Summarized(job=job, summary=None, detail=repr(exc)), 0.0
        seconds = time.perf_counter() - started
        if self.summary_seconds is not None:
            seconds = self.summary_seconds
        # The checkpoint records how long its summary took, as a host records it (the
        # background judges a session's pace by it).
        return Summarized(job=job, summary=summary_or_none, seconds=seconds), seconds

    def _new_id(self) -> str:
        # A checkpoint whose summary came from the log keeps the log's id and time.
        if self._original is not None:
            return self._original.id
        # Unique per run: a compaction started in the background and the checkpoint made
        # meanwhile must not share an id (their ready times are kept by id).
        self._ids += 1
        return f"what-if-{self._ids}"

    def _clock(self) -> float:
        original, self._original = self._original, None
        return original.created_at if original is not None else self._now


def _known_summaries(
    records: list[RecordedEvent],
) -> dict[str, tuple[str, float, Checkpoint | None]]:
    """The log's summaries by input hash, with how long each took and its checkpoint, if any."""
    started: dict[str, float] = {}
    known: dict[str, tuple[str, float, Checkpoint | None]] = {}
    for record in records:
        event = record.event
        if isinstance(event, CompactionStarted):
            started[event.compaction_id] = record.timestamp
        elif isinstance(event, SummaryPrepared) and event.input_hash:
            seconds = max(
                0.0, record.timestamp - started.get(event.compaction_id, record.timestamp)
            )
            known.setdefault(event.input_hash, (event.summary, seconds, None))
        elif isinstance(event, CheckpointCreated) and event.checkpoint.input_hash:
            checkpoint = event.checkpoint
            begun = started.get(event.compaction_id, record.timestamp)
            seconds = 0.0 if event.prepared else max(0.0, record.timestamp - begun)
            previous = known.get(checkpoint.input_hash)
            if previous is None or previous[2] is None:
                known[checkpoint.input_hash] = (
                    checkpoint.summary,
                    previous[1] if previous is not None else seconds,
                    checkpoint,
                )
    return known


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
