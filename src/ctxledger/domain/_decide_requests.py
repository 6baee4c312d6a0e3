"""The requests :func:`~ctxledger.domain.decide` takes and the :class:`Decision` it answers.

Also the two answers every decision step shares: the event that records a served view
(:func:`served`) and the decision that starts a compaction's job (:func:`start_job`).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from ctxledger.checkpoints import Checkpoint
from ctxledger.domain.calibration import view_chars
from ctxledger.domain.compaction import CompactionPlan, CompactionResult, Trigger
from ctxledger.domain.state import SessionState
from ctxledger.domain.tokenizer import Tokenizer
from ctxledger.domain.view import ModelView, remask_of
from ctxledger.errors import CtxLedgerError
from ctxledger.events.types import Event, ViewServed

__all__ = [
    "Adopt",
    "Background",
    "Compact",
    "Decision",
    "Job",
    "Recover",
    "Request",
    "Serve",
    "Summarized",
    "served",
    "start_job",
]


class Serve(msgspec.Struct, frozen=True, kw_only=True):
    """Serve the next view, compacting first when it is due.

    Attributes:
        pending: Text about to be sent with the view (counted in the estimate).
        compact: Compact first when the estimate reaches the threshold (``False``:
            ``build_model_view``, which only serves).
        view: Serve and record a view (``False``: ``compact_if_needed``, which only compacts).
    """

    pending: str = ""
    compact: bool = True
    view: bool = True


class Compact(msgspec.Struct, frozen=True, kw_only=True):
    """Compact now, whatever the estimate.

    Attributes:
        trigger: ``manual``, ``prompt_too_long`` (a reactive retry) or ``threshold_exceeded``.
        focus: What the summary should keep (manual compaction).
        attempt: The reactive retry number, from 0.
        pending: Text about to be sent with the view.
    """

    trigger: Trigger = "manual"
    focus: str | None = None
    attempt: int = 0
    pending: str = ""


class Background(msgspec.Struct, frozen=True, kw_only=True):
    """Start a summary in the background when one is due (after an append or usage report).

    Attributes:
        timed: Prepare none that cannot be ready before the threshold at the session's pace
            (:func:`~ctxledger.domain.policy.ready_in_time`, a schema-4 Config or later).
            ``False`` replays a background start a log recorded, whatever the pace.
    """

    timed: bool = True


class Recover(msgspec.Struct, frozen=True, kw_only=True):
    """A session is activated after a restart: repair what the crash left open."""


class Adopt(msgspec.Struct, frozen=True, kw_only=True):
    """Record ``checkpoint``, made elsewhere, as the next one (a transcript being imported).

    Attributes:
        checkpoint: The checkpoint, as it was made; it must extend the active one.
        compaction_id: The id its ``CompactionStarted`` is to carry.
    """

    checkpoint: Checkpoint
    compaction_id: str


class Job(msgspec.Struct, frozen=True, kw_only=True):
    """A compaction waiting for its summary.

    Attributes:
        compaction_id: The id its ``CompactionStarted`` carries.
        plan: What to summarise (:func:`~ctxledger.domain.run_summarizer` runs it).
        request: The request that started it.
    """

    compaction_id: str
    plan: CompactionPlan
    request: Serve | Compact | Background

    @property
    def background(self) -> bool:
        """Whether the summary is prepared ahead of need (it changes no view when it arrives)."""
        return isinstance(self.request, Background)


class Summarized(msgspec.Struct, frozen=True, kw_only=True):
    """The summariser answered a job, or failed to.

    Attributes:
        job: The job.
        summary: The summary; None or "" when the summariser returned nothing, raised or timed
            out.
        detail: Why there is no summary (recorded on ``CompactionFailed``).
        waited_seconds: How long the caller waited for it (reported on the result).
        summarizer: Who wrote it (``describe_summarizer``), recorded with it; "" if unknown.
        seconds: The summariser's wall time, recorded with it.
    """

    job: Job
    summary: str | None
    detail: str = ""
    waited_seconds: float = 0.0
    summarizer: str = ""
    seconds: float = 0.0


Request = Serve | Compact | Background | Summarized | Recover | Adopt


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """What to record and what to answer.

    Attributes:
        events: Record these, in order, atomically; then fold them.
        view: The view to serve (it is the view of the state once ``events`` are folded).
        result: The outcome of the compaction part of the request, if it has one.
        job: A summary is needed: record ``events``, run the summariser for ``job.plan``, then
            decide :class:`Summarized`.
        wait_for: The id of a background compaction that is running: wait until its outcome
            (``SummaryPrepared`` or ``CompactionFailed``) is folded, then decide the same
            request again. Nothing is to be recorded now.
        error: The request fails: record ``events`` (if any), then raise this to the caller
            (:class:`~ctxledger.errors.BudgetExceededError`, or
            :class:`~ctxledger.errors.ContextOverflowError` when the floor of the view exceeds
            the window).
    """

    events: tuple[Event, ...] = ()
    view: ModelView | None = None
    result: CompactionResult | None = None
    job: Job | None = None
    wait_for: str | None = None
    error: CtxLedgerError | None = None


def served(
    view: ModelView, state: SessionState, tokenizer: Tokenizer, *, chars: int | None = None
) -> ViewServed:
    """Return the event that records ``state`` serving ``view`` (with the re-mask it makes, if
    any: :func:`~ctxledger.domain.remask_of`); ``chars`` is :func:`view_chars` of its messages
    when the draft counted it already (:attr:`~ctxledger.domain.view.Draft.chars`)."""
    return ViewServed(
        through_seq=view.through_seq,
        estimated_tokens=view.estimated_tokens,
        view_hash=view.view_hash,
        checkpoint_id=view.checkpoint_id,
        message_count=len(view.messages),
        view_chars=view_chars(view.messages) if chars is None else chars,
        remask=remask_of(state, view, tokenizer=tokenizer, chars=chars),
    )


def start_job(
    outcome: CompactionPlan | CompactionResult,
    request: Serve | Compact | Background,
    new_id: Callable[[], str],
) -> Decision:
    """The decision that starts a job for ``outcome`` when it is a plan (else it answers it)."""
    if not isinstance(outcome, CompactionPlan):
        return Decision(result=outcome)
    job = Job(compaction_id=new_id(), plan=outcome, request=request)
    started = outcome.started(job.compaction_id, background=job.background)
    return Decision(events=(started,), job=job)
