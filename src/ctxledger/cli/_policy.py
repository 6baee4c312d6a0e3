"""``policy``: the sizes a Config's compaction policy uses, one per line, with what each means."""

from __future__ import annotations

import click

from ctxledger.cli._app import build_config, config_options, open_log, parse_log_target
from ctxledger.config import SIZE_MEANINGS, Config, PolicySizes
from ctxledger.errors import UnknownSessionError
from ctxledger.events import ConfigChanged, SessionOpened
from ctxledger.storage import LogTarget, describe_target

__all__ = ["policy", "policy_lines"]


def policy_lines(config: Config) -> list[str]:
    """The lines ``ctxledger policy`` prints for ``config``: a name, a value, a meaning."""
    sizes: PolicySizes = config.sizes()
    rows = [
        (
            "schema_version",
            str(sizes.schema_version),
            "the Config's schema (5: views hashed with version 1, 4: the marks' first shares,"
            " 3: one mark; as recorded)",
        ),
        *((name, f"{getattr(sizes, name):,}", meaning) for name, meaning in SIZE_MEANINGS.items()),
    ]
    width = max(len(name) for name, _, _ in rows)
    digits = max(len(value) for _, value, _ in rows)
    return [f"{name:<{width}}  {value:>{digits}}  {meaning}" for name, value, meaning in rows]


def _recorded(db: LogTarget, session_id: str) -> Config:
    """The Config in force at the end of ``session_id``'s log."""
    found: Config | None = None
    with open_log(db) as log:
        for record in log.iter_events(session_id, 1, None):
            event = record.event
            if isinstance(event, SessionOpened | ConfigChanged):
                found = event.config
    if found is None:
        where = describe_target(db)
        raise UnknownSessionError(
            f"unknown session {session_id!r} in '{where}' "
            f"(list them with: ctxledger sessions --db {where})"
        )
    return found


@click.command("policy")
@click.argument("session_id", required=False, metavar="[SESSION]")
@click.option(
    "--db",
    "db",
    metavar="DIR|URI",
    default=None,
    callback=lambda ctx, param, value: (
        None if value is None else parse_log_target(ctx, param, value)
    ),
    help="Read SESSION's recorded Config (the one in force at the end of its log) from this "
    "event log: an LMDB folder or a postgresql:// URI.",
)
@config_options
def policy(
    session_id: str | None, db: LogTarget | None, config_overrides: dict[str, object]
) -> None:
    """Print the sizes of a compaction policy, one per line, with what each means.

    Without --db: a Config built now, e.g. ``ctxledger policy --window 16000`` (with
    --threshold, --target and --set KEY=VALUE for any other field). With --db DIR SESSION: the
    session's recorded Config (options given as well are applied on top of it).
    """
    if (db is None) != (session_id is None):
        raise click.UsageError("give both --db and SESSION, or neither")
    base = Config() if db is None or session_id is None else _recorded(db, session_id)
    config = build_config(base, dict(config_overrides))
    for line in policy_lines(config):
        click.echo(line)
