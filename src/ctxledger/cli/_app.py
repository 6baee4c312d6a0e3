"""The ``ctxledger`` command group: error reporting, logging, and what every verb shares.

Every failure a user can cause (a missing folder, an unknown session, a corrupt record, a bad
config value, a wrong option) ends as ONE line on stderr and a non-zero exit status; ``--debug``
(or ``CTXLEDGER_DEBUG=1``) shows the traceback and debug logs instead.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from ctxledger._logging import log_to_stderr
from ctxledger.config import Config
from ctxledger.errors import (
    ConfigError,
    CtxLedgerError,
    InvalidArgumentError,
    UnknownSessionError,
)
from ctxledger.storage import (
    EventLog,
    LmdbEventLog,
    LogTarget,
    describe_target,
    is_postgres_target,
)
from ctxledger.storage import open_log as open_target
from ctxledger.storage._checks import MAX_SEQ
from ctxledger.storage._paths import check_folder
from ctxledger.summarizers import (
    AnthropicSummarizer,
    ExtractiveSummarizer,
    OpenAIChatSummarizer,
    Summarizer,
)

__all__ = [
    "ALIASES",
    "CONFIG_FLAGS",
    "SEQ",
    "CtxLedgerGroup",
    "build_config",
    "config_options",
    "configure_logging",
    "db_option",
    "make_summarizer",
    "open_log",
    "parse_log_target",
    "require_db",
    "require_session",
    "summarizer_options",
]

if TYPE_CHECKING:
    from ctxledger.storage import PostgresEventLog

F = TypeVar("F", bound=Callable[..., Any])

#: Exit status of a failure the user can fix (bad input, missing data); 2 is click's usage error.
EXIT_FAILURE = 1
#: Exit status of an unexpected internal error.
EXIT_INTERNAL = 70


#: Verbs also known by an older name: alias -> verb. A verb is named as the Python call it
#: runs (``explain`` is ``Session.explain``, ``what-if`` is ``replay.what_if``).
ALIASES = {"why": "explain", "whatif": "what-if"}


class CtxLedgerGroup(click.Group):
    """A group whose errors are one line on stderr (tracebacks only with ``--debug``), and
    whose verbs also answer to their :data:`ALIASES`."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The verb ``cmd_name`` names, directly or by its alias."""
        return super().get_command(ctx, ALIASES.get(cmd_name, cmd_name))

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every verb and alias, sorted."""
        return sorted([*self.commands, *ALIASES])

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List the verbs with their short help, and each alias with the verb it stands for."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max((len(name) for name in names), default=0)
        rows = []
        for name in names:
            if name in ALIASES:
                rows.append((name, f"The same as '{ALIASES[name]}'."))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def main(  # type: ignore[override]
        self, args: Any = None, prog_name: str | None = None, **extra: Any
    ) -> Any:
        """Run the command; print any error as one line and exit with its status."""
        standalone = extra.pop("standalone_mode", True)
        try:
            result = super().main(args, prog_name, standalone_mode=False, **extra)
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            _fail(f"{exc.format_message()}{hint}", exc.exit_code)
        except click.ClickException as exc:
            _fail(exc.format_message(), exc.exit_code)
        except click.Abort:
            _fail("aborted", EXIT_FAILURE)
        except (CtxLedgerError, OSError, ImportError) as exc:
            # The user's to fix: a missing folder, an unknown session, a corrupt record, a bad
            # config value, a missing optional dependency.
            if _debug_requested(args):
                traceback.print_exc()
            _fail(_describe(exc), EXIT_FAILURE)
        except Exception as exc:  # a bug: still one line, unless --debug asked for the traceback
            if _debug_requested(args):
                traceback.print_exc()
            _fail(
                f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)",
                EXIT_INTERNAL,
            )
        if not standalone:
            return result
        sys.exit(result if isinstance(result, int) else 0)


def _fail(message: str, status: int) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(status)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, CtxLedgerError) and exc.strerror:
        where = f": {exc.filename!r}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return str(exc) or type(exc).__name__


def _env_debug() -> bool:
    return os.environ.get("CTXLEDGER_DEBUG", "") not in ("", "0")


def _debug_requested(args: Any) -> bool:
    argv = sys.argv[1:] if args is None else list(args)
    return "--debug" in argv or _env_debug()


def configure_logging(debug: bool) -> None:
    """Send ctxledger's log events to stderr: warnings and errors, everything with debug.

    The library never configures logging; the command, as the application, does.
    """
    log_to_stderr(logging.DEBUG if debug else logging.WARNING)


# --- the database: a folder or a PostgreSQL URI -------------------------------------------------


def parse_log_target(ctx: click.Context, param: click.Parameter, value: str) -> LogTarget:
    """A click callback for a log option: a ``postgresql://`` URI stays a string; anything else
    is a folder (a Path), refused here if empty or not valid UTF-8 (so that nothing is made in
    the current folder, or half made before LMDB refuses the name)."""
    if is_postgres_target(value):
        return value
    try:
        check_folder(value)
    except InvalidArgumentError as exc:
        raise click.BadParameter(str(exc).removeprefix("path: "), ctx, param) from None
    folder = Path(value)
    if folder.exists() and not folder.is_dir():
        raise click.BadParameter(f"'{value}' is a file, not a folder", ctx, param)
    return folder


#: A seq (or a count of them) on the command line: at least 1, at most what a log can hold.
SEQ = click.IntRange(1, MAX_SEQ)


def db_option(func: F) -> F:
    """Add ``--db DIR|URI`` (or ``$CTXLEDGER_DB``): an LMDB folder or a ``postgresql://`` URI."""
    return click.option(
        "--db",
        "db",
        required=True,
        envvar="CTXLEDGER_DB",
        metavar="DIR|URI",
        callback=parse_log_target,
        help="The event log: an LMDB folder, or a postgresql://user@host/dbname URI "
        "(password in PGPASSWORD or ~/.pgpass); or set CTXLEDGER_DB.",
    )(func)


