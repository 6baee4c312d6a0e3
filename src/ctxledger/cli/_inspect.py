"""Read-only verbs: ``sessions``, ``show``, ``view``, ``plot`` and ``stats``.

They open the log read-only and never create the folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ctxledger.checkpoints import Checkpoint
from ctxledger.cli._app import SEQ, db_option, open_log, require_session
from ctxledger.cli._compactions import checkpoint_lines
from ctxledger.cli._render import emit, event_line, message_lines, view_text
from ctxledger.domain import CharTokenizer, build_view
from ctxledger.errors import CtxLedgerError, EventDecodeError
from ctxledger.events import CheckpointCreated, CheckpointReverted, SummaryPrepared
from ctxledger.messages import Message
from ctxledger.replay import Damage, find_damage, rebuild, view_at
from ctxledger.replay.damage import Unreadable, read_around_damage
from ctxledger.replay.standins import walk_session
from ctxledger.storage import EventLog, LogTarget
from ctxledger.tooling.format import human_bytes, human_time, table
from ctxledger.tooling.timeline import session_timeline

__all__ = ["plot", "sessions", "show", "stats", "view"]


@click.command()
@db_option
def sessions(db: LogTarget) -> None:
    """List sessions: messages, checkpoints, events, view tokens, summariser, last activity,
    status.

    SUMMARY TIME is the summariser's total wall time over the session's checkpoints (where
    they recorded it); SUMMARISER names the one that wrote the last checkpoint.
    PREPARED/ACTIVATED counts the summaries prepared in the background (``SummaryPrepared``)
    and the checkpoints made from one without a summariser call ("-" when there were none).
    Every record is read, so a damaged session is listed as such, with the first seq that
    cannot be read (a fork whose parent is damaged before the fork point names the parent); the
    others are listed as usual. See ``salvage`` for copying what still verifies.
    """
    rows = []
    damaged = 0
    with open_log(db) as log:
        damage = find_damage(log)
        for session_id in log.sessions():
            found = damage.get(session_id)
            row = _session_row(log, session_id) if found is None else None
            status = "ok"
            if row is None:
                damaged += 1
                row = _damaged_row(log, session_id)
                status = found.describe() if found is not None else "cannot be rebuilt"
            rows.append((*row, status))
    if not rows:
        click.echo(f"no sessions in '{db}'")
        return
    headers = (
        "SESSION",
        "MESSAGES",
        "CHECKPOINTS",
        "EVENTS",
        "VIEW TOKENS",
        "SUMMARY TIME",
        "SUMMARISER",
        "PREPARED/ACTIVATED",
        "LAST ACTIVITY",
        "STATUS",
    )
    click.echo(table(headers, rows, right="<>>>>><><"))
    if damaged:
        click.echo(
            f"{damaged} of {len(rows)} sessions cannot be read to the end; "
            f"'ctxledger salvage --db {db} --out NEWDIR' copies what still verifies",
            err=True,
        )


def _session_row(log: EventLog, session_id: str) -> tuple[str, ...] | None:
    """The columns of an undamaged session, or None if it cannot be rebuilt after all."""
    try:
        state = rebuild(log, session_id)
        (last,) = log.read(session_id, state.event_seq, state.event_seq)
    except CtxLedgerError:
        return None
    made = _distinct(state.checkpoints)
    seconds = sum(checkpoint.summary_seconds for checkpoint in made)
    return (
        session_id,
        str(len(state.history)),
        str(len(made)),
        str(state.event_seq),
        f"{state.view.estimated_tokens:,}",
        f"{seconds:.2f} s" if seconds else "-",
        (made[-1].summarizer or "-") if made else "-",
        _background_counts(log, session_id),
        human_time(last.timestamp),
    )


def _background_counts(log: EventLog, session_id: str) -> str:
    """``prepared/activated``: background summaries the session recorded, and those that became
    checkpoints (its own events; a fork's parent counts what it recorded before the fork)."""
    prepared = activated = 0
    for record in log.iter_events(session_id):
        event = record.event
        if isinstance(event, SummaryPrepared):
            prepared += 1
        elif isinstance(event, CheckpointCreated) and event.prepared:
            activated += 1
    return f"{prepared}/{activated}" if prepared or activated else "-"


def _damaged_row(log: EventLog, session_id: str) -> tuple[str, ...]:
    """The columns that can still be filled for a damaged session: its events, maybe its time."""
    try:
        last = log.last_seq(session_id)
    except CtxLedgerError:  # the session's own entry is damaged
        return (session_id, "-", "-", "-", "-", "-", "-", "-", "-")
    try:
        records = log.read(session_id, last, last) if last else []
    except CtxLedgerError:  # the last record is the damaged one
        records = []
    when = human_time(records[0].timestamp) if records else "-"
    return (session_id, "-", "-", str(last), "-", "-", "-", "-", when)


def _distinct(checkpoints: list[Checkpoint]) -> list[Checkpoint]:
    """The checkpoints made, once each (a revert lists the one it restores again)."""
    return list({checkpoint.id: checkpoint for checkpoint in checkpoints}.values())


@click.command()
@click.argument("session_id", metavar="SESSION")
@db_option
@click.option("--events", "show_events", is_flag=True, help="Show raw events, not messages.")
@click.option(
    "--from",
    "start",
    type=SEQ,
    default=1,
    show_default=True,
    help="First seq to show (message seq, or event seq with --events).",
)
@click.option("--limit", type=SEQ, help="Show at most this many.")
@click.option("--full", is_flag=True, help="Print whole message contents, not one-line previews.")
@click.option(
    "--checkpoints",
    "show_checkpoints",
    is_flag=True,
    help="Show the compactions (active or reverted, summariser, wall time, input and output "
    "size, fact block).",
)
@click.option("--pager/--no-pager", default=True, help="Page long output on a terminal.")
def show(
    session_id: str,
    db: LogTarget,
    show_events: bool,
    start: int,
    limit: int | None,
    full: bool,
    show_checkpoints: bool,
    pager: bool,
) -> None:
    """Show a session's history (or its raw events with --events, its compactions with
    --checkpoints).

    A damaged session is shown as far as it can be read: the messages before the damage and,
    where the log reads on, after it (a lost message is marked ``lost``; raw events list each
    damaged record). Then one error line says where and what the damage is, and the exit
    status is 1.
    """
    damage: list[str] = []
    with open_log(db) as log:
        require_session(log, session_id, db)
        if show_events:
            stop = None if limit is None else start + limit - 1
            lines = []
            for entry in read_around_damage(log, session_id, stop, from_seq=start):
                if isinstance(entry, Unreadable):
                    lines.append(f"{entry.seq:<7} {'?':<19}  {'(damaged)':<24} {entry.error}")
                    damage.append(str(entry.error))
                else:
                    lines.append(event_line(entry.seq, entry.timestamp, entry.event))
        else:
            history, checkpoints, active, damage = _readable(log, session_id)
            if show_checkpoints:
                reverted = {
                    entry.event.checkpoint_id
                    for entry in read_around_damage(log, session_id)
                    if not isinstance(entry, Unreadable)
                    and isinstance(entry.event, CheckpointReverted)
                }
                lines = checkpoint_lines(_distinct(checkpoints), active, reverted)
                lines = lines or [f"no checkpoints in session {session_id!r}"]
            else:
                chosen = history[start - 1 :]
                chosen = chosen if limit is None else chosen[:limit]
                lines = list(message_lines(chosen, full))
    emit(lines, pager)
    if damage:
        more = f"; {len(damage) - 1} more damaged record(s)" if len(damage) > 1 else ""
        raise click.ClickException(
            f"{damage[0]}{more}; shown: what can be read (lost messages marked 'lost'); "
            f"'ctxledger salvage' copies the rest into a new log"
        )


def _readable(
    log: EventLog, session_id: str
) -> tuple[list[Message], list[Checkpoint], str | None, list[str]]:
    """The session's history, checkpoints and the active one's id (as its view shows it), read
    on past any damage; and the damage."""
    try:
        state = rebuild(log, session_id)
        return state.history, state.checkpoints, state.view.checkpoint_id, []
    except EventDecodeError as exc:
        error = exc
    try:
        walk = walk_session(log, session_id)
    except CtxLedgerError:  # nothing of it can be folded: the error says why
        raise error from None
    assert walk.state is not None
    active = build_view(walk.state, tokenizer=CharTokenizer()).checkpoint_id
    # No replaced record of its own: the damage is in a fork parent's prefix.
    damage = [replaced.detail for replaced in walk.replaced] or [str(error)]
    return list(walk.state.history), list(walk.state.checkpoints), active, damage


@click.command()
@click.argument("session_id", metavar="SESSION")
@db_option
@click.option(
    "--at",
    "at_seq",
    type=SEQ,
    help="The view served while message SEQ was the newest (time travel).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "openai", "anthropic"]),
    default="text",
    show_default=True,
    help="How to print the view.",
)
def view(session_id: str, db: LogTarget, at_seq: int | None, fmt: str) -> None:
    """Print the model view of a session, now or as of a message seq."""
    with open_log(db) as log:
        require_session(log, session_id, db)
        if at_seq is None:
            model_view = rebuild(log, session_id).view
        else:
            model_view = view_at(log, session_id, at_seq)
    if fmt == "openai":
        click.echo(json.dumps(model_view.to_openai(), indent=2, ensure_ascii=False))
    elif fmt == "anthropic":
        click.echo(json.dumps(model_view.to_anthropic(), indent=2, ensure_ascii=False))
    else:
        click.echo(view_text(session_id, model_view))


@click.command()
@click.argument("session_ids", metavar="SESSION...", nargs=-1, required=True)
@db_option
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The file to write: .png, .svg or .pdf (the format follows the suffix).",
)
def plot(session_ids: tuple[str, ...], db: LogTarget, output: Path) -> None:
    """Plot tokens per step (history, view, threshold, compactions) as PNG, SVG or PDF."""
    from ctxledger.tooling.plotting import FORMATS, MAX_PANELS, plot_token_series

    if len(session_ids) > MAX_PANELS:
        raise click.UsageError(f"at most {MAX_PANELS} sessions fit one plot")
    if output.suffix.lower() not in FORMATS:
        raise click.UsageError(
            f"plot writes {', '.join(FORMATS)} (the format follows the suffix), "
            f"not '{output.name}'"
        )
    with open_log(db) as log:
        for session_id in session_ids:
            require_session(log, session_id, db)
        series = [session_timeline(log, sid).token_series() for sid in session_ids]
    empty = [one.session_id for one in series if not one.steps]
    if empty:
        raise click.ClickException(f"no views were served in session {empty[0]!r}: nothing to plot")
    written = plot_token_series(series, output, title=f"ctxledger: tokens per step ({db})")
    click.echo(f"wrote {written}")


