"""Crash recovery with real processes: SIGKILL a host mid-run and compare served views.

Kills come in three kinds, in turn: at a random moment of a free-running child, and at two
points the child is held at (after a step's messages are durable and before its view is served;
just after a view is served), so both recovery paths are checked on every run, whatever the
machine's speed. Only complete lines of the child's output count: a SIGKILL can tear the last.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import pytest

from ctxledger import Host
from ctxledger.domain import build_view
from ctxledger.events import MessageAppended, ViewServed
from ctxledger.replay.loading import fold_session
from ctxledger.testing.processes import child_process, complete_lines, kill

CHILD = Path(__file__).with_name("host_crash_child.py")
KILLS = 12
MODES = ("random", "step", "view")


def run_child_and_kill(
    db: Path, seed: int, mode: str, rng: random.Random
) -> tuple[list[tuple[str, int, str]], str | None]:
    """Start the child, let it serve views, SIGKILL it; return the views it printed and, for a
    held child, the session it was held in."""
    pause = [] if mode == "random" else [f"{mode}:{rng.randint(1, 12)}"]
    with child_process([sys.executable, CHILD, db, str(seed), *pause]) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()  # wait until it is really working
        if not first.endswith("\n"):
            kill(proc)
            raise AssertionError(f"child died before serving a view: {proc.stderr.read()}")
        held: str | None = None
        head = [first]
        if mode == "random":
            time.sleep(rng.uniform(0.05, 0.6))  # where the kill lands; nothing depends on it
        else:
            while not head[-1].startswith("paused"):
                line = proc.stdout.readline()
                if not line.endswith("\n"):
                    kill(proc)
                    raise AssertionError(f"child died before pausing: {proc.stderr.read()}")
                head.append(line)
            held = head.pop().split()[1]
        kill(proc)  # SIGKILL; what it wrote before is still in the pipe
        rest = proc.stdout.read()
    printed = []
    for line in [*head, *complete_lines(rest)]:
        fields = line.split()
        if fields and fields[0] != "paused":
            session, through_seq, view_hash = fields
            printed.append((session, int(through_seq), view_hash))
    return printed, held


@pytest.mark.slow
def test_served_views_survive_sigkill(tmp_path: Path) -> None:
    """After each SIGKILL every printed view is in the log and the recovered view matches it."""
    db = tmp_path / "db"
    rng = random.Random(7)
    last_printed: dict[str, str] = {}
    branches: list[bool] = []
    for number in range(KILLS):
        mode = MODES[number % len(MODES)]
        printed, held = run_child_and_kill(db, seed=number, mode=mode, rng=rng)
        for session, _, view_hash in printed:
            last_printed[session] = view_hash
        with Host.open(db) as host:
            for session_id, printed_hash in last_printed.items():
                records = host.log.read(session_id)
                served = [r for r in records if isinstance(r.event, ViewServed)]
                hashes = [r.event.view_hash for r in served]
                # Every acknowledged (printed) view is durable; views recorded after it may exist.
                assert printed_hash in hashes, f"{session_id}: printed view not durable"
                last = served[-1]
                appended_after = any(
                    isinstance(r.event, MessageAppended) and r.seq > last.seq for r in records
                )
                branches.append(appended_after)
                if session_id == held:
                    # Held after its appends (step) or right after its view (view).
                    assert appended_after == (mode == "step"), (mode, session_id)
                if appended_after:
                    # Killed between an append and its view: rebuild the last served view.
                    state, _ = fold_session(host.log, session_id, through_event_seq=last.seq)
                    rebuilt = build_view(state, tokenizer=host.tokenizer).view_hash
                else:
                    rebuilt = host.session(session_id).build_model_view().view_hash
                assert rebuilt == last.event.view_hash, f"{session_id}: recovered view differs"
    # Both recovery paths were exercised: killed after a served view, and mid-step.
    assert any(branches) and not all(branches)
