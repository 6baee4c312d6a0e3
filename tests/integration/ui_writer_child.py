"""A host in a process of its own, writing to a log the test watches through the UI.

Usage: ``python ui_writer_child.py DB``; then, one command per line on stdin:

    step SESSION        append one workload step to SESSION and serve a view; prints "ok SEQ"
    quit                close the host and exit
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from report_helpers import CONFIG

from ctxledger import Host
from ctxledger.tooling.workload import iter_agent_steps


def main() -> None:
    steps = {}
    with Host.open(sys.argv[1], config=CONFIG) as host:
        print("ready", flush=True)
        for line in sys.stdin:
            command, _, session_id = line.strip().partition(" ")
            if command == "quit":
                break
            session = host.session(session_id)
            if session_id not in steps:
                steps[session_id] = iter_agent_steps(5, steps=10_000)
            session.append_many(next(steps[session_id]))
            view = session.prepare_step()
            print(f"ok {view.through_seq}", flush=True)


if __name__ == "__main__":
    main()
