"""Write ``log_v2/``: a small LMDB log made by ctxledger as of 2026-12-02, after issue 17.

Run ONCE, never again: a log written by this version must keep opening, verifying and rebuilding
the same views forever (``tests/integration/test_old_logs.py``). It exercises what ``log_v1``
could not: provider usage with cache figures (both providers' shapes), the tokenizer's
calibration (``TokenizerCalibrated``), a token cap reached (``BudgetExhausted``) and raised, the
gain rule (``min_compaction_gain_tokens``: re-masks that wait for their gain), the floor guard,
and summaries of oversize tool results given as head, tail and facts (``summary_result_chars``).

    .venv/bin/python tests/data/make_log_v2.py   # refuses to overwrite

Files:
    log_v2/data.mdb       the LMDB environment (``lock.mdb`` is not kept)
    log_v2.json           per session, as in ``log_v1.json``
"""

from __future__ import annotations

import itertools
import json
import shutil
import sys
from pathlib import Path

from ctxledger import BudgetExceededError, Config, Host, Message, Session, ToolCall
from ctxledger.events import ViewServed
from ctxledger.replay import rebuild
from ctxledger.storage import LmdbEventLog

HERE = Path(__file__).resolve().parent
TARGET = HERE / "log_v2"


def _usage(turn: int, step: int) -> object:
    """Alternate the providers' usage shapes, with cache figures."""
    prompt = 700 + 90 * step + 60 * turn
    if (turn + step) % 2:
        return {
            "prompt_tokens": prompt,
            "completion_tokens": 30 + step,
            "prompt_tokens_details": {"cached_tokens": prompt // 2},
        }
    return {
        "input_tokens": prompt // 4,
        "output_tokens": 30 + step,
        "cache_read_input_tokens": prompt // 2,
        "cache_creation_input_tokens": prompt - prompt // 4 - prompt // 2,
    }


def _turns(session: Session, turns: range) -> None:
    for turn in turns:
        session.append(
            Message.user(f"Task {turn}: fix src/pkg/mod_{turn}.py so tests/test_{turn}.py passes")
        )
        for step in range(3):
            command = json.dumps({"cmd": f"python -m pytest tests/test_{turn}.py -k t{step}"})
            call = ToolCall(f"call-{turn}-{step}", "shell", command)
            # Long results: over summary_result_chars (digest) and max_tool_result_chars.
            body = "".join(
                f"tests/test_{turn}.py::test_{step}_{n} PASSED ({n * 7 % 13} ms)\n"
                for n in range(30)
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
            session.prepare_step()
            session.wait_background()
            session.record_usage(_usage(turn, step))
        session.append(Message.assistant(f"Task {turn} done: src/pkg/mod_{turn}.py fixed."))
        session.prepare_step()
        session.wait_background()


def _drive(host: Host) -> None:
    # Every issue-17 field set explicitly: their defaults may change later.
    config = Config(
        context_window=2_500,
        min_retain_rounds=2,
        snapshot_interval=40,
        calibrate_after_reports=3,
        summary_result_chars=400,
        min_compaction_gain_tokens=150,
        floor_guard=True,
        micro_batch=2,
    )
    main = host.session("main", config=config)
    main.append(Message.system("You are a careful coding agent. Keep answers short."))
    _turns(main, range(4))
    main.compact("keep the failing tests")
    main.prepare_step()
    _turns(main, range(4, 6))
    # A cap: reached, refused once, then raised by a new Config.
    capped = host.session("capped", config=config.replace(max_total_tokens=5_200))
    capped.append(Message.system("You are terse."))
    _turns(capped, range(2))
    capped.append(Message.user("One more step."))
    capped.record_usage(180, 20)  # 6 reports of about 5,100 tokens, then this one: the cap
    try:
        capped.prepare_step()
    except BudgetExceededError:
        pass
    else:
        sys.exit("the cap was not reached: enlarge the usage reports")
    host.session("capped", config=capped.config.replace(max_total_tokens=100_000))
    capped.prepare_step()
    # The floor guard: a system prompt above the threshold of a small window.
    floor = host.session(
        "floor", config=config.replace(context_window=1_000, calibrate_after_reports=0)
    )
    floor.append(Message.system("Rules of the house. " + "Always run the tests first. " * 90))
    for turn in range(4):
        floor.append(Message.user(f"Question {turn}: what is in mod_{turn}.py?"))
        floor.append(Message.assistant(f"mod_{turn}.py holds parse_{turn}."))
        floor.prepare_step()


def main() -> None:
    if TARGET.exists():
        sys.exit(f"{TARGET} exists: this corpus is written once and never again")
    ticks = itertools.count(1)
    ids = itertools.count(1)
    with Host.open(
        TARGET,
        clock=lambda: 1_764_650_000.0 + next(ticks),
        id_factory=lambda: f"id-{next(ids)}",
        compaction_workers=1,
        background_compactions=1,
    ) as host:
        _drive(host)
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
    (HERE / "log_v2.json").write_text(json.dumps(listing, indent=1) + "\n", encoding="utf-8")
    shutil.rmtree(TARGET / "__pycache__", ignore_errors=True)


if __name__ == "__main__":
    main()
