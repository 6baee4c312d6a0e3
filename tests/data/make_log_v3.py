"""Write ``log_v3/``: a small LMDB log made by ctxledger as of 2026-12-03 (main 2cca20a).

Run ONCE, never again: a log written by this version must keep opening, verifying and rebuilding
the same views forever (``tests/integration/test_old_logs.py``). It is the last log written
before the two-mark policy (issue 26) and the v3 actors (issue 28), under the Config defaults of
that day (the gain rule at 2,560 tokens, the floor guard, background compaction, fact blocks,
digested summariser input, calibration) as a Config built with only a few fields set records
them. It adds what ``log_v2`` could not hold: recorded re-masks (``ViewServed.remask``), a
retraction under the gain rule (``MessageRetracted.mask_count``), reactive compactions, a
revert, a clear, a pin, a fork, the dynamic threshold and a tool call answered by recovery.

    .venv/bin/python tests/data/make_log_v3.py   # refuses to overwrite

Files:
    log_v3/data.mdb       the LMDB environment (``lock.mdb`` is not kept)
    log_v3.json           per session, as in ``log_v2.json``
"""

from __future__ import annotations

import itertools
import json
import shutil
import sys
from pathlib import Path

from ctxledger import Config, Host, Message, Session, ToolCall
from ctxledger.events import ViewServed
from ctxledger.replay import rebuild
from ctxledger.storage import LmdbEventLog

HERE = Path(__file__).resolve().parent
TARGET = HERE / "log_v3"


def _step(session: Session, turn: int, step: int, *, size: int = 30) -> None:
    command = json.dumps({"cmd": f"python -m pytest tests/test_{turn}.py -k t{step}"})
    call = ToolCall(f"call-{turn}-{step}", "shell", command)
    body = "".join(
        f"tests/test_{turn}.py::test_{step}_{n} PASSED ({n * 7 % 13} ms)\n" for n in range(size)
    )
    session.append_many(
        [
            Message.assistant(f"Running step {step} of task {turn}.", [call]),
            Message.tool(
                f"FAILED tests/test_{turn}.py::test_{step} - AssertionError\n"
                f"E   assert parse_{turn}_{step}('x') == {step}\n" + body,
                call.id,
                "shell",
            ),
        ]
    )


def _turns(session: Session, turns: range, *, steps: int = 3, size: int = 30) -> None:
    for turn in turns:
        session.append(
            Message.user(f"Task {turn}: fix src/pkg/mod_{turn}.py so tests/test_{turn}.py passes")
        )
        for step in range(steps):
            _step(session, turn, step, size=size)
            session.prepare_step()
            session.wait_background()
            prompt = 600 + 80 * step + 50 * turn
            usage = {"prompt_tokens": prompt, "completion_tokens": 25 + step}
            session.record_usage({**usage, "prompt_tokens_details": {"cached_tokens": prompt // 2}})
        session.append(Message.assistant(f"Task {turn} done: src/pkg/mod_{turn}.py fixed."))
        session.prepare_step()
        session.wait_background()


def _drive(host: Host) -> None:
    # The defaults of the day, at a small window: only what a user would set is set.
    config = Config(context_window=6_000, min_retain_rounds=2, snapshot_interval=50)
    main = host.session("main", config=config)
    main.append(Message.system("You are a careful coding agent. Keep answers short."))
    _turns(main, range(5), steps=4, size=40)
    main.pin(2)
    # A tool result retracted at once under the gain rule (mask_count), then put back changed.
    for turn in range(90, 93):
        _step(main, turn, 0, size=60)
    main.retract_last()
    main.retract_last()
    _step(main, 99, 0)
    main.prepare_step()
    main.compact("keep the failing tests")
    main.prepare_step()
    _turns(main, range(5, 7), steps=3)
    # A fork of the main session, then the main session goes on alone.
    fork = main.fork("main-fork")
    _turns(fork, range(20, 21), steps=2)
    # Reactive compactions, then a revert of the newest checkpoint.
    main.append(Message.user("Task 7: the provider says the prompt is too long."))
    main.reactive_compact("prompt is too long: 7000 tokens > 6000 maximum")
    main.prepare_step()
    main.revert_compaction(reason="the summary dropped the API signatures")
    main.prepare_step()
    _turns(main, range(8, 9), steps=2)

    # A Config change mid-session, the dynamic threshold, then a clear.
    dyn = host.session(
        "dynamic", config=Config(context_window=4_000, min_retain_rounds=1, micro_batch=2)
    )
    dyn.append(Message.system("You are terse."))
    _turns(dyn, range(2), steps=3)
    host.session("dynamic", config=dyn.config.replace(threshold_policy="dynamic"))
    _turns(dyn, range(2, 4), steps=3)
    dyn.clear()
    dyn.append(Message.system("Start over: you are a reviewer now."))
    _turns(dyn, range(4, 5), steps=2)

    # A tool call left open when the host closes: the next host answers it (recovery).
    open_call = host.session("interrupted", config=Config(context_window=3_000))
    open_call.append(Message.user("List the files."))
    call = ToolCall("call-ls", "shell", json.dumps({"cmd": "ls"}))
    open_call.append(Message.assistant("Listing.", [call]))
    open_call.prepare_step()


def _recover(host: Host) -> None:
    session = host.session("interrupted")
    session.append(Message.user("Go on."))
    session.prepare_step()


def main() -> None:
    if TARGET.exists():
        sys.exit(f"{TARGET} exists: this corpus is written once and never again")
    ticks = itertools.count(1)
    ids = itertools.count(1)
    options = {
        "clock": lambda: 1_764_740_000.0 + next(ticks),
        "id_factory": lambda: f"id-{next(ids)}",
        "compaction_workers": 1,
        "background_compactions": 1,
    }
    with Host.open(TARGET, **options) as host:
        _drive(host)
    with Host.open(TARGET, **options) as host:
        _recover(host)
    listing = {}
    with LmdbEventLog.open(TARGET, readonly=True) as log:
        for sid in log.sessions():
            events = [record.event for record in log.read(sid)]
            listing[sid] = {
                "events": len(events),
                "types": sorted({type(e).__name__ for e in events}),
                "views": [
                    [e.through_seq, e.view_hash] for e in events if isinstance(e, ViewServed)
                ],
                "remasks": sum(
                    1 for e in events if isinstance(e, ViewServed) and e.remask is not None
                ),
                "checkpoints": [
                    e.checkpoint.id for e in events if type(e).__name__ == "CheckpointCreated"
                ],
                "rebuilt_checkpoints": [c.id for c in rebuild(log, sid).checkpoints],
                "messages": len(rebuild(log, sid).history),
            }
    (TARGET / "lock.mdb").unlink(missing_ok=True)
    (HERE / "log_v3.json").write_text(json.dumps(listing, indent=1) + "\n", encoding="utf-8")
    shutil.rmtree(TARGET / "__pycache__", ignore_errors=True)


if __name__ == "__main__":
    main()
