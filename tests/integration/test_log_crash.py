"""Crash test: SIGKILL a process that is appending, many times; nothing acknowledged is lost."""

from __future__ import annotations

import os
import random
import signal
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from ctxledger.events.types import MessageAppended
from ctxledger.storage import LmdbEventLog
from ctxledger.testing.processes import child_process, complete_lines, kill

CHILD = Path(__file__).with_name("log_crash_child.py")
ROUNDS = 22

Ack = tuple[str, int, int, int]  # session, first seq, last seq, batch uid


def run_until_killed(path: Path, seed: int, rng: random.Random) -> list[Ack]:
    """Start a child, let it acknowledge a random number of batches, SIGKILL it mid-flight."""
    acks: list[Ack] = []
    with child_process([sys.executable, CHILD, path, str(seed)], stderr=None) as child:
        assert child.stdout is not None
        target = rng.randint(1, 60)
        for line in child.stdout:
            if not line.endswith("\n"):
                break  # the child died mid-line: a torn line acknowledges nothing
            acks.append(parse(line))
            if len(acks) >= target:
                break
        kill(child)
        # Lines the child finished writing before it died are acknowledgements too.
        acks.extend(parse(line) for line in complete_lines(child.stdout.read()))
    assert child.returncode == -signal.SIGKILL, "the child died before it was killed"
    return acks


def parse(line: str) -> Ack:
    """Parse one acknowledgement line."""
    session_id, first, last, uid = line.split()
    return session_id, int(first), int(last), int(uid)


def check_log(path: Path, acks: list[Ack]) -> None:
    """Every acknowledged batch is whole and in place; seqs and positions have no gaps."""
    with LmdbEventLog.open(path) as log:
        batches: dict[int, list[tuple[str, int, dict[str, int]]]] = defaultdict(list)
        total = 0
        for session_id in log.sessions():
            recorded = log.read(session_id)
            assert [r.seq for r in recorded] == list(range(1, len(recorded) + 1)), session_id
            total += len(recorded)
            for r in recorded:
                assert isinstance(r.event, MessageAppended)
                batches[r.event.message.metadata["batch"]].append(
                    (session_id, r.seq, r.event.message.metadata)
                )
        for uid, members in batches.items():
            size = members[0][2]["size"]
            assert [m[2]["index"] for m in members] == list(range(size)), f"partial batch {uid}"
            assert [m[1] for m in members] == list(range(members[0][1], members[0][1] + size))
        for session_id, first, last, uid in acks:
            members = batches.get(uid)
            assert members is not None, f"acknowledged batch {uid} of {session_id} is lost"
            assert (members[0][0], members[0][1], members[-1][1]) == (session_id, first, last)
        positions = [r.position for r in log.read_all()]
        assert positions == list(range(1, total + 1))


@pytest.mark.slow
def test_acknowledged_batches_survive_repeated_sigkill(tmp_path: Path) -> None:
    """Over 20+ kills and reopenings, every acknowledged batch is present and whole."""
    rng = random.Random(int(os.environ.get("CTXLEDGER_CRASH_SEED", "20261130")))
    path = tmp_path / "log"
    acks: list[Ack] = []
    for seed in range(ROUNDS):
        acks.extend(run_until_killed(path, seed, rng))
        check_log(path, acks)
    assert len(acks) >= ROUNDS
