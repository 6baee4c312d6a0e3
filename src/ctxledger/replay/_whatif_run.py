"""The re-projected session of :func:`~ctxledger.replay.what_if`, and the step it measures.

:class:`Run` decides each request as a host would (:func:`ctxledger.domain.decide`), running
summaries on the way: a summary already in the log is reused where its input is the same
(content-addressed), others are written by the summariser tried and counted; a background
summary is held until the log's outcome of it, or until it would be ready. Each served view
becomes a :class:`WhatIfStep`.
"""

from __future__ import annotations

import time

import msgspec

from ctxledger.checkpoints import Checkpoint
from ctxledger.domain import (
    Decision,
    Job,
    Request,
    Serve,
    SessionState,
    Summarized,
    Tokenizer,
    decide,
    draft_view,
    run_summarizer,
    session_tokenizer,
)
from ctxledger.domain.commands import RevertCompaction, execute
from ctxledger.errors import InvalidCheckpointError
from ctxledger.events import (
    CheckpointCreated,
    CompactionFailed,
    CompactionStarted,
    SummaryPrepared,
    ViewServed,
)
from ctxledger.messages import Message
from ctxledger.storage import RecordedEvent
from ctxledger.summarizers import Summarizer, SummaryRequest

__all__ = ["CountingSummarizer", "Run", "WhatIfStep"]


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


class CountingSummarizer:
    """A summariser that counts how often it is called (``WhatIfReport.summarizer_calls``)."""

    def __init__(self, inner: Summarizer) -> None:
        self.inner = inner
        self.calls = 0

    def __call__(self, request: SummaryRequest) -> str | None:
        self.calls += 1
        return self.inner(request)


class Run:
    """The re-projected session: the decision step, with summaries reused from the log."""

    def __init__(
        self,
        state: SessionState,
        tokenizer: Tokenizer,
        summarizer: CountingSummarizer,
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

    def revert(self, reason: str) -> None:
        """Undo the active checkpoint where the log's agent reverted one, as the host's
        ``revert_compaction`` would (the log's event names a checkpoint of the original run:
        this run undoes its own); nothing when this run has none to undo."""
        try:
            outcome = execute(self.state, RevertCompaction(reason=reason))
        except InvalidCheckpointError:
            return
        for event in outcome.events:
            self.state.apply(event)

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