def require_db(db: LogTarget) -> LogTarget:
    """Return ``db`` if it may hold an event log; never create it.

    A URI is checked when it is opened (read-only opens refuse a database without a log).

    Raises:
        click.ClickException: The folder is missing or holds no event log.
    """
    if is_postgres_target(db):
        return db
    folder = Path(db)
    if not folder.exists():
        raise click.ClickException(f"no event log at '{folder}': the folder does not exist")
    if not folder.is_dir() or not (folder / "data.mdb").is_file():
        raise click.ClickException(f"no event log at '{folder}': it holds no data.mdb")
    return folder


@contextmanager
def open_log(db: LogTarget, *, write: bool = False) -> Iterator[LmdbEventLog | PostgresEventLog]:
    """Open the event log of an existing folder or database, read-only unless ``write``."""
    log = open_target(require_db(db), readonly=not write)
    try:
        yield log
    finally:
        log.close()


def require_session(log: EventLog, session_id: str, db: LogTarget) -> None:
    """Raise :class:`UnknownSessionError` unless ``session_id`` has events."""
    if log.last_seq(session_id) == 0:
        where = describe_target(db)
        raise UnknownSessionError(
            f"unknown session {session_id!r} in '{where}' "
            f"(list them with: ctxledger sessions --db {where})"
        )


# --- Config from options --------------------------------------------------------------------------

#: Option name -> Config field, for the named config options.
CONFIG_FLAGS: dict[str, str] = {
    "window": "context_window",
    "threshold": "compression_threshold",
    "target": "compaction_target",
    "min_retain_rounds": "min_retain_rounds",
    "micro_keep_recent": "micro_keep_recent",
    "micro_batch": "micro_batch",
    "micro_min_chars": "micro_min_chars",
    "summary_timeout": "summary_timeout",
    "threshold_policy": "threshold_policy",
}


