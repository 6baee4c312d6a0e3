"""Shared by the CLI tests: a small log with compactions, and how to run and judge a verb."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import lmdb
import msgspec
from click.testing import CliRunner, Result

from ctxledger import Config, Host
from ctxledger.cli import main
from ctxledger.config import upcast_config
from ctxledger.tooling.workload import iter_agent_steps

# The workload's newest step (parallel reads of long files) alone can exceed this small window:
# a Config of the one-mark releases without the floor guard (schema 3, as such a Config was
# recorded) serves that view anyway, which these logs, made to exercise the command, keep
# doing; a Config built now refuses it (ContextOverflowError, tested in test_compaction_storms).
SMALL: Config = msgspec.convert(
    upcast_config({"context_window": 4000, "compression_threshold": 0.8, "min_retain_rounds": 1}),
    Config,
)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def build_log(path: Path, sessions: tuple[str, ...] = ("a", "b"), steps: int = 30) -> Path:
    """A log whose sessions ran ``steps`` agent steps of the workload, with compactions."""
    with Host.open(path, config=SMALL) as host:
        for index, session_id in enumerate(sessions):
            session = host.session(session_id)
            for step in iter_agent_steps(index, steps=steps):
                session.append_many(step)
                session.prepare_step()
    return path


def run(*args: str | os.PathLike[str], env: dict[str, str] | None = None) -> Result:
    """Invoke the command in-process, then undo the logging set-up it does as the application."""
    logger = logging.getLogger("ctxledger")
    saved = (list(logger.handlers), logger.level)
    try:
        return CliRunner().invoke(main, [str(arg) for arg in args], env=env)
    finally:
        logger.handlers[:], logger.level = saved[0], saved[1]


def assert_one_line_error(result: Result, *fragments: str) -> None:
    """A failure: non-zero status, nothing but one ``error:`` line on stderr."""
    assert result.exit_code != 0
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    # stdout may show stored text that quotes a traceback (a tool's output); errors go to stderr
    assert "Traceback" not in result.stderr


def corrupt_first_event(db: Path, session_number: int = 1) -> None:
    """Flip a byte in the middle of a session's second stored event."""
    env = lmdb.open(str(db), max_dbs=16)
    events = env.open_db(b"events")
    with env.begin(write=True) as txn:
        cursor = txn.cursor(db=events)
        cursor.first()
        for _ in range(session_number):
            cursor.next()
        key, value = cursor.item()
        damaged = bytearray(value)
        damaged[len(damaged) // 2] ^= 0xFF
        txn.put(key, bytes(damaged), db=events)
    env.close()
