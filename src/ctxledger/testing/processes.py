"""Child processes in crash tests: always reaped, pipes always closed, torn output ignored.

A crash test starts a real process and kills it with SIGKILL. Two things then go wrong easily:
the child's last line of output can be torn (the kill lands in the middle of a ``write``), and a
test that fails before it reaps its child leaks the child and its pipes (whose
``ResourceWarning`` fails a later test under ``filterwarnings = error``). :func:`child_process`
owns the process for the length of a ``with`` block; :func:`complete_lines` keeps only the lines
the child finished writing.

``import ctxledger.testing`` never imports this module; import it by name.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from os import PathLike
from typing import IO, Any

__all__ = ["child_process", "complete_lines", "kill", "reap"]

#: Seconds to wait for a child to be reaped after SIGKILL (the kernel frees it at once; the wait
#: only bounds a child stuck in uninterruptible I/O).
REAP_TIMEOUT = 60.0


@contextlib.contextmanager
def child_process(
    args: Sequence[str | PathLike[str]],
    *,
    stdin: int | IO[Any] | None = None,
    stdout: int | IO[Any] | None = subprocess.PIPE,
    stderr: int | IO[Any] | None = subprocess.PIPE,
    env: Mapping[str, str] | None = None,
    cwd: str | PathLike[str] | None = None,
) -> Iterator[subprocess.Popen[str]]:
    """Start ``args`` as a child process (text pipes) and own it until the block ends.

    On leaving the block, however it is left, a child still running is killed with SIGKILL, the
    child is reaped and every pipe to it is closed. A test that wants a clean exit waits for the
    child inside the block.

    Args:
        args: The program and its arguments.
        stdin: As for :class:`subprocess.Popen` (``subprocess.PIPE`` to write to the child).
        stdout: As for :class:`subprocess.Popen`; a pipe by default.
        stderr: As for :class:`subprocess.Popen`; a pipe by default.
        env: The child's environment (the parent's when None).
        cwd: The child's working folder.

    Yields:
        The running process.
    """
    process = subprocess.Popen(
        [str(arg) for arg in args],
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        env=None if env is None else dict(env),
        cwd=cwd,
        text=True,
    )
    try:
        yield process
    finally:
        reap(process)


def kill(process: subprocess.Popen[Any], timeout: float = REAP_TIMEOUT) -> int | None:
    """SIGKILL ``process`` if it still runs and wait for it; its pipes stay open to be read.

    Returns its exit status, or None if it could not be reaped within ``timeout`` seconds.
    """
    if process.poll() is None:
        process.kill()
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def reap(process: subprocess.Popen[Any], timeout: float = REAP_TIMEOUT) -> int | None:
    """:func:`kill` ``process`` if it still runs, then close its pipes; return its status.

    Safe to call more than once. Returns None only if the child could not be reaped within
    ``timeout`` seconds after SIGKILL (its pipes are closed all the same).
    """
    try:
        return kill(process, timeout)
    finally:
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):  # a broken pipe to a killed child
                    stream.close()


def complete_lines(output: str) -> list[str]:
    """The lines of ``output`` that end with a newline; a torn last line is dropped.

    A child killed while writing may leave half a line: only what it finished writing counts.
    """
    lines = output.split("\n")
    return lines[:-1]  # the piece after the last newline is empty or torn
