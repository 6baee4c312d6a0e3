"""Verbs that write the log: ``ingest``, ``compact``, ``export`` and ``import``."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from ctxledger.actors.host import Host, HostOptions
from ctxledger.cli._app import (
    build_config,
    config_options,
    db_option,
    make_summarizer,
    open_log,
    require_db,
    require_session,
    summarizer_options,
)
from ctxledger.cli._progress import reading_progress
from ctxledger.config import Config
from ctxledger.errors import SessionExistsError
from ctxledger.storage import DURABILITY_MODES, Durability, LogTarget
from ctxledger.storage import open_log as open_target
from ctxledger.tooling.format import human_bytes, human_tokens
from ctxledger.tooling.timeline import split_steps
from ctxledger.tooling.traces import read_trace, validate_trace
from ctxledger.tooling.transcripts import (
    DEFAULT_KEEP,
    export_transcript,
    import_transcript,
    read_transcript,
)
from ctxledger.tooling.transcripts import SUFFIX as TRANSCRIPT_SUFFIX

__all__ = ["compact", "export", "import_", "ingest"]

_MAX_REPORTED = 20  # bad lines listed before "... and N more"
_EXAMPLE_CALL = '{"id": "c1", "name": "ls", "arguments": "{}"}'
#: ``ingest --help``: what the verb does, and the trace format it reads.
INGEST_HELP = f"""Append a trace file (one JSON message per line) as a new session.

The whole file is validated before anything is written: if any line is bad, every bad line is
reported with its number and nothing is written. Then each step is appended atomically, and
(unless --append-only) a view is served before each assistant message, as the agent's host did
when it called the model, so compaction runs as it would have live.

\b
The trace format (the ../shared/traces files): each line is one JSON object with
  role          "system", "user", "assistant" or "tool"
  content       the text (a string; "" when an assistant only calls tools)
  tool_calls    assistant only, optional: [{{"id", "name", "arguments"}}], where
                arguments is a JSON object encoded as a string
  tool_call_id  tool only: the id of the call it answers
  name          optional: the tool's name
Any other key is refused. Every call is answered by a later tool line (unless
--allow-pending, for the last step), once, with call ids unique in the file. Example:
  {{"role": "user", "content": "list the files"}}
  {{"role": "assistant", "content": "", "tool_calls": [{_EXAMPLE_CALL}]}}
  {{"role": "tool", "content": "README.md", "tool_call_id": "c1", "name": "ls"}}
