"""Verbs about what compaction did: ``audit``, ``explain`` (alias ``why``), ``recall`` and
``revert``.

``audit``, ``explain`` and ``recall`` read the log (``recall`` keeps its search index next to it,
see :mod:`ctxledger.replay.recall_index`); ``revert`` writes a ``CheckpointReverted`` event.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import msgspec

from ctxledger.actors.host import Host
from ctxledger.checkpoints import Checkpoint
from ctxledger.cli._app import db_option, open_log, require_db, require_session
from ctxledger.domain.audit import LossReport
from ctxledger.domain.facts import FACT_KINDS
from ctxledger.replay.audit import audit_log, explain, recall
from ctxledger.replay.recall_index import DEFAULT_RECALL_LIMIT, MAX_RECALL_LIMIT, format_hits
from ctxledger.tooling.format import clip, human_time, table

__all__ = ["audit", "checkpoint_lines", "explain_", "recall_", "revert"]

_LOST_SHOWN = 40  # lost facts listed before "... and N more" (all of them with --json)


@click.command()
@click.argument("session_id", metavar="SESSION")
@db_option
@click.option("--checkpoint", "checkpoint_id", help="The checkpoint to audit (default: active).")
@click.option("--json", "as_json", is_flag=True, help="Print the whole report as JSON.")
def audit(session_id: str, db: Path, checkpoint_id: str | None, as_json: bool) -> None:
    """Show what a compaction lost: facts of the summarised messages the view lacks."""
    with open_log(db) as log:
        require_session(log, session_id, db)
        report = audit_log(log, session_id, checkpoint_id)
    if as_json:
        click.echo(json.dumps(msgspec.to_builtins(report), indent=1, ensure_ascii=False))
        return
    click.echo("\n".join(audit_lines(report)))


def audit_lines(report: LossReport) -> list[str]:
    """A loss report as text: the checkpoint, a table per fact kind, the lost facts."""
    extends = f", extends {report.previous_checkpoint_id}" if report.previous_checkpoint_id else ""
    lines = [
        f"checkpoint {report.checkpoint_id} ({report.reason}, {human_time(report.created_at)}) "
        f"summarised #{report.first_seq}..#{report.covers_through_seq} "
        f"({report.messages} messages{extends})",
        "",
    ]
    rows: list[tuple[str, int, int, int, str]] = []
    for kind in FACT_KINDS:
        count = report.counts[kind]
        share = f"{100 * count.kept / count.facts:.1f} %" if count.facts else "-"
        rows.append((kind, count.facts, count.kept, count.lost, share))
    total = report.retention
    rows.append(
        (
            "all",
            report.facts,
            len(report.kept),
            len(report.lost),
            "-" if total is None else f"{100 * total:.1f} %",
        )
    )
    lines.append(table(("FACTS", "IN COVERED", "KEPT", "LOST", "KEPT %"), rows, right="<>>>>"))
    if report.lost:
        lines += ["", "lost (not in the view the checkpoint gave), newest message holding each:"]
        for fact in report.lost[:_LOST_SHOWN]:
            lines.append(f"  #{fact.seq:<6} {fact.kind:<10} {clip(fact.text, 100)}")
        if len(report.lost) > _LOST_SHOWN:
            lines.append(f"  … and {len(report.lost) - _LOST_SHOWN} more (--json lists all)")
    return lines


@click.command("explain")
@click.argument("session_id", metavar="SESSION")
@click.argument("seq", type=int)
@db_option
def explain_(session_id: str, seq: int, db: Path) -> None:
    """Say where message SEQ is in the session's current view, and why (Session.explain).

    Also answers to its older name, ``why``.
    """
    with open_log(db) as log:
        require_session(log, session_id, db)
        placement = explain(log, session_id, seq)
    click.echo(placement.detail)
    if placement.kind == "summarized":
        click.echo(
            f"checkpoint {placement.checkpoint_id}: {placement.checkpoint_reason}, "
            f"{human_time(placement.checkpoint_created_at or 0.0)}"
        )
        click.echo(f"find it with: ctxledger recall --db {db} {session_id} WORDS")


@click.command("recall")
@click.argument("session_id", metavar="SESSION")
@click.argument("query", nargs=-1, required=True)
@db_option
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_RECALL_LIMIT),
    default=DEFAULT_RECALL_LIMIT,
    show_default=True,
    help="The most messages to show.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the hits as JSON.")
def recall_(session_id: str, query: tuple[str, ...], db: Path, limit: int, as_json: bool) -> None:
    """Search the messages the view no longer shows raw (summarised, masked, truncated)."""
    text = " ".join(query)
    with open_log(db) as log:
        require_session(log, session_id, db)
        hits = recall(log, session_id, text, limit=limit)
    if as_json:
        click.echo(json.dumps(msgspec.to_builtins(hits), indent=1, ensure_ascii=False))
    else:
        click.echo(format_hits(text, hits))


@click.command()
@click.argument("session_id", metavar="SESSION")
@db_option
@click.option("--checkpoint", "checkpoint_id", help="The checkpoint to revert (must be active).")
@click.option("--reason", default="", help="Why, for the record.")
def revert(session_id: str, db: Path, checkpoint_id: str | None, reason: str) -> None:
    """Undo the active compaction: the checkpoint before it becomes active again."""
    require_db(db)
    with Host.open(db) as host:
        require_session(host.log, session_id, db)
        session = host.session(session_id)
        reverted = session.checkpoints()[-1].id if session.checkpoints() else None
        restored = session.revert_compaction(checkpoint_id, reason=reason)
    if restored is None:
        click.echo(
            f"reverted checkpoint {reverted} of {session_id!r}, its first: the full history is "
            "shown again (ctxledger compact --focus TEXT to redo it now)"
        )
        return
    click.echo(
        f"reverted checkpoint {reverted} of {session_id!r}: checkpoint {restored.id} is active "
        f"again (summarises through #{restored.covers_through_seq}); the next compaction "
        "extends it (ctxledger compact --focus TEXT to redo it now)"
    )


def checkpoint_lines(
    checkpoints: list[Checkpoint], active: str | None, reverted: set[str]
) -> list[str]:
    """The compactions of a session with their metadata, the active one and the reverted ones
    marked in STATE (the others were extended by a later checkpoint)."""
    if not checkpoints:
        return []
    rows = [
        (
            checkpoint.id,
            checkpoint.reason,
            f"#{checkpoint.covers_through_seq}",
            checkpoint.summarizer or "-",
            f"{checkpoint.summary_seconds:.2f} s" if checkpoint.summary_seconds else "-",
            f"{checkpoint.input_chars:,}" if checkpoint.input_chars else "-",
            f"{checkpoint.output_chars:,}",
            f"{len(checkpoint.facts):,}",
            f"{checkpoint.tokens_before:,} → {checkpoint.tokens_after:,}",
            _mark(checkpoint.id, active, reverted),
        )
        for checkpoint in checkpoints
    ]
    headers = (
        "CHECKPOINT",
        "REASON",
        "COVERS",
        "SUMMARISER",
        "TIME",
        "IN CHARS",
        "OUT CHARS",
        "FACT CHARS",
        "VIEW TOKENS",
        "STATE",
    )
    return [table(headers, rows, right="<<><>>>>><")]


def _mark(checkpoint_id: str, active: str | None, reverted: set[str]) -> str:
    if checkpoint_id == active:
        return "active"
    return "reverted" if checkpoint_id in reverted else "-"
