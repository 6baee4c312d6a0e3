"""What ``ctxledger demo`` measured (:class:`DemoResult`), and how it is shown: the session
table, the summary, the plot and the session the report shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from ctxledger.replay import VerifyReport
from ctxledger.tooling.demo_worker import AgentPlan, Plan
from ctxledger.tooling.timeline import Timeline

__all__ = ["DemoResult", "count", "plot", "report_agent", "session_table", "summary", "verify_line"]

_PLOT_PANELS = 4


@dataclass
class DemoResult:
    """What the demo measured; ``ok`` is the overall verdict.

    ``waited`` holds, per session, the seconds its agent waited on summaries (the sum of
    ``CompactionResult.waited_seconds`` over its acknowledged steps, both host processes).
    """

    timelines: list[Timeline] = field(default_factory=list)
    planned_steps: int = 0
    steps_before_kill: int = 0
    recovered_sessions: int = 0
    lost_messages: int = 0
    interrupted: int = 0
    recovery_seconds: float = 0.0
    recovered_events: int = 0
    verify_after_crash: VerifyReport | None = None
    verify_at_end: VerifyReport | None = None
    plot: Path | None = None
    report: Path | None = None
    report_session: str = ""
    seconds: float = 0.0
    waited: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Nothing lost and both verifications clean."""
        return (
            self.lost_messages == 0
            and self.verify_after_crash is not None
            and self.verify_after_crash.ok
            and self.verify_at_end is not None
            and self.verify_at_end.ok
        )


def verify_line(report: VerifyReport) -> str:
    """One line on a verification: the verdict and what was re-derived from the log."""
    verdict = "ok" if report.ok else f"FAILED ({len(report.mismatches)} mismatches)"
    return (
        f"{verdict}: {report.sessions} sessions, {report.events:,} events, "
        f"{report.views_checked:,} served views and {report.checkpoints_checked:,} checkpoints "
        "re-derived from the log"
    )


def session_table(
    timelines: Sequence[Timeline], agents: Sequence[AgentPlan], waited: dict[str, float]
) -> str:
    """The per-session table printed at the end, with a TOTAL row."""
    from ctxledger.tooling.format import human_tokens, table

    rows: list[tuple[object, ...]] = []
    totals = [0] * 7
    for timeline, agent in zip(timelines, agents, strict=True):
        counts = timeline.layer_counts()
        numbers = [
            len(timeline.steps),
            timeline.events,
            counts["micro"],
            counts["auto"],
            counts["manual"],
            counts["reactive"],
            timeline.interrupted,
        ]
        totals = [a + b for a, b in zip(totals, numbers, strict=True)]
        rows.append(
            (
                timeline.session_id,
                agent.source,
                *(f"{n:,}" for n in numbers[:2]),
                human_tokens(timeline.history_tokens),
                human_tokens(timeline.peak_view_tokens),
                *(f"{n:,}" for n in numbers[2:]),
                f"{waited.get(timeline.session_id, 0.0):.2f} s",
            )
        )
    rows.append(
        (
            "TOTAL",
            "",
            *(f"{n:,}" for n in totals[:2]),
            human_tokens(sum(t.history_tokens for t in timelines)),
            human_tokens(max((t.peak_view_tokens for t in timelines), default=0)),
            *(f"{n:,}" for n in totals[2:]),
            f"{sum(waited.get(t.session_id, 0.0) for t in timelines):.2f} s",
        )
    )
    headers = (
        "SESSION",
        "SOURCE",
        "STEPS",
        "EVENTS",
        "HISTORY TOK",
        "PEAK VIEW TOK",
        "MICRO",
        "AUTO",
        "MANUAL",
        "REACTIVE",
        "INTERRUPTED",
        "WAITED",
    )
    return table(headers, rows, right="<<>>>>>>>>>>")


