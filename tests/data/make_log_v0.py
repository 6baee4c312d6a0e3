"""Write ``log_v0/``: a small LMDB log made by ctxledger 0.1.0 as of 2026-12-01 (before runtime v2).

Run ONCE, never again: the point of the folder is that a log written by an old ctxledger keeps
opening, verifying and rebuilding the same views forever (``tests/integration/test_old_logs.py``).
A later format gets its own ``make_log_vN.py`` and folder next to this one.

    .venv/bin/python tests/data/make_log_v0.py   # refuses to overwrite

Files:
    log_v0/data.mdb       the LMDB environment (``lock.mdb`` is not kept)
    log_v0.json           per session: every served view (through seq, view hash), the ids of
                          the checkpoints it recorded and of those its rebuilt state holds (a
                          fork's include its parent's), and its message count
"""

from __future__ import annotations

import itertools
import json
import shutil
import sys
from pathlib import Path

from ctxledger import Config, Host, Message, ToolCall
from ctxledger.events import ViewServed
from ctxledger.replay import rebuild
from ctxledger.storage import LmdbEventLog

HERE = Path(__file__).resolve().parent
TARGET = HERE / "log_v0"


def _drive(host: Host) -> None:
    config = Config(context_window=700, min_retain_rounds=2, snapshot_interval=25)
    main = host.session("main", config=config)
    main.append(Message.system("You are a careful coding agent."))
    for turn in range(6):
        main.append(Message.user(f"Task {turn}: fix the failing test in tests/test_{turn}.py"))
        for step in range(3):
            command = json.dumps({"cmd": f"pytest -k t{step}"})
            call = ToolCall(f"call-{turn}-{step}", "shell", command)
            main.append_many(
                [
                    Message.assistant(f"Running step {step} of task {turn}.", [call]),
                    Message.tool(
                        f"FAILED tests/test_{turn}.py::test_{step} - AssertionError\n" + "x" * 180,
                        call.id,
                        "shell",
                    ),
                ]
            )
            main.prepare_step()
            main.record_usage(200 + 40 * step + 30 * turn, 20)
        main.append(Message.assistant(f"Task {turn} done."))
        main.prepare_step()
        if turn == 1:
            main.pin(3)
        if turn == 2:
            main.compact("keep the test names")
        if turn == 3:
            main.reactive_compact("prompt is too long: 9000 tokens > 8192 maximum")
            main.prepare_step()
        if turn == 4:
            host.session("main", config=config.replace(micro_batch=1, context_window=1_000))
    fork = main.fork("main-fork", at_seq=20)
    fork.append(Message.user("In the fork: try another approach."))
    fork.prepare_step()
    other = host.session("other", config=Config(context_window=900, min_retain_rounds=1))
    other.append(Message.user("A short session."))
    other.append(Message.assistant("", [ToolCall("open-call", "read_file", '{"path": "a.py"}')]))
    # "open-call" stays unanswered: re-opening answers it as interrupted (recovery).


def main() -> None:
    if TARGET.exists():
        sys.exit(f"{TARGET} exists: this corpus is written once and never again")
    ticks = itertools.count(1)
    ids = itertools.count(1)
    with Host.open(
        TARGET, clock=lambda: 1_764_547_200.0 + next(ticks), id_factory=lambda: f"id-{next(ids)}"
    ) as host:
        _drive(host)
    with Host.open(
        TARGET, clock=lambda: 1_764_548_000.0 + next(ticks), id_factory=lambda: f"id-{next(ids)}"
    ) as host:
        other = host.session("other")  # recovery synthesises the interrupted result
        other.prepare_step()
    listing = {}
    with LmdbEventLog.open(TARGET, readonly=True) as log:
        for sid in log.sessions():
            events = [record.event for record in log.read(sid)]
            listing[sid] = {
                "events": len(events),
                "views": [
                    [e.through_seq, e.view_hash] for e in events if isinstance(e, ViewServed)
                ],
                "checkpoints": [
                    e.checkpoint.id for e in events if type(e).__name__ == "CheckpointCreated"
                ],
                "rebuilt_checkpoints": [c.id for c in rebuild(log, sid).checkpoints],
                "messages": len(rebuild(log, sid).history),
            }
    (TARGET / "lock.mdb").unlink(missing_ok=True)
    (HERE / "log_v0.json").write_text(json.dumps(listing, indent=1) + "\n", encoding="utf-8")
    shutil.rmtree(TARGET / "__pycache__", ignore_errors=True)


if __name__ == "__main__":
    main()
