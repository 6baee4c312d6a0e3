"""``copy``: a whole event log into an empty one, across backends, verified."""

from __future__ import annotations

import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import click

from ctxledger.cli._app import parse_log_target, require_db
from ctxledger.replay import verify as verify_log
from ctxledger.storage import LogTarget, copy_log, describe_target

__all__ = ["copy"]


@click.command("copy")
@click.option(
    "--from",
    "source",
    required=True,
    metavar="DIR|URI",
    callback=parse_log_target,
    help="The log to copy: an LMDB folder or a postgresql:// URI (opened read-only).",
)
@click.option(
    "--to",
    "target",
    required=True,
    metavar="DIR|URI",
    callback=parse_log_target,
    help="Where to copy it: a folder or a postgresql:// URI holding no session yet.",
)
def copy(source: LogTarget, target: LogTarget) -> None:
    """Copy a whole event log into an empty one, e.g. from LMDB to PostgreSQL, and verify it.

    Every session, event and snapshot is copied, with the same seqs, global positions, commit
    times and event bytes. Then both logs are compared event by event and the copy is verified
    (every served view re-derived); exit 1 if anything differs.
    """
    require_db(source)
    if _same_log(source, target):
        raise click.UsageError(
            f"--from and --to name the same log ({describe_target(source)}): a log cannot be "
            "copied into itself; name an empty folder or database for --to"
        )
    started = time.perf_counter()
    with ExitStack() as stack:
        bars: list[Any] = []  # the bar starts with the first event copied: errors come first

        def progress(done: int, total: int) -> None:
            if not bars:
                bars.append(
                    stack.enter_context(
                        click.progressbar(
                            length=total, label="copy", file=sys.stderr, show_pos=True
                        )
                    )
                )
            bars[0].update(done - bars[0].pos)

        report = copy_log(source, target, progress=progress)
    with click.progressbar(
        length=report.sessions, label="verify", file=sys.stderr, show_pos=True
    ) as bar:
        verified = verify_log(target, progress=lambda _: bar.update(1))
    elapsed = time.perf_counter() - started
    click.echo(
        f"copied {report.sessions:,} sessions, {report.events:,} events and "
        f"{report.snapshots:,} snapshots from {describe_target(source)} to "
        f"{describe_target(target)} in {elapsed:.1f} s; every event matches the source"
    )
    if not verified.ok:
        raise click.ClickException(
            f"verify found {len(verified.mismatches)} problem(s) in the copy "
            f"(see: ctxledger verify --db {describe_target(target)})"
        )
    click.echo(
        f"verify: ok ({verified.events:,} events, {verified.views_checked:,} views, "
        f"{verified.checkpoints_checked:,} checkpoints)"
    )


def _same_log(source: LogTarget, target: LogTarget) -> bool:
    """Whether both name one log: the same folder (however spelt) or the same URI."""
    if isinstance(source, Path) and isinstance(target, Path):
        return source.resolve() == target.resolve()
    return source == target
