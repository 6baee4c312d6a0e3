"""The ``ctxledger`` command: one command, one verb per operator task.

Run ``ctxledger --help`` for the verbs and ``ctxledger VERB --help`` for each verb's options.
"""

from __future__ import annotations

import click

import ctxledger
from ctxledger.cli._app import CtxLedgerGroup, configure_logging
from ctxledger.cli._compactions import audit, explain_, recall_, revert
from ctxledger.cli._copy import copy
from ctxledger.cli._demo import demo
from ctxledger.cli._inspect import plot, sessions, show, stats, view
from ctxledger.cli._observe import report, ui
from ctxledger.cli._policy import policy
from ctxledger.cli._replay import salvage, verify, whatif
from ctxledger.cli._write import compact, export, import_, ingest

__all__ = ["main"]


@click.group(cls=CtxLedgerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(ctxledger.__version__, prog_name="ctxledger")
@click.option(
    "--debug",
    is_flag=True,
    envvar="CTXLEDGER_DEBUG",
    help="Show tracebacks and debug logs (or set CTXLEDGER_DEBUG=1).",
)
def main(debug: bool) -> None:
    """ctxledger: the context layer of long-running LLM agents.

    A durable, replayable history and a bounded model view per agent session. Every verb takes
    --db DIR|URI (or CTXLEDGER_DB): an LMDB folder, or a postgresql:// URI; verbs that read
    never create it.
    """
    configure_logging(debug)


for _verb in (
    demo,
    ingest,
    sessions,
    show,
    view,
    compact,
    audit,
    explain_,
    recall_,
    revert,
    verify,
    whatif,
    salvage,
    export,
    import_,
    copy,
    plot,
    stats,
    policy,
    report,
    ui,
):
    main.add_command(_verb)