def summary(result: DemoResult, plan: Plan) -> str:
    """The closing summary, one ``key  value`` line per figure."""
    from ctxledger.tooling.format import human_tokens

    timelines = result.timelines
    counts = {layer: 0 for layer in ("micro", "auto", "manual", "reactive")}
    for timeline in timelines:
        for layer, n in timeline.layer_counts().items():
            counts[layer] += n
    config = plan.config
    history = sum(t.history_tokens for t in timelines)
    peak = max((t.peak_view_tokens for t in timelines), default=0)
    lines = [
        (
            "sessions",
            f"{len(timelines)} concurrent agent sessions on one host (threads in one process)",
        ),
        ("events", f"{sum(t.events for t in timelines):,} in the log"),
        (
            "compactions",
            f"micro {counts['micro']:,} views with old tool results masked · "
            f"auto {counts['auto']:,} "
            f"· manual {counts['manual']:,} · reactive {counts['reactive']:,}",
        ),
        (
            "tokens",
            f"history {human_tokens(history)} in total vs peak view {human_tokens(peak)} "
            f"(window {human_tokens(config.context_window)}, threshold "
            f"{human_tokens(config.threshold_tokens)})",
        ),
        (
            "crash",
            f"SIGKILL after {result.steps_before_kill:,} of {result.planned_steps:,} steps; "
            f"{result.recovered_sessions}/{len(timelines)} sessions recovered, "
            f"{count(result.lost_messages, 'acknowledged message')} lost, "
            f"{count(result.interrupted, 'interrupted tool call')} answered",
        ),
        (
            "recovery",
            f"{result.recovery_seconds:.2f} s to reopen the log and replay "
            f"{result.recovered_events:,} events",
        ),
        ("verify", f"after the crash: {_verdict(result.verify_after_crash)}"),
        ("", f"at the end: {_verdict(result.verify_at_end)}"),
        (
            "waited",
            f"{sum(result.waited.values()):.2f} s in all by the agents on summaries "
            f"(background compaction from {config.sizes().prepare_tokens:,} tokens)",
        ),
        ("plot", str(result.plot) if result.plot else "skipped (matplotlib is not installed)"),
        (
            "report",
            f"{result.report} (session {result.report_session}: open it in a browser)"
            if result.report
            else "none (no session served a view)",
        ),
        ("time", f"{result.seconds:.1f} s"),
        ("result", "OK" if result.ok else "FAILED"),
    ]
    width = max(len(key) for key, _ in lines)
    return "\n".join(f"{key:<{width}}  {value}" for key, value in lines)


def count(number: int, noun: str) -> str:
    """``number`` and ``noun``, plural unless the number is 1."""
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def _verdict(report: VerifyReport | None) -> str:
    if report is None:
        return "not run"
    if report.ok:
        return f"ok ({report.views_checked:,} served views reproduced, 0 mismatches)"
    return f"FAILED ({len(report.mismatches)} mismatches)"


def report_agent(timelines: Sequence[Timeline]) -> str:
    """The session whose report shows the most: the most kinds of compaction, then the most."""
    ranked = sorted(
        (t for t in timelines if t.steps),
        key=lambda t: (
            -len({c.layer for c in t.compactions}),
            -len(t.compactions),
            t.session_id,
        ),
    )
    return ranked[0].session_id if ranked else ""


def plot(
    timelines: Sequence[Timeline], agents: Sequence[AgentPlan], path: Path, err: TextIO
) -> Path | None:
    """Plot the sessions that show the most (the special agents first); None if skipped."""
    try:
        from ctxledger.tooling.plotting import plot_token_series
    except ImportError:  # pragma: no cover - plotting imports matplotlib lazily
        return None
    special = {a.session_id for a in agents if a.manual_at is not None or a.reactive_at is not None}
    ranked = sorted(
        (t for t in timelines if t.steps),
        key=lambda t: (t.session_id not in special, -len(t.compactions), t.session_id),
    )
    chosen = sorted(ranked[:_PLOT_PANELS], key=lambda t: t.session_id)
    if not chosen:
        return None
    try:
        return plot_token_series(
            [t.token_series() for t in chosen],
            path,
            title="ctxledger demo: tokens per step (history kept vs. view sent)",
        )
    except ImportError as exc:
        print(f"plot skipped: {exc}", file=err)
        return None
