"""Child process for the background compaction crash test.

Usage: python background_crash_child.py DB_DIR

Drives session ``agent`` (a turn, then a step) until a summary prepared in the background is
recorded (durably: the host writes with ``durability="sync"``), prints ``prepared
<compaction_id>`` and sleeps until it is killed -- before the threshold is reached.
"""

from __future__ import annotations

import sys
import time

from ctxledger import Config, Host, HostOptions, Message
from ctxledger.events import SummaryPrepared
from ctxledger.testing import digest_summarizer

CONFIG = Config(
    context_window=2000,
    compression_threshold=0.5,
    min_retain_rounds=1,
    micro_batch=2,
    prepare_threshold=0.85,
)


def main() -> None:
    db = sys.argv[1]
    with Host.open(
        db,
        config=CONFIG,
        summarizer=digest_summarizer,
        options=HostOptions(durability="sync"),
    ) as host:
        session = host.session("agent")
        for n in range(1, 200):
            session.append_many(
                [
                    Message.user(f"question {n}: " + "q" * 90),
                    Message.assistant(f"answer {n}: " + "a" * 90),
                ]
            )
            session.wait_background()
            ready = [
                r.event for r in host.log.read("agent") if isinstance(r.event, SummaryPrepared)
            ]
            if ready:
                print("prepared", ready[0].compaction_id, flush=True)
                while True:
                    time.sleep(60)
            session.prepare_step()
    print("no summary was prepared", flush=True)


if __name__ == "__main__":
    main()
