"""Write ``log_v1/``: a small LMDB log made by ctxledger as of 2026-12-01 after runtime v2.

Run ONCE, never again: a log written by this version must keep opening, verifying and rebuilding
the same views forever (``tests/integration/test_old_logs.py``). It exercises what ``log_v0``
could not: background compaction (``SummaryPrepared``, checkpoints activated from a prepared
summary), the fact index of checkpoints, ``CheckpointReverted``, usage reports, Config changes
(``ConfigChanged``), withdrawals (``MessageRetracted``, ``HistoryCleared``), a fork and recovery.

    .venv/bin/python tests/data/make_log_v1.py   # refuses to overwrite

Files:
    log_v1/data.mdb       the LMDB environment (``lock.mdb`` is not kept)
    log_v1.json           per session, as in ``log_v0.json``: every served view (through seq,
                          view hash), the ids of the checkpoints it recorded and of those its
                          rebuilt state holds, its message count, and its event types
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
TARGET = HERE / "log_v1"


def _turns(session: Session, turns: range, *, usage: bool = True) -> None:
    for turn in turns:
        session.append(
            Message.user(f"Task {turn}: fix src/pkg/mod_{turn}.py so tests/test_{turn}.py passes")
        )
        for step in range(3):
            command = json.dumps({"cmd": f"python -m pytest tests/test_{turn}.py -k t{step}"})
            call = ToolCall(f"call-{turn}-{step}", "shell", command)
            session.append_many(
                [
                    Message.assistant(f"Running step {step} of task {turn}.", [call]),
                    Message.tool(
                        f"FAILED tests/test_{turn}.py::test_{step} - AssertionError\n"
                        f"E   assert parse_{turn}_{step}('x') == {step}\n" + "y" * 160,
                        call.id,
                        "shell",
                    ),
                ]
            )
            session.prepare_step()
            session.wait_background()
            if usage:
                session.record_usage(300 + 40 * step + 35 * turn, 25 + step)
        session.append(Message.assistant(f"Task {turn} done: src/pkg/mod_{turn}.py fixed."))
        session.prepare_step()
        session.wait_background()


def _drive(host: Host) -> None:
    # Background compaction (prepare_threshold) and the fact index are the defaults of a
    # Config built now; a small window makes both happen within a few turns.
    config = Config(context_window=1_200, min_retain_rounds=2, snapshot_interval=30)
    assert config.prepare_threshold > 0 and config.fact_index_chars > 0
    main = host.session("main", config=config)
    main.append(Message.system("You are a careful coding agent. Keep answers short."))
    _turns(main, range(3))
    main.pin(2)
    main.compact("keep the file names")
    main.prepare_step()
    _turns(main, range(3, 5))
    main.compact("keep the failing tests")
    main.prepare_step()
    main.revert_compaction(reason="the summary lost a test name")
    main.prepare_step()
    host.session("main", config=config.replace(micro_batch=1, context_window=1_500))
    _turns(main, range(5, 7))
    main.reactive_compact("prompt is too long: 9000 tokens > 8192 maximum")
    main.prepare_step()
    main.append(Message.user("A message to withdraw."))
    main.retract_last()
    main.prepare_step()
    fork = main.fork("main-fork")
    fork.append(Message.user("In the fork: start over."))
    fork.clear()
    fork.append(Message.user("After the clear."))
    fork.prepare_step()
    # Background compaction off, old-style, in the same log.
    other = host.session("other", config=config.replace(prepare_threshold=0.0))
    _turns(other, range(2), usage=False)
    other.append(Message.user("A short question."))
    other.append(Message.assistant("", [ToolCall("open-call", "read_file", '{"path": "a.py"}')]))
    # "open-call" stays unanswered: re-opening answers it as interrupted (recovery).


def main() -> None:
    if TARGET.exists():
        sys.exit(f"{TARGET} exists: this corpus is written once and never again")
    ticks = itertools.count(1)
    ids = itertools.count(1)
    with Host.open(
        TARGET,
        clock=lambda: 1_764_590_000.0 + next(ticks),
        id_factory=lambda: f"id-{next(ids)}",
        compaction_workers=1,
        background_compactions=1,
    ) as host:
        _drive(host)
    with Host.open(
        TARGET, clock=lambda: 1_764_591_000.0 + next(ticks), id_factory=lambda: f"id-{next(ids)}"
    ) as host:
        other = host.session("other")  # recovery synthesises the interrupted result
        other.prepare_step()
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
                "checkpoints": [
                    e.checkpoint.id for e in events if type(e).__name__ == "CheckpointCreated"
                ],
                "rebuilt_checkpoints": [c.id for c in rebuild(log, sid).checkpoints],
                "messages": len(rebuild(log, sid).history),
            }
    (TARGET / "lock.mdb").unlink(missing_ok=True)
    (HERE / "log_v1.json").write_text(json.dumps(listing, indent=1) + "\n", encoding="utf-8")
    shutil.rmtree(TARGET / "__pycache__", ignore_errors=True)


if __name__ == "__main__":
    main()
