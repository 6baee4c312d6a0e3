"""The byte counters behind ``stats()``: written every 64 groups, exact at any moment.

The expected figures are computed independently of the counters: stored bytes from the raw
records, raw bytes by encoding the decoded events again (msgpack here is deterministic).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from ctxledger.events.codec import encode_payload
from ctxledger.events.types import Event, MessageAppended
from ctxledger.messages import Message
from ctxledger.storage import LmdbEventLog
from ctxledger.storage._layout import STAMP_SIZE
from ctxledger.storage._lmdb_counters import COUNT_EVERY, COUNTED_THROUGH
from guards import reap


def messages(count: int, start: int = 1) -> list[Event]:
    """Tool results of varied sizes: some compressed, some stored raw."""
    return [
        MessageAppended(
            message=Message.tool(f"line {seq} " * (seq % 7 * 90 + 3), f"c{seq}", "bash").with_seq(
                seq
            )
        )
        for seq in range(start, start + count)
    ]


def expected_bytes(log: LmdbEventLog) -> tuple[int, int]:
    """(raw, stored) of every event of the log, without the counters."""
    with log._reading() as txn:
        records = txn.cursor(db=log._shared.dbs.events).iternext(keys=False)
        stored = sum(len(value) - STAMP_SIZE for value in records)
    raw = sum(
        len(encode_payload(record.event))
        for session in log.sessions()
        for record in log.iter_events(session)
    )
    return raw, stored


def stored_mark(log: LmdbEventLog) -> bytes | None:
    """The ``counted_through`` entry of the log's meta, as stored."""
    with log._reading() as txn:
        value = txn.get(COUNTED_THROUGH, db=log._shared.dbs.meta)
        return None if value is None else bytes(value)


def stored_counters(log: LmdbEventLog) -> tuple[int, int]:
    """(raw, stored) as the log's meta holds them, without what ``count_bytes`` adds."""
    with log._reading() as txn:
        meta = log._shared.dbs.meta
        raw = int.from_bytes(txn.get(b"raw_bytes", db=meta), "big")
        stored = int.from_bytes(txn.get(b"stored_bytes", db=meta), "big")
    return raw, stored


def append_groups(log: LmdbEventLog, first: int, last: int) -> None:
    """Groups ``first`` to ``last - 1``: appends of two messages each, one commit each."""
    for group in range(first, last):
        log.append("s", messages(2, start=2 * group + 1), expected_seq=2 * group)


def test_stats_are_exact_between_two_writes_of_the_counters(tmp_path: Path) -> None:
    """After fewer groups than COUNT_EVERY, and after more, stats count every event."""
    with LmdbEventLog.open(tmp_path / "log") as log:
        for first, last in ((0, 3), (3, COUNT_EVERY + 5)):
            append_groups(log, first, last)
            stats = log.stats()
            assert (stats["raw_bytes"], stats["stored_bytes"]) == expected_bytes(log)
            assert stored_mark(log) is not None  # the stored counters lag, knowingly


def test_a_clean_close_writes_the_counters_exactly(tmp_path: Path) -> None:
    """Closing leaves counters that count every event, readable as older versions read them."""
    with LmdbEventLog.open(tmp_path / "log") as log:
        append_groups(log, 0, 5)
    with LmdbEventLog.open(tmp_path / "log", readonly=True) as log:
        assert stored_mark(log) is None
        assert stored_counters(log) == expected_bytes(log)


_KILLED_WRITER = """
import sys
from ctxledger.events.types import MessageAppended
from ctxledger.messages import Message
from ctxledger.storage import LmdbEventLog
log = LmdbEventLog.open(sys.argv[1])
for group in range(int(sys.argv[2])):
    seq = 2 * group
    batch = [
        MessageAppended(message=Message.user(f"m{seq} " * (seq % 50 * 40 + 1)).with_seq(seq + i))
        for i in (1, 2)
    ]
    log.append("s", batch, expected_seq=seq)
print("ready", flush=True)
sys.stdin.read()
"""


def test_stats_are_exact_after_a_writer_was_killed(tmp_path: Path) -> None:
    """A SIGKILLed writer leaves lagging counters; stats and the next writer count it all."""
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(tmp_path / "log"), str(COUNT_EVERY + 20)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        reap(child)
    with LmdbEventLog.open(tmp_path / "log", readonly=True) as log:
        assert stored_mark(log) is not None
        stats = log.stats()
        assert (stats["raw_bytes"], stats["stored_bytes"]) == expected_bytes(log)
    seq = 2 * (COUNT_EVERY + 20)
    with LmdbEventLog.open(tmp_path / "log") as log:
        log.append("s", messages(1, start=seq + 1), expected_seq=seq)
        stats = log.stats()
        assert (stats["raw_bytes"], stats["stored_bytes"]) == expected_bytes(log)
    with LmdbEventLog.open(tmp_path / "log", readonly=True) as log:
        assert stored_mark(log) is None and stored_counters(log) == expected_bytes(log)
