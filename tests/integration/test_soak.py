"""The soak of bench/soak.py, 20 kills: a host SIGKILLed at random moments and during held
foreground and background summaries loses nothing it acknowledged.

``make soak`` runs the same core with 100+ kills, and against PostgreSQL with the server killed
too; the figures are in bench/README.md.
"""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path
from types import ModuleType

import pytest

SOAK = Path(__file__).resolve().parents[2] / "bench" / "soak.py"
KILLS = 20
HELD_EVERY = 5  # two of every five kills hold a summary: one foreground, one background


def load_soak() -> ModuleType:
    """bench/soak.py as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("soak", SOAK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["soak"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_twenty_kills_lose_no_acknowledged_append(tmp_path: Path) -> None:
    """After each kill: every acknowledged append and view is in the log, seqs are dense,
    open tool calls are answered, the recovered view is the last served, verify passes."""
    soak = load_soak()
    report = soak.run_soak(tmp_path / "db", tmp_path, kills=KILLS, seed=25, held_every=HELD_EVERY)
    assert report.failures == []
    assert (report.kills, report.lost, report.verify_passed) == (KILLS, 0, KILLS)
    held = 2 * (KILLS // HELD_EVERY)
    assert (report.held_kills, report.random_kills) == (held, KILLS - held)
    # A held summary never ends: its CompactionStarted is open in the log when the host dies.
    assert report.foreground_summary_kills >= held // 2
    assert report.background_summary_kills >= held // 2
    assert report.acknowledged_appends > KILLS and report.views_checked > 0


def test_a_held_line_printed_before_ready_is_not_lost() -> None:
    """The child's agents start before its main thread prints ``ready``, so a summary can be
    held, and ``held`` printed, first: waiting for ``ready`` must keep that line for the wait
    for ``held`` (it was dropped, and the soak then waited 180 s for a line already read)."""
    soak = load_soak()
    lines = soak._Lines(io.StringIO("held agent-3\nerror StorageError\nready\n"))
    lines.thread.join(timeout=30)
    assert lines.wait_for("ready", 1.0) == "ready"
    assert lines.wait_for("held", 1.0) == "held agent-3"
    with pytest.raises(AssertionError, match="the child ended before 'held'"):
        lines.wait_for("held", 1.0)
