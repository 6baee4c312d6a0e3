"""The summaries of :class:`~ctxledger.testing.DomainSession`: its default summariser, and a
job's summary written the way the host's compaction actors write it."""

from __future__ import annotations

from ctxledger.domain.compaction import run_summarizer
from ctxledger.domain.decide import Job, Summarized
from ctxledger.domain.summary import Summarizer, SummaryRequest, describe_summarizer

__all__ = ["digest_summarizer", "summarized"]


def digest_summarizer(request: SummaryRequest) -> str:
    """Summarise deterministically: the previous summary, then one short line per message."""
    lines = [request.previous_summary] if request.previous_summary else []
    if request.focus:
        lines.append(f"Focus: {request.focus}")
    for message in request.messages:
        first = message.content.strip().splitlines()[0][:60] if message.content.strip() else ""
        lines.append(f"[{message.seq}] {message.role}: {first}")
    return "\n".join(lines)[: request.max_chars] or "(nothing)"


def summarized(job: Job, summarizer: Summarizer) -> Summarized:
    """Run ``summarizer`` for ``job`` now; a failure is an outcome (worded as the host's
    compaction actors word it: the detail is recorded), not a crash."""
    name = describe_summarizer(summarizer)
    try:
        summary = run_summarizer(job.plan, summarizer)
    except Exception as exc:  # as the host: a failing summariser is an outcome, not a crash
        detail = f"summarizer raised {type(exc).__name__}: {exc}"
        return Summarized(job=job, summary=None, detail=detail, summarizer=name)
    if not summary:
        detail = "summarizer returned no summary"
        return Summarized(job=job, summary=None, detail=detail, summarizer=name)
    if not summary.isascii():  # a lone surrogate cannot be recorded
        summary = summary.encode("utf-8", "replace").decode("utf-8")
    return Summarized(job=job, summary=summary, summarizer=name)
