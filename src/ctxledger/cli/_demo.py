"""The ``demo`` verb (the run itself is :mod:`ctxledger.tooling.demo`)."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["demo"]


@click.command()
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("ctxledger-demo"),
    show_default=True,
    help="The demo's folder; its log/ is replaced on every run.",
)
@click.option(
    "--sessions",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    help="Synthetic agents driven concurrently.",
)
@click.option(
    "--steps",
    type=click.IntRange(min=4),
    help="Model calls per synthetic agent  [default: 160, 24 with --fast]",
)
@click.option(
    "--traces",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Also replay every *.jsonl trace in this folder as one more agent.",
)
@click.option("--fast", is_flag=True, help="A short run (a few seconds) with a 12k window.")
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seeds the synthetic workload."
)
def demo(
    directory: Path, sessions: int, steps: int | None, traces: Path | None, fast: bool, seed: int
) -> None:
    """Run many agents, SIGKILL the host midway, recover, verify, and plot the token budget.

    The host runs in a child process driving the agents from threads with a small window, so
    every compaction layer shows; the parent kills it halfway, re-opens the folder, checks that
    no acknowledged message was lost, verifies every served view by replay, finishes the run
    in a fresh child and prints a summary table and the path of a PNG token plot.
    """
    from ctxledger.tooling.demo import DemoFailed, DemoOptions, run_demo

    options = DemoOptions(
        directory=directory, sessions=sessions, steps=steps, traces=traces, fast=fast, seed=seed
    )
    try:
        result = run_demo(options)
    except DemoFailed as exc:
        raise click.ClickException(str(exc)) from exc
    if not result.ok:
        raise click.ClickException("the demo found a problem: see the summary above")
