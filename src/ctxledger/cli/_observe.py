"""Verbs that show what the context layer did: ``report`` (one HTML file) and ``ui`` (the same
pages served live). Both open the log read-only."""

from __future__ import annotations

import time
from pathlib import Path

import click

from ctxledger.cli._app import db_option, open_log, require_session
from ctxledger.cli._progress import reading_progress
from ctxledger.domain.cost import PRICING_PRESETS, Pricing
from ctxledger.errors import ConfigError
from ctxledger.storage import LogTarget, describe_target
from ctxledger.tooling.format import human_bytes

__all__ = ["report", "ui"]


def _pricing(value: str | None) -> Pricing | None:
    """``--pricing``: a preset's name, or four prices per million tokens."""
    if value is None:
        return None
    if value in PRICING_PRESETS:
        return Pricing.preset(value)
    parts = value.split(",")
    try:
        numbers = [float(part) for part in parts]
    except ValueError:
        numbers = []
    if len(numbers) != 4:
        known = ", ".join(sorted(PRICING_PRESETS))
        raise ConfigError(
            "--pricing",
            f"expected a preset ({known}) or INPUT,CACHED,CACHE_WRITE,OUTPUT in $ per million "
            f"tokens, got {value!r}",
        )
    return Pricing(*numbers)


_PRICING_HELP = (
    "Price the recorded usage: a preset (e.g. anthropic-sonnet) or "
    "INPUT,CACHED,CACHE_WRITE,OUTPUT in $ per million tokens."
)


@click.command()
@click.argument("session_id", metavar="SESSION")
@db_option
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The HTML file to write.",
)
@click.option("--pricing", metavar="PRESET|PRICES", help=_PRICING_HELP)
def report(session_id: str, db: LogTarget, output: Path, pricing: str | None) -> None:
    """Write one self-contained HTML report of a session (opens offline, fetches nothing).

    It shows tokens per step with the threshold and every compaction (click a marker for its
    summary, wall time, wait and what its audit says was lost), the exact view served at any
    step, usage and cost, and a search box over the history.
    """
    from ctxledger.tooling.report import write_report

    prices = _pricing(pricing)
    if not output.parent.is_dir():
        raise click.ClickException(f"cannot write '{output}': its folder does not exist")
    started = time.perf_counter()
    with open_log(db) as log:
        require_session(log, session_id, db)
        with reading_progress(log, "report", log.last_seq(session_id)) as counted:
            written = write_report(counted, session_id, output, pricing=prices)
    click.echo(
        f"wrote {written.path} ({human_bytes(written.bytes)}, {written.steps:,} steps, "
        f"{written.compactions:,} compactions) in {time.perf_counter() - started:.1f} s"
    )


@click.command()
@db_option
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on. Anything but a loopback address lets whoever reaches the port "
    "read every message of every session, without a password.",
)
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option("--pricing", metavar="PRESET|PRICES", help=_PRICING_HELP)
def ui(db: LogTarget, host: str, port: int, pricing: str | None) -> None:
    """Serve the reports of every session live, read-only, until interrupted.

    An index of sessions (messages, checkpoints, view tokens, last activity) and a report page
    per session that follows the log as agents write to it. Only GET and HEAD are answered;
    JSON for scripts at /api/sessions and /api/sessions/ID.
    """
    from ctxledger.tooling.ui import UiServer, is_loopback

    prices = _pricing(pricing)
    with open_log(db) as log:
        server = UiServer(log, host, port, pricing=prices, label=describe_target(db))
        try:
            if not is_loopback(host):
                click.echo(
                    f"warning: listening on {host}: anyone who can reach port {server.port} "
                    "reads every session of this log (no authentication, no TLS)",
                    err=True,
                )
            click.echo(f"serving {server.url} (read-only; Ctrl-C to stop)")
            try:
                server.serve_forever()
            except KeyboardInterrupt:
                click.echo("stopped")
        finally:
            server.close()