def config_options(func: F) -> F:
    """Add the Config options; the verb receives them as one ``config_overrides`` dict."""
    options = [
        click.option("--window", type=int, help="context_window: the model's window in tokens."),
        click.option("--threshold", type=float, help="compression_threshold: share of the window."),
        click.option("--target", type=float, help="compaction_target: the low mark, a share."),
        click.option("--min-retain-rounds", type=int, help="Rounds kept verbatim after a cut."),
        click.option("--micro-keep-recent", type=int, help="Newest tool results never masked."),
        click.option("--micro-batch", type=int, help="Re-mask every this many aged results."),
        click.option("--micro-min-chars", type=int, help="Results this short are never masked."),
        click.option("--summary-timeout", type=float, help="Seconds the summariser may take."),
        click.option(
            "--threshold-policy", type=click.Choice(["fixed", "dynamic"]), help="Threshold policy."
        ),
        click.option(
            "--set",
            "settings",
            multiple=True,
            metavar="KEY=VALUE",
            help="Any other Config field, e.g. --set max_tool_result_chars=20000 (repeatable).",
        ),
    ]

    @functools.wraps(func)  # keeps the options that decorators below this one attached
    def collect(**kwargs: Any) -> Any:
        overrides = {CONFIG_FLAGS[name]: kwargs.pop(name) for name in CONFIG_FLAGS}
        overrides = {name: value for name, value in overrides.items() if value is not None}
        overrides.update(_parse_settings(kwargs.pop("settings")))
        return func(config_overrides=overrides, **kwargs)

    wrapped: Any = collect
    for option in reversed(options):
        wrapped = option(wrapped)
    return wrapped  # type: ignore[no-any-return]


def _parse_settings(settings: tuple[str, ...]) -> dict[str, Any]:
    fields = set(Config.__struct_fields__)
    parsed: dict[str, Any] = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        key = key.strip().replace("-", "_")
        if not sep:
            raise ConfigError(key or setting, f"expected KEY=VALUE, got {setting!r}")
        if key not in fields:
            raise ConfigError(key, "no such setting")
        typed = Config.from_env({f"CTXLEDGER_{key.upper()}": value})
        parsed[key] = getattr(typed, key)
    return parsed


def build_config(base: Config, overrides: dict[str, Any]) -> Config:
    """Return ``base`` with ``overrides`` applied and validated.

    Raises:
        ConfigError: A value is invalid.
    """
    return base.replace(**overrides) if overrides else base


# --- summarisers ----------------------------------------------------------------------------------


def summarizer_options(func: F) -> F:
    """Add ``--summarizer``, ``--base-url`` and ``--model``."""
    func = click.option("--model", help="Model name for --summarizer openai|anthropic.")(func)
    func = click.option(
        "--base-url", help="API root, e.g. http://127.0.0.1:8000/v1 (openai) or https://…"
    )(func)
    return click.option(
        "--summarizer",
        type=click.Choice(["offline", "openai", "anthropic"]),
        default="offline",
        show_default=True,
        help="Who writes summaries: the offline extractive summariser or an LLM endpoint "
        "(API keys from OPENAI_API_KEY / ANTHROPIC_API_KEY).",
    )(func)


def make_summarizer(kind: str, base_url: str | None, model: str | None) -> Summarizer:
    """Build the summariser that ``--summarizer`` names.

    Raises:
        click.UsageError: An LLM summariser lacks ``--base-url`` or ``--model``.
    """
    if kind == "offline":
        return ExtractiveSummarizer()
    if not model:
        raise click.UsageError(f"--summarizer {kind} needs --model")
    if kind == "openai":
        if not base_url:
            raise click.UsageError("--summarizer openai needs --base-url")
        return OpenAIChatSummarizer(base_url, model)
    if base_url:
        return AnthropicSummarizer(model, base_url=base_url)
    return AnthropicSummarizer(model)
