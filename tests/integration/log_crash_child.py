"""Child process of the event-log crash test: appends batches until it is killed.

Usage: python log_crash_child.py DB_DIR SEED

Writer threads append batches of 1-6 messages and, only after ``append`` returned, print one line
per batch: ``<session> <first_seq> <last_seq> <batch_uid>``. Every message of a batch carries
``{"batch": uid, "size": n, "index": i}`` in its metadata, so the parent can check that batches are
whole. Some sessions are shared by two threads (which retry on version conflicts), and new
sessions appear as the child runs; a small initial map makes the map grow under the kill.
"""

from __future__ import annotations

import os
import random
import sys
import threading

import structlog

from ctxledger.errors import VersionConflictError
from ctxledger.events.types import Event, MessageAppended
from ctxledger.messages import Message
from ctxledger.storage import LmdbEventLog

_print_lock = threading.Lock()


def batch(uid: int, first_seq: int, rng: random.Random) -> list[Event]:
    """A batch of messages of mixed sizes, each marked with its batch's uid, size and index."""
    size = rng.randint(1, 6)
    events: list[Event] = []
    for index in range(size):
        length = rng.choice([40, 300, 1500, 6000])
        content = " ".join(f"w{rng.randint(0, 500)}" for _ in range(length // 5))
        message = Message(
            role="user",
            content=content,
            seq=first_seq + index,
            metadata={"batch": uid, "size": size, "index": index},
        )
        events.append(MessageAppended(message=message))
    return events


def acknowledge(session_id: str, first: int, last: int, uid: int) -> None:
    """Report a durable batch on stdout (one unbuffered write per line)."""
    with _print_lock:
        os.write(1, f"{session_id} {first} {last} {uid}\n".encode())


def writer(log: LmdbEventLog, sessions: list[str], seed: int, thread: int) -> None:
    """Append batches forever to ``sessions``, retrying on conflicts."""
    rng = random.Random(seed * 1000 + thread)
    counter = 0
    while True:
        session_id = rng.choice(sessions)
        counter += 1
        uid = (seed * 100 + thread) * 1_000_000 + counter
        while True:
            expected = log.last_seq(session_id)
            try:
                recorded = log.append(
                    session_id, batch(uid, expected + 1, rng), expected_seq=expected
                )
            except VersionConflictError:
                continue
            break
        acknowledge(session_id, recorded[0].seq, recorded[-1].seq, uid)
        if rng.random() < 0.05:
            sessions.append(f"new-{seed}-{thread}-{counter}")


def main(path: str, seed: int) -> None:
    """Open the log and run the writers until killed."""
    # stdout carries only acknowledgements; the log's own messages go to stderr.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    log = LmdbEventLog.open(path, durability="sync", map_size=256 * 1024)
    threads = [
        threading.Thread(target=writer, args=(log, [f"own-{n}"], seed, n), daemon=True)
        for n in range(3)
    ]
    threads += [
        threading.Thread(target=writer, args=(log, ["shared-a", "shared-b"], seed, n), daemon=True)
        for n in range(3, 5)
    ]
    for thread in threads:
        thread.start()
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
