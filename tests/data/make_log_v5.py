"""Write ``log_v5/``: a small LMDB log made by ctxledger as of 2026-12-06 (main 4bb9afc).

Run ONCE, never again: a log written by this version must keep opening, verifying and rebuilding
the same views forever (``tests/integration/test_old_logs.py``). It is the last log of Config
schema 5 (the two marks' shares as chosen by issue 26's benches), written before the view hash's
second version (schema 6): every view it records is hashed as version 1 hashed it (the msgpack of
mode, checkpoint id and messages, whose count comes first), long views included (``long``: a
conversation of 300+ messages never compacted, whose views the host hashed with the encodings
kept from the last view). Besides, as ``log_v4``: a long first request kept truncated in the
pinned slot, fact blocks, summaries prepared in the background and activated, a manual
compaction with a focus, a reactive one, a revert, a pin, a retraction, a fork, a Config change,
the dynamic threshold and a clear.

    .venv/bin/python tests/data/make_log_v5.py   # refuses to overwrite

Files:
    log_v5/data.mdb       the LMDB environment (``lock.mdb`` and ``writer.lock`` are not kept)
    log_v5.json           per session, as in ``log_v4.json``
"""

from __future__ import annotations

import itertools
import json
import shutil
import sys
from pathlib import Path

from ctxledger import Config, Host, HostOptions, Message, Session, ToolCall
from ctxledger.events import ViewServed
from ctxledger.replay import rebuild
from ctxledger.storage import LmdbEventLog

HERE = Path(__file__).resolve().parent
TARGET = HERE / "log_v5"

#: A task statement longer than the kept request's room at these windows, with paths, commands
#: and lines the fact block lists once the view shows only its head and tail.
TASK = "\n".join(
    [
        "Task: the duration parser in src/pkg/durations.py drops the sign of negative ISO 8601",
        "durations, so parse_duration('-P3D') returns 3 days instead of -3 days.",
        "",
        *(
            f"Step {n}: check src/pkg/module_{n}.py and tests/test_module_{n}.py; the helper "
            f"normalise_{n}() must keep the sign when it splits the value (case {n} of 40)."
            for n in range(40)
        ),
        "",
        "Run `python -m pytest tests/test_durations.py -x` before and after the fix.",
        "Do not change the public API of parse_duration().",
    ]
)


_CALLS = itertools.count(1)


def _step(session: Session, turn: int, step: int, *, size: int = 30) -> None:
    command = json.dumps({"cmd": f"python -m pytest tests/test_{turn}.py -k t{step}"})
    call = ToolCall(f"call-{next(_CALLS)}", "shell", command)
    body = "".join(
        f"tests/test_{turn}.py::test_{step}_{n} PASSED ({n * 7 % 13} ms)\n" for n in range(size)
    )
    session.append_many(
        [
            Message.assistant(
                f"Running step {step} of task {turn}; src/pkg/mod_{turn}_{step}.py is next.",
                [call],
            ),
            Message.tool(
                f"FAILED tests/test_{turn}.py::test_{step} - AssertionError\n"
                f"E   assert parse_{turn}_{step}('x') == {step}\n" + body,
                call.id,
                "shell",
            ),
        ]
    )


def _steps(session: Session, turn: int, steps: int, *, size: int = 30) -> None:
    for step in range(steps):
        _step(session, turn, step, size=size)
        session.prepare_step()
        session.wait_background()
        prompt = 900 + 70 * step
        usage = {"prompt_tokens": prompt, "completion_tokens": 20 + step}
        session.record_usage({**usage, "prompt_tokens_details": {"cached_tokens": prompt // 2}})


def _drive(host: Host) -> None:
    # One long round, as agents run: the task first, then many steps (step-level cuts).
    main = host.session("main", config=Config(context_window=6_000, snapshot_interval=40))
    main.append(Message.system("You are a careful coding agent. Keep answers short."))
    main.append(Message.user(TASK))
    _steps(main, 1, 14, size=30)
    main.pin(3)
    _steps(main, 1, 6, size=45)
    # A tool result retracted and put back changed; a manual compaction with a focus.
    _step(main, 2, 0, size=60)
    main.retract_last()
    main.retract_last()
    _step(main, 2, 1, size=10)
    main.prepare_step()
    main.compact("keep the failing test names")
    main.prepare_step()
    # A fork, then the main session goes on alone under a changed Config (a target set).
    fork = main.fork("main-fork")
    _steps(fork, 20, 3)
    host.session("main", config=main.config.replace(compaction_target=0.35))
    _steps(main, 3, 8, size=35)
    # A reactive compaction, then a revert of the newest checkpoint.
    main.append(Message.user("The provider says the prompt is too long; go on."))
    main.reactive_compact("prompt is too long: 7000 tokens > 6000 maximum")
    main.prepare_step()
    main.revert_compaction(reason="the summary dropped the API signatures")
    main.prepare_step()
    _steps(main, 4, 4)

    # The revert of the only checkpoint (the view returns to the one before it).
    once = host.session("once", config=Config(context_window=4_000, min_retain_rounds=1))
    once.append(Message.user(TASK[:2_500]))
    _steps(once, 5, 6, size=25)
    if once.checkpoints():
        once.revert_compaction(reason="undo the only compaction")
        once.prepare_step()

    # The dynamic threshold with an explicit target, background off, then a clear.
    dyn = host.session(
        "dynamic",
        config=Config(
            context_window=5_000,
            threshold_policy="dynamic",
            compaction_target=0.3,
            prepare_threshold=0.0,
            micro_batch=2,
            min_retain_rounds=1,
        ),
    )
    dyn.append(Message.system("You are terse."))
    for turn in range(6, 9):
        dyn.append(Message.user(f"Task {turn}: fix src/pkg/mod_{turn}.py"))
        _steps(dyn, turn, 4, size=25)
    dyn.clear()
    dyn.append(Message.user("Start over: review src/pkg/durations.py."))
    _steps(dyn, 9, 3)

    # A long conversation never compacted: its views pass KEEP_ENCODINGS_FROM (256 messages),
    # so the host hashed them with the encodings kept from the last view.
    long = host.session("long", config=Config(context_window=200_000, prepare_threshold=0.0))
    long.append(Message.system("You are a careful coding agent."))
    long.append(Message.user(TASK))
    for step in range(160):
        _step(long, 30, step, size=3)
        long.prepare_step()


def main() -> None:
    if TARGET.exists():
        sys.exit(f"{TARGET} exists: this corpus is written once and never again")
    ticks = itertools.count(1)
    ids = itertools.count(1)
    options = HostOptions(compaction_workers=1, background_compactions=1)
    with Host.open(
        TARGET,
        clock=lambda: 1_765_000_000.0 + next(ticks),
        id_factory=lambda: f"id-{next(ids)}",
        options=options,
    ) as host:
        _drive(host)
    listing = {}
    with LmdbEventLog.open(TARGET, readonly=True) as log:
        for sid in log.sessions():
            events = [record.event for record in log.read(sid)]
            state = rebuild(log, sid)
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
                "rebuilt_checkpoints": [c.id for c in state.checkpoints],
                "messages": len(state.history),
            }
    (TARGET / "lock.mdb").unlink(missing_ok=True)
    (TARGET / "writer.lock").unlink(missing_ok=True)
    (HERE / "log_v5.json").write_text(json.dumps(listing, indent=1) + "\n", encoding="utf-8")
    shutil.rmtree(TARGET / "__pycache__", ignore_errors=True)


if __name__ == "__main__":
    main()
