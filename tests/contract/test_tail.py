"""Following a log with ``ctxledger.storage.tail``: every backend, while writers append."""

from __future__ import annotations

import threading

from ctxledger.events.types import Event, UsageReported
from ctxledger.storage import EventLog, RecordedEvent, tail


def usage(count: int, start: int = 0) -> list[Event]:
    """``count`` small events."""
    return [UsageReported(prompt_tokens=start + index) for index in range(count)]


def test_tail_yields_every_event_once_in_commit_order(log: EventLog) -> None:
    """A tail started before the writers sees each of their events once, positions 1..n."""
    writers, batches = 4, 10
    total = writers * batches * 2
    stop = threading.Event()
    seen: list[RecordedEvent] = []

    def follow() -> None:
        for recorded in tail(log, stop=stop, batch=5, poll=0.01):
            seen.append(recorded)
            if len(seen) == total:
                stop.set()

    def writer(index: int) -> None:
        for batch in range(batches):
            log.append(f"w{index}", usage(2), expected_seq=batch * 2)

    follower = threading.Thread(target=follow)
    follower.start()
    threads = [threading.Thread(target=writer, args=(index,)) for index in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    follower.join(timeout=120)
    stop.set()
    assert [r.position for r in seen] == list(range(1, total + 1))
    assert seen == log.read_all()


def test_tail_resumes_after_a_position(log: EventLog) -> None:
    """Tailing after position p starts at p + 1 and stops when asked."""
    log.append("s", usage(5), expected_seq=0)
    stop = threading.Event()
    got = []
    for recorded in tail(log, 3, stop=stop, poll=0.01):
        got.append(recorded.position)
        if recorded.position == 5:
            stop.set()
    assert got == [4, 5]
