"""ctxledger.testing.processes: children of crash tests are reaped and their pipes closed."""

from __future__ import annotations

import signal
import sys

import pytest

from ctxledger.testing.processes import child_process, complete_lines, kill, reap

SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"]


def test_a_block_that_raises_still_kills_reaps_and_closes() -> None:
    """The child is killed with SIGKILL, reaped, and every pipe is closed."""
    with pytest.raises(RuntimeError, match="the test failed"), child_process(SLEEPER) as proc:
        assert proc.stdout is not None and proc.stdout.readline() == "up\n"
        raise RuntimeError("the test failed")
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout is not None and proc.stdout.closed
    assert proc.stderr is not None and proc.stderr.closed


def test_kill_leaves_the_output_to_read_and_reap_is_idempotent() -> None:
    """What the child wrote before SIGKILL is still in the pipe; reaping twice is harmless."""
    with child_process(SLEEPER) as proc:
        assert proc.stdout is not None and proc.stdout.readline() == "up\n"
        assert kill(proc) == -signal.SIGKILL
        assert proc.stdout.read() == ""
    assert reap(proc) == -signal.SIGKILL


def test_a_child_that_ended_is_left_as_it_ended() -> None:
    """An exit status of the child's own is kept, not replaced by a kill."""
    with child_process([sys.executable, "-c", "raise SystemExit(3)"]) as proc:
        assert proc.wait(timeout=60) == 3
    assert proc.returncode == 3


@pytest.mark.parametrize(
    ("output", "lines"),
    [
        ("a 1 x\nb 2 y\nc 3", ["a 1 x", "b 2 y"]),  # torn by SIGKILL mid-write
        ("a 1 x\nb 2 y\n", ["a 1 x", "b 2 y"]),
        ("", []),
        ("torn", []),
    ],
)
def test_complete_lines_drop_a_torn_last_line(output: str, lines: list[str]) -> None:
    """Only the lines the child finished writing count."""
    assert complete_lines(output) == lines
