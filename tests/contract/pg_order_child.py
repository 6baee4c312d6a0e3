"""A writer process of the global-order test: threads append to their own sessions and report.

Usage: ``python pg_order_child.py DSN SCHEMA PROCESS THREADS SESSIONS APPENDS``. Prints one JSON
list: per acknowledged append ``[session, first_seq, first_position, count, submitted_ns,
acked_ns]`` (``time.monotonic_ns``, which every process of the machine shares).
"""

from __future__ import annotations

import json
import sys
import threading
import time

from ctxledger.events.types import UsageReported
from ctxledger.storage import PostgresEventLog


def main() -> None:
    """Append as told and print what each append was acknowledged with."""
    dsn, schema = sys.argv[1], sys.argv[2]
    process, threads, sessions, appends = map(int, sys.argv[3:7])
    log = PostgresEventLog.open(dsn, schema=schema)
    report: list[list[object]] = []
    lock = threading.Lock()

    def writer(thread: int) -> None:
        names = [f"p{process}-t{thread}-s{index}" for index in range(sessions)]
        last = dict.fromkeys(names, 0)
        mine = []
        for step in range(appends):
            for name in names:
                count = 1 + (step + thread) % 2
                events = [UsageReported(prompt_tokens=last[name] + 1 + i) for i in range(count)]
                submitted = time.monotonic_ns()
                recorded = log.append(name, events, expected_seq=last[name])
                acked = time.monotonic_ns()
                last[name] += count
                mine.append([name, recorded[0].seq, recorded[0].position, count, submitted, acked])
        with lock:
            report.extend(mine)

    workers = [threading.Thread(target=writer, args=(index,)) for index in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    log.close()
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
