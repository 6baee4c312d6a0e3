"""Write ``old_log_0_1_0.mdb.zst``: an LMDB event log made by ctxledger 0.1.0 before issue 16.

Run ONCE, with the code of the commit it is named after (c4f78f5, before ``fact_index_chars``,
``CheckpointReverted`` and the compaction metadata existed), never again: the point is that a log
written by an older version keeps opening, verifying and serving the same view hashes
(``tests/integration/test_old_log.py``). A later version that changes what old logs must do
writes a new file with a new name, next to this one.

    .venv/bin/python tests/data/make_old_log.py            # refuses to overwrite

Files:
    old_log_0_1_0.mdb.zst   the environment's ``data.mdb``, zstd-compressed
    old_log_0_1_0.json      per session: messages, checkpoints, the last view served and its hash

The sessions are synthetic (no real trace is copied): an agent fixing a failing test, with
shell commands, file paths and error lines, a small window so that it compacts many times,
a pin, a usage report, a Config change, a manual compaction with a focus, and a fork.
"""

from __future__ import annotations

import itertools
import json
import sys
import tempfile
from pathlib import Path

import zstandard

from ctxledger import Config, Host, Message, ToolCall
from ctxledger.events import ViewServed

HERE = Path(__file__).resolve().parent
NAME = "old_log_0_1_0"
CONFIG = Config(context_window=4000, compression_threshold=0.6, min_retain_rounds=1)


def _round(n: int) -> list[list[Message]]:
    """One user turn of the synthetic agent, as steps (each appended atomically)."""
    module = f"src/pkg/module_{n % 7}.py"
    test = f"tests/test_module_{n % 7}.py::test_case_{n}"
    call = ToolCall(f"call-{n}-a", "bash", json.dumps({"command": f"python -m pytest {test} -x"}))
    edit = ToolCall(
        f"call-{n}-b",
        "str_replace_editor",
        json.dumps({"command": "view", "path": f"/repo/{module}"}),
    )
    failure = (
        f"============ FAILURES ============\n_____ test_case_{n} _____\n"
        f"    def test_case_{n}():\n>       assert parse('-P{n}D') == -{n}\n"
        f"E       AssertionError: assert {n} == -{n}\n"
        f"{test} FAILED in 0.{n % 10}3s\n" + "context line\n" * (20 + n % 5)
    )
    listing = "\n".join(f"/repo/src/pkg/helper_{n}_{k}.py" for k in range(8))
    return [
        [Message.user(f"Round {n}: the duration parser still fails for -P{n}D in {module}.")],
        [Message.assistant(f"I'll run {test} first.", [call])],
        [Message.tool(failure + "<returncode>1</returncode>", call.id, "bash")],
        [Message.assistant("Let me look at the module.", [edit])],
        [Message.tool(listing + "\n" + "    return value\n" * 30, edit.id, "str_replace_editor")],
        [Message.assistant(f"The sign of negative durations is dropped in {module}; fixing it.")],
    ]


def _drive(host: Host, session_id: str, rounds: range) -> None:
    session = host.session(session_id)
    for n in rounds:
        for step in _round(n):
            if step[0].role == "assistant":
                session.prepare_step()
            session.append_many(step)
        if n % 4 == 3:
            session.record_usage(1500 + 10 * n, 40)
    session.build_model_view()


def build(folder: Path) -> dict[str, object]:
    """Write the sessions into ``folder``; return what the JSON listing records."""
    ids = (f"id{n:04d}" for n in itertools.count(1))
    clock = (1_796_000_000.0 + n for n in itertools.count())
    with Host.open(
        folder, config=CONFIG, id_factory=lambda: next(ids), clock=lambda: next(clock)
    ) as host:
        main = host.session("old")
        main.append(Message.system("You are a careful coding agent."))
        _drive(host, "old", range(0, 6))
        main.pin(2)
        _drive(host, "old", range(6, 10))
        host.session("old", config=CONFIG.replace(micro_batch=1))
        _drive(host, "old", range(10, 12))
        result = main.compact("keep the failing test names")
        assert result.compacted, result
        _drive(host, "old", range(12, 14))
        fork = main.fork("old-fork", at_seq=40)
        fork.build_model_view()
        _drive(host, "old-fork", range(100, 104))
        listing: dict[str, object] = {}
        for session_id in ("old", "old-fork"):
            session = host.session(session_id)
            served = [
                record.event
                for record in host.log.read(session_id)
                if isinstance(record.event, ViewServed)
            ]
            listing[session_id] = {
                "messages": len(session.history()),
                "checkpoints": len(session.checkpoints()),
                "events": host.log.last_seq(session_id),
                "views_served": len(served),
                "last_view_through_seq": served[-1].through_seq,
                "last_view_hash": served[-1].view_hash,
            }
    return listing


def main(argv: list[str]) -> int:
    """Write the files (refusing to overwrite)."""
    target = HERE / f"{NAME}.mdb.zst"
    if target.exists():
        print(f"{target.name} exists; it must never change (a new version writes a new file)")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        listing = build(Path(tmp) / "db")
        data = (Path(tmp) / "db" / "data.mdb").read_bytes()
    target.write_bytes(zstandard.ZstdCompressor(level=19).compress(data))
    (HERE / f"{NAME}.json").write_text(json.dumps(listing, indent=1, sort_keys=True) + "\n")
    print(f"wrote {target.name} ({len(data)} bytes raw) and {NAME}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