"""


@click.command(help=INGEST_HELP)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@db_option
@click.option("--session", "session_id", help="The new session's id (default: the file's stem).")
@config_options
@summarizer_options
@click.option(
    "--append-only",
    is_flag=True,
    help="Only append; do not serve a view before each assistant message.",
)
@click.option("--allow-pending", is_flag=True, help="Accept tool calls unanswered at the end.")
@click.option(
    "--durability", type=click.Choice(DURABILITY_MODES), default="sync", show_default=True
)
def ingest(
    file: Path,
    db: LogTarget,
    session_id: str | None,
    config_overrides: dict[str, Any],
    summarizer: str,
    base_url: str | None,
    model: str | None,
    append_only: bool,
    allow_pending: bool,
    durability: Durability,
) -> None:
    """Append a trace file (one JSON message per line) as a new session; see --help."""
    session_id = session_id or file.stem
    config = build_config(Config(), config_overrides)
    problems = validate_trace(file, allow_pending=allow_pending)
    if problems:
        for problem in problems[:_MAX_REPORTED]:
            click.echo(str(problem), err=True)
        if len(problems) > _MAX_REPORTED:
            click.echo(f"... and {len(problems) - _MAX_REPORTED} more", err=True)
        raise click.ClickException(f"{len(problems)} bad line(s) in '{file}'; nothing was written")
    messages = read_trace(file, allow_pending=allow_pending)
    started = time.perf_counter()
    summarize = make_summarizer(summarizer, base_url, model)
    options = HostOptions(durability=durability)
    with Host.open(db, config=config, summarizer=summarize, options=options) as host:
        if host.log.last_seq(session_id) != 0:
            raise SessionExistsError(
                f"session {session_id!r} already exists in '{db}'; choose another --session"
            )
        session = host.session(session_id)
        views = 0
        with click.progressbar(
            length=len(messages), label=f"ingest {session_id}", file=sys.stderr, show_pos=True
        ) as bar:
            for index, step in enumerate(split_steps(messages)):
                if index and not append_only:
                    session.prepare_step()
                    views += 1
                session.append_many(step)
                bar.update(len(step))
        checkpoints = len(session.checkpoints())
    elapsed = time.perf_counter() - started
    click.echo(
        f"ingested {len(messages):,} messages into session {session_id!r} "
        f"({views:,} views served, {checkpoints} checkpoints) in {elapsed:.1f} s"
    )


@click.command()
@click.argument("session_id", metavar="SESSION")
@db_option
@click.option("--focus", help="What the summary must keep, e.g. 'the API signatures'.")
@summarizer_options
def compact(
    session_id: str,
    db: LogTarget,
    focus: str | None,
    summarizer: str,
    base_url: str | None,
    model: str | None,
) -> None:
    """Compact a session now (manual compaction), optionally with a focus."""
    require_db(db)
    summarize = make_summarizer(summarizer, base_url, model)
    with Host.open(db, summarizer=summarize) as host:
        require_session(host.log, session_id, db)
        session = host.session(session_id)
        result = session.compact(focus)
        if result.reason == "summary_unavailable":
            raise click.ClickException(
                f"compaction of {session_id!r} failed: the summariser returned no summary "
                "(the previous checkpoint stays active)"
            )
        if not result.compacted:
            click.echo(f"nothing to compact in {session_id!r}: {result.reason}")
            return
        checkpoint = session.checkpoints()[-1]
    click.echo(
        f"compacted {session_id!r}: checkpoint {checkpoint.id} summarises through "
        f"#{checkpoint.covers_through_seq} ({result.messages_compacted} messages newly covered), "
        f"view {human_tokens(checkpoint.tokens_before)} → "
        f"{human_tokens(checkpoint.tokens_after)} tokens"
    )


@click.command()
@click.argument("session_id", metavar="SESSION")
@db_option
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    required=True,
    help="The transcript file (*.jsonl.zst: zstd-compressed JSONL), or an existing folder "
    "to write it in.",
)
@click.option(
    "--keep",
    type=click.IntRange(min=1),
    default=DEFAULT_KEEP,
    show_default=True,
    help="Keep only the newest N transcripts (*.jsonl.zst) in the output folder.",
)
def export(session_id: str, db: LogTarget, output: Path, keep: int) -> None:
    """Export a session as a zstd-compressed JSONL transcript and record the export."""
    if not output.is_dir() and not output.name.endswith(TRANSCRIPT_SUFFIX):
        raise click.UsageError(
            f"export writes a zstd-compressed JSONL transcript: name the file "
            f"*{TRANSCRIPT_SUFFIX}, not '{output.name}' (zstd -d FILE{TRANSCRIPT_SUFFIX} "
            "gives the plain JSONL)"
        )
    with open_log(db, write=True) as log:
        require_session(log, session_id, db)
        if not output.is_dir() and not output.parent.is_dir():
            raise click.ClickException(
                f"cannot write '{output}': folder '{output.parent}' does not exist"
            )
        label = f"export {session_id}"
        with reading_progress(log, label, log.last_seq(session_id)) as counted:
            result = export_transcript(counted, session_id, output, keep=keep)
    click.echo(
        f"exported {session_id!r}: {result.messages:,} messages, {result.checkpoints} checkpoints "
        f"→ {result.path} ({human_bytes(result.size)}, sha256 {result.sha256[:16]}…)"
    )
    if result.removed:
        click.echo(f"rotation: removed {len(result.removed)} older transcript(s), kept {keep}")


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@db_option
@click.option(
    "--session", "session_id", help="The new session's id (default: <exported id>-imported)."
)
def import_(file: Path, db: LogTarget, session_id: str | None) -> None:
    """Import a transcript into a NEW session with the identical history."""
    transcript = read_transcript(file)  # check the file before the log is created
    with open_target(db) as log:
        new_id = import_transcript(log, transcript, session_id)
    click.echo(
        f"imported {file} into session {new_id!r}: {len(transcript.messages):,} messages, "
        f"{len(transcript.checkpoints)} checkpoints"
    )
