"""Verbs built on replay: ``verify``, ``whatif`` and ``salvage``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ctxledger.cli._app import (
    build_config,
    config_options,
    db_option,
    make_summarizer,
    open_log,
    require_session,
    summarizer_options,
)
from ctxledger.cli._progress import reading_progress
from ctxledger.errors import EventDecodeError
from ctxledger.replay import Mismatch, rebuild, what_if
from ctxledger.replay import salvage as salvage_log
from ctxledger.replay import verify as verify_log
from ctxledger.storage import EventLog, LogTarget
from ctxledger.tooling.format import table

__all__ = ["events_in", "salvage", "verify", "whatif"]

_MAX_MISMATCHES = 50


@click.command()
@click.argument("session_id", metavar="[SESSION]", required=False)
@db_option
@click.pass_context
def verify(ctx: click.Context, session_id: str | None, db: LogTarget) -> None:
    """Re-derive every served view and checkpoint and compare; exit 1 on any mismatch.

    Also checks seq density, tool-call pairing and record checksums. It reports, never repairs
    (see ``salvage``). On a terminal, a progress bar on stderr counts the events read.
    """
    with open_log(db) as log:
        if session_id is not None:
            require_session(log, session_id, db)
        sessions = log.sessions() if session_id is None else [session_id]
        with reading_progress(log, "verify", events_in(log, sessions)) as counted:
            report = verify_log(counted, session_id)
    scope = f"session {session_id!r}" if session_id else f"{report.sessions} sessions"
    counts = (
        f"{scope}, {report.events:,} events, {report.views_checked:,} views and "
        f"{report.checkpoints_checked:,} checkpoints re-derived"
    )
    if report.lost:
        _print_lost(report.lost)
    if report.ok:
        click.echo(f"verify ok: {counts}, 0 mismatches{_lost_summary(report.lost)}")
        return
    rows = [
        (m.session, m.seq, m.kind, _short(m.expected), _short(m.actual), m.detail)
        for m in report.mismatches[:_MAX_MISMATCHES]
    ]
    headers = ("SESSION", "EVENT SEQ", "KIND", "EXPECTED", "ACTUAL", "DETAIL")
    click.echo(table(headers, rows, right="<>"))
    if len(report.mismatches) > _MAX_MISMATCHES:
        click.echo(f"… and {len(report.mismatches) - _MAX_MISMATCHES} more")
    click.echo(
        f"verify FAILED: {counts}, {len(report.mismatches)} mismatches"
        f"{_lost_summary(report.lost)}",
        err=True,
    )
    ctx.exit(1)


def _print_lost(lost: list[Mismatch]) -> None:
    """What a salvaged log lost, and the checks that loss made impossible."""
    rows = [(m.session, m.seq, m.kind, m.detail) for m in lost[:_MAX_MISMATCHES]]
    click.echo(table(("SESSION", "EVENT SEQ", "LOST", "DETAIL"), rows, right="<>"))
    if len(lost) > _MAX_MISMATCHES:
        click.echo(f"… and {len(lost) - _MAX_MISMATCHES} more")


def _lost_summary(lost: list[Mismatch]) -> str:
    records = sum(1 for m in lost if m.kind == "record_lost")
    unchecked = len(lost) - records
    if not lost:
        return ""
    return (
        f"; {records} record(s) lost in a salvage, {unchecked} check(s) not comparable "
        "because of them"
    )


@click.command("what-if")
@click.argument("session_id", metavar="SESSION")
@db_option
@config_options
@summarizer_options
def whatif(
    session_id: str,
    db: LogTarget,
    config_overrides: dict[str, Any],
    summarizer: str,
    base_url: str | None,
    model: str | None,
) -> None:
    """Re-project a session under other settings (say --threshold 0.6); the log is untouched.

    Steps wherever the original served a view and compares what the new policy would have
    produced with what was recorded (replay.what_if). Summaries already in the log are reused
    where their input is identical; the summariser is called only for new ranges. Also answers
    to its older name, ``whatif``.
    """
    if not config_overrides:
        raise click.UsageError("give at least one setting to change, e.g. --threshold 0.6")
    summarize = make_summarizer(summarizer, base_url, model)
    with open_log(db) as log:
        require_session(log, session_id, db)
        before = rebuild(log, session_id).config
        after = build_config(before, config_overrides)
        label = f"whatif {session_id}"
        with reading_progress(log, label, log.last_seq(session_id)) as counted:
            report = what_if(counted, session_id, after, summarizer=summarize)
    rows: list[tuple[str, str, str]] = [
        (label, _value(before, name), _value(after, name))
        for label, name in _SHOWN_SETTINGS
        if getattr(before, name) != getattr(after, name) or name in _ALWAYS_SHOWN
    ]
    rows += [
        ("steps (views served)", f"{len(report.steps):,}", f"{len(report.steps):,}"),
        ("compactions", f"{report.original_compactions:,}", f"{report.compactions:,}"),
        ("peak view tokens", f"{report.original_peak_tokens:,}", f"{report.peak_tokens:,}"),
        ("summariser calls", "-", f"{report.summarizer_calls:,}"),
        ("summaries reused", "-", f"{report.reused_summaries:,}"),
    ]
    click.echo(f"what-if for {session_id!r} (the log is unchanged)")
    click.echo(table(("", "RECORDED", "WHAT-IF"), rows, right="<>>"))


@click.command()
@db_option
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The folder of the new log (must not exist, or be empty).",
)
@click.pass_context
def salvage(ctx: click.Context, db: LogTarget, out: Path) -> None:
    """Copy a damaged log into a new one, losing only the damaged records; exit 1 if anything
    was lost.

    Each damaged record is replaced by a 'record_lost' event at its place, and every intact
    record after it is kept: a lost message by a stand-in that says so (a lost tool result still
    answers its call, so views stay valid). A session is cut only at a problem no loss explains
    (a view that does not rebuild where nothing was lost), so 'ctxledger verify' passes on the
    new log; tool calls left unanswered are answered as after a crash. A fork whose parent's
    copy ends before the fork point is dropped whole. The damaged log is only read.
    """
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise click.ClickException(f"'{out}' is not empty: salvage writes a new log there")
    with open_log(db) as log:
        total = events_in(log, log.sessions())
        with reading_progress(log, "salvage", total) as counted:
            report = salvage_log(counted, out)
    rows = [
        (
            entry.session,
            "?" if entry.events is None else f"{entry.events:,}",
            f"{entry.kept:,}",
            f"{len(entry.replaced):,}",
            "all" if entry.dropped is None else f"{entry.dropped:,}",
            f"{entry.synthesized:,}",
            _clip(entry.reason) or "whole",
        )
        for entry in report.sessions
    ]
    headers = ("SESSION", "EVENTS", "KEPT", "REPLACED", "DROPPED", "ANSWERED", "NOTE")
    click.echo(table(headers, rows, right="<>>>>>"))
    summary = (
        f"{report.kept:,} events of {len(report.sessions)} sessions copied to '{out}', "
        f"{report.replaced:,} replaced as lost, {report.dropped:,} dropped"
    )
    if report.complete:
        click.echo(f"salvage complete: {summary}")
        return
    touched = sum(1 for entry in report.sessions if entry.cut_at is not None or entry.replaced)
    click.echo(f"salvage lost events of {touched} session(s): {summary}", err=True)
    ctx.exit(1)


_NOTE_CHARS = 100


def _clip(text: str) -> str:
    return text if len(text) <= _NOTE_CHARS else text[: _NOTE_CHARS - 1] + "…"


_ALWAYS_SHOWN = ("context_window", "compression_threshold")
_SHOWN_SETTINGS = (
    ("context window", "context_window"),
    ("threshold", "compression_threshold"),
    ("min retain rounds", "min_retain_rounds"),
    ("micro keep recent", "micro_keep_recent"),
    ("micro batch", "micro_batch"),
    ("micro min chars", "micro_min_chars"),
    ("threshold policy", "threshold_policy"),
)


def _value(config: Any, name: str) -> str:
    value = getattr(config, name)
    if name == "compression_threshold":
        return f"{value} ({config.threshold_tokens:,} tok)"
    return f"{value:,}" if isinstance(value, int) else str(value)


def events_in(log: EventLog, sessions: list[str]) -> int:
    """How many events the sessions hold (a session whose entry is damaged counts as none)."""
    total = 0
    for session_id in sessions:
        try:
            total += log.last_seq(session_id)
        except EventDecodeError:
            continue
    return total


def _short(digest: str | None) -> str:
    return "-" if not digest else digest[:16]