@click.command()
@db_option
@click.option(
    "--top",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="List this many sessions with the most events.",
)
def stats(db: LogTarget, top: int) -> None:
    """Show storage size, compression ratio, map usage and events per session.

    Every record is read, so damaged sessions are counted and named (with the first seq that
    cannot be read) and marked in the per-session table.
    """
    with open_log(db) as log:
        info: dict[str, Any] = log.stats()
        damage = {sid: found for sid, found in find_damage(log).items() if found is not None}
    rows = [("path", info["path"]), ("file size", human_bytes(info["file_bytes"]))]
    if "map_size" in info:  # LMDB
        used, size = info["map_used"], info["map_size"]
        rows.append(("map used", f"{human_bytes(used)} of {human_bytes(size)} ({used / size:.1%})"))
    rows += [
        ("sessions", f"{info['sessions']:,}"),
        ("damaged sessions", _damaged_summary(damage)),
        ("events", f"{info['events']:,}"),
        (
            "payload bytes",
            f"{human_bytes(info['raw_bytes'])} raw, {human_bytes(info['stored_bytes'])} stored",
        ),
        ("compression ratio", f"{info['compression_ratio']:.2f}"),
        ("zstd dictionaries", ", ".join(map(str, info["dictionaries"])) or "none"),
    ]
    click.echo(table(("STORAGE", ""), rows))
    per_session = sorted(info["events_per_session"].items(), key=lambda item: (-item[1], item[0]))
    if per_session and top:
        shown = per_session[:top]
        shown += [item for item in per_session[top:] if item[0] in damage]  # never hidden
        click.echo()
        click.echo(
            table(
                ("SESSION", "EVENTS", "STATUS"),
                [(sid, f"{n:,}", _status(damage.get(sid))) for sid, n in shown],
                right="<>",
            )
        )
        if len(per_session) > len(shown):
            click.echo(f"… and {len(per_session) - len(shown)} more sessions")


_LISTED_DAMAGE = 10  # damaged sessions named in the storage table


def _damaged_summary(damage: dict[str, Damage]) -> str:
    if not damage:
        return "none"
    named = ", ".join(
        f"{sid} ({found.describe()})" for sid, found in list(damage.items())[:_LISTED_DAMAGE]
    )
    more = f", … and {len(damage) - _LISTED_DAMAGE} more" if len(damage) > _LISTED_DAMAGE else ""
    return f"{len(damage):,}: {named}{more}"


def _status(found: Damage | None) -> str:
    return "ok" if found is None else found.describe()
