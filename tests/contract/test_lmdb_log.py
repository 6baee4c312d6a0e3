"""What the LMDB backend promises beyond the contract: persistence, sharing, growth, errors."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import lmdb
import pytest

from ctxledger.errors import ConfigError, InvalidMessageError, StorageError
from ctxledger.events.types import CompactionFailed, Event, MessageAppended, UsageReported
from ctxledger.messages import Message
from ctxledger.storage import LmdbEventLog
from ctxledger.storage._layout import STAMP_SIZE, pack_pair
from ctxledger.testing.processes import child_process, kill


def usage(count: int, start: int = 0) -> list[Event]:
    """``count`` small events, told apart by their ``prompt_tokens``."""
    return [UsageReported(prompt_tokens=start + index) for index in range(count)]


def messages(count: int, size: int, start: int = 1) -> list[Event]:
    """``count`` tool-result messages of about ``size`` characters of varied text."""
    events: list[Event] = []
    for seq in range(start, start + count):
        body = " ".join(f"line {seq}.{n}: value={n * seq % 977} ok" for n in range(size // 24))
        events.append(
            MessageAppended(message=Message.tool(body, f"call_{seq}", "bash").with_seq(seq))
        )
    return events


def test_events_survive_reopen(tmp_path: Path) -> None:
    """Events appended before close are read back after reopening the directory."""
    with LmdbEventLog.open(tmp_path / "log") as log:
        recorded = log.append("s", usage(3), expected_seq=0)
    with LmdbEventLog.open(tmp_path / "log") as log:
        assert log.read("s") == recorded


def test_seqs_and_positions_continue_after_reopen(tmp_path: Path) -> None:
    """A reopened log continues each session's seqs and the global positions."""
    with LmdbEventLog.open(tmp_path / "log") as log:
        log.append("a", usage(2), expected_seq=0)
    with LmdbEventLog.open(tmp_path / "log") as log:
        recorded = log.append("a", usage(1), expected_seq=2)
    assert (recorded[0].seq, recorded[0].position) == (3, 3)


def test_a_reader_and_the_writer_of_a_path_share_one_environment(tmp_path: Path) -> None:
    """A read-only handle on a path this process writes sees the writer's appends."""
    with (
        LmdbEventLog.open(tmp_path / "log") as writer,
        LmdbEventLog.open(tmp_path / "log", readonly=True) as reader,
    ):
        writer.append("s", usage(2), expected_seq=0)
        assert reader.last_seq("s") == 2
        with pytest.raises(StorageError, match="read-only"):
            reader.append("s", usage(1), expected_seq=2)


def test_closing_one_handle_keeps_the_other_open(tmp_path: Path) -> None:
    """The environment stays open until its last handle closes, writer or reader."""
    writer = LmdbEventLog.open(tmp_path / "log")
    reader = LmdbEventLog.open(tmp_path / "log", readonly=True)
    reader.close()
    writer.append("s", usage(1), expected_seq=0)
    reader = LmdbEventLog.open(tmp_path / "log", readonly=True)
    writer.close()
    assert reader.read("s")[0].seq == 1
    reader.close()


def test_a_path_written_again_after_its_writer_closed_beside_a_reader(tmp_path: Path) -> None:
    """Closing the writer while a reader stays open lets a new writer take the folder."""
    with LmdbEventLog.open(tmp_path / "log", readonly=False) as first:
        first.append("s", usage(2), expected_seq=0)
        reader = LmdbEventLog.open(tmp_path / "log", readonly=True)
    try:
        with LmdbEventLog.open(tmp_path / "log") as second:
            assert second.append("s", usage(1), expected_seq=2)[0].position == 3
        assert reader.last_seq("s") == 3
    finally:
        reader.close()


def test_relative_and_absolute_paths_share_an_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same directory named two ways is one environment."""
    monkeypatch.chdir(tmp_path)
    with (
        LmdbEventLog.open("log") as relative,
        LmdbEventLog.open(tmp_path / "log", readonly=True) as absolute,
    ):
        relative.append("s", usage(1), expected_seq=0)
        assert absolute.last_seq("s") == 1


def test_opening_a_path_again_with_other_durability_fails(tmp_path: Path) -> None:
    """A writer asking for another durability than the open environment's is refused clearly."""
    LmdbEventLog.open(tmp_path / "log").close()
    with (
        LmdbEventLog.open(tmp_path / "log", readonly=True),
        pytest.raises(StorageError, match="already open"),
    ):
        LmdbEventLog.open(tmp_path / "log", durability="none")


def test_closing_a_handle_twice_is_harmless(tmp_path: Path) -> None:
    """close() is idempotent and does not release another handle's reference."""
    first = LmdbEventLog.open(tmp_path / "log")
    second = LmdbEventLog.open(tmp_path / "log", readonly=True)
    first.close()
    first.close()
    assert second.last_seq("s") == 0
    second.close()


@pytest.mark.parametrize("durability", ["sync", "group", "none"])
def test_every_durability_mode_opens(tmp_path: Path, durability: str) -> None:
    """The three durability modes are accepted and record appends."""
    with LmdbEventLog.open(tmp_path / "log", durability=durability) as log:  # type: ignore[arg-type]
        assert log.append("s", usage(1), expected_seq=0)[0].seq == 1


def test_unknown_durability_is_a_config_error(tmp_path: Path) -> None:
    """An unknown durability mode raises ConfigError naming the setting."""
    with pytest.raises(ConfigError) as caught:
        LmdbEventLog.open(tmp_path / "log", durability="fast")  # type: ignore[arg-type]
    assert caught.value.field == "durability"


def test_durability_error_is_a_value_error(tmp_path: Path) -> None:
    """A bad durability mode is also a ValueError."""
    with pytest.raises(ValueError):
        LmdbEventLog.open(tmp_path / "log", durability="")  # type: ignore[arg-type]


def test_lmdb_error_on_open_is_a_storage_error(tmp_path: Path) -> None:
    """A damaged data file (an lmdb.Error) surfaces as StorageError, caused by the lmdb.Error."""
    (tmp_path / "log").mkdir()
    (tmp_path / "log" / "data.mdb").write_bytes(b"garbage" * 2000)
    with pytest.raises(StorageError) as caught:
        LmdbEventLog.open(tmp_path / "log")
    assert isinstance(caught.value.__cause__, lmdb.Error)


def test_unusable_path_is_a_storage_error(tmp_path: Path) -> None:
    """A path below a regular file cannot hold a log: StorageError."""
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StorageError):
        LmdbEventLog.open(tmp_path / "file" / "log")


def test_readonly_open_of_missing_log_is_a_storage_error(tmp_path: Path) -> None:
    """Opening a missing directory read-only raises StorageError."""
    with pytest.raises(StorageError):
        LmdbEventLog.open(tmp_path / "missing", readonly=True)


def test_readonly_open_of_a_foreign_environment_is_a_storage_error(tmp_path: Path) -> None:
    """An LMDB environment without the log's sub-databases is refused read-only, translated."""
    lmdb.open(str(tmp_path / "other"), max_dbs=4).close()
    with pytest.raises(StorageError) as caught:
        LmdbEventLog.open(tmp_path / "other", readonly=True)
    assert isinstance(caught.value.__cause__, lmdb.Error)


def test_readonly_log_reads_but_refuses_appends(tmp_path: Path) -> None:
    """A read-only handle reads the events and refuses to append."""
    with LmdbEventLog.open(tmp_path / "log") as log:
        log.append("s", usage(2), expected_seq=0)
    with LmdbEventLog.open(tmp_path / "log", readonly=True) as log:
        assert log.last_seq("s") == 2
        with pytest.raises(StorageError, match="read-only"):
            log.append("s", usage(1), expected_seq=2)


def test_log_of_another_format_is_refused(tmp_path: Path) -> None:
    """A directory whose meta names another format is not opened."""
    LmdbEventLog.open(tmp_path / "log").close()
    with lmdb.open(str(tmp_path / "log"), max_dbs=16) as env:
        meta = env.open_db(b"meta")
        with env.begin(write=True, db=meta) as txn:
            txn.put(b"format", b"something-else/9")
    with pytest.raises(StorageError, match="format"):
        LmdbEventLog.open(tmp_path / "log")


def test_map_grows_instead_of_failing(tmp_path: Path) -> None:
    """Tens of MB written through a 64 KiB initial map all land and read back."""
    big = [
        MessageAppended(message=Message.user(os.urandom(64 * 1024).hex()).with_seq(seq))
        for seq in range(1, 401)
    ]
    with LmdbEventLog.open(tmp_path / "log", map_size=64 * 1024, durability="none") as log:
        for start in range(0, 400, 20):
            log.append("s", big[start : start + 20], expected_seq=start)
        stats = log.stats()
        assert [r.event for r in log.iter_events("s")] == big
    assert stats["stored_bytes"] > 20 * 1024 * 1024 and stats["map_size"] > stats["stored_bytes"]


def _reader(log: LmdbEventLog, stop: threading.Event, errors: list[BaseException]) -> None:
    """Read the newest events of session "s" until ``stop``; keep the first failure."""
    while not stop.is_set():
        try:
            first = max(log.last_seq("s") - 20, 1)
            seqs = [r.seq for r in log.read("s", first)]
            assert seqs == list(range(first, first + len(seqs)))
        except BaseException as exc:
            errors.append(exc)
            return
        time.sleep(0.0005)  # leave the GIL to the writer: this test is about correctness


def test_map_growth_waits_for_concurrent_readers(tmp_path: Path) -> None:
    """Readers running while the map grows read consistent data and never fail."""
    errors: list[BaseException] = []
    stop = threading.Event()
    with LmdbEventLog.open(tmp_path / "log", map_size=64 * 1024, durability="none") as log:
        threads = [threading.Thread(target=_reader, args=(log, stop, errors)) for _ in range(3)]
        for thread in threads:
            thread.start()
        for start in range(0, 200, 10):
            log.append("s", messages(10, 8000, start=start + 1), expected_seq=start)
        stop.set()
        for thread in threads:
            thread.join()
    assert errors == []


def test_map_grows_under_a_commit_on_the_submitting_thread(tmp_path: Path) -> None:
    """A lone ``submit`` is committed on the submitting thread (the journal is idle); when its
    commit finds the map full, the map grows there, while readers run, and nothing is lost."""
    errors: list[BaseException] = []
    stop = threading.Event()
    threads_of_callbacks: set[str] = set()
    with LmdbEventLog.open(tmp_path / "log", map_size=64 * 1024, durability="none") as log:
        readers = [threading.Thread(target=_reader, args=(log, stop, errors)) for _ in range(2)]
        for thread in readers:
            thread.start()
        outcomes: list[BaseException | None] = []
        answered = threading.Semaphore(0)

        def callback(records: Any, error: BaseException | None) -> None:
            outcomes.append(error)
            threads_of_callbacks.add(threading.current_thread().name)
            answered.release()

        for start in range(0, 200, 10):
            log.submit("s", messages(10, 8000, start=start + 1), expected_seq=start,
                       callback=callback)  # fmt: skip
            answered.acquire()
        assert outcomes == [None] * 20
        stop.set()
        for thread in readers:
            thread.join()
        assert [r.seq for r in log.iter_events("s")] == list(range(1, 201))
        assert log.stats()["map_size"] > 64 * 1024
    assert errors == []
    assert threading.current_thread().name in threads_of_callbacks


def test_pending_appends_commit_before_close(tmp_path: Path) -> None:
    """Appends that returned before close() are all on disk after it."""
    log = LmdbEventLog.open(tmp_path / "log")

    def writer(index: int) -> None:
        for batch in range(5):
            log.append(f"w{index}", usage(2), expected_seq=batch * 2)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    log.close()
    with LmdbEventLog.open(tmp_path / "log") as log:
        assert log.last_position() == 40


def test_commit_timestamp_comes_from_the_clock(tmp_path: Path) -> None:
    """The injected clock stamps every recorded event."""
    with LmdbEventLog.open(tmp_path / "log", clock=lambda: 1234.5) as log:
        log.append("s", usage(2), expected_seq=0)
        assert {r.timestamp for r in log.read("s")} == {1234.5}


def test_large_events_are_stored_compressed(tmp_path: Path) -> None:
    """Large messages are stored zstd-compressed; stats reports a ratio above 1."""
    with LmdbEventLog.open(tmp_path / "log") as log:
        log.append("s", messages(20, 6000), expected_seq=0)
        assert log.stats()["compression_ratio"] > 1.5


def test_stats_counts_events_per_session(tmp_path: Path) -> None:
    """stats() reports each session's event count and the total."""
    with LmdbEventLog.open(tmp_path / "log") as log:
        log.append("a", usage(2), expected_seq=0)
        log.append("b", usage(3), expected_seq=0)
        stats = log.stats()
    assert (stats["events_per_session"], stats["events"]) == ({"a": 2, "b": 3}, 5)


def test_trained_dictionary_compresses_new_records(tmp_path: Path) -> None:
    """After training, new records name the dictionary in their header."""
    with LmdbEventLog.open(tmp_path / "log", durability="none") as log:
        log.append("s", messages(300, 700), expected_seq=0)
        dict_id = log.train_dictionary()
        log.append("s", messages(1, 700, start=301), expected_seq=300)
        value = _raw_value(log, "s", 301)
    assert int.from_bytes(value[STAMP_SIZE + 2 : STAMP_SIZE + 6], "big") == dict_id == 1


def test_dictionary_records_read_back_after_reopen(tmp_path: Path) -> None:
    """Records compressed with a stored dictionary decode after the log is reopened."""
    with LmdbEventLog.open(tmp_path / "log", durability="none") as log:
        log.append("s", messages(300, 700), expected_seq=0)
        log.train_dictionary()
        log.append("s", messages(5, 700, start=301), expected_seq=300)
    with LmdbEventLog.open(tmp_path / "log", durability="none") as log:
        assert [r.event for r in log.read("s", 301)] == messages(5, 700, start=301)


def test_training_on_too_few_events_is_a_storage_error(tmp_path: Path) -> None:
    """A log with almost no events cannot train a dictionary."""
    with LmdbEventLog.open(tmp_path / "log") as log:
        log.append("s", usage(2), expected_seq=0)
        with pytest.raises(StorageError, match="dictionary"):
            log.train_dictionary()


def test_writes_from_another_process_are_noticed(tmp_path: Path) -> None:
    """An append after another process wrote the same directory sees its events.

    The other process is a writer that takes no writer lock (as versions before the lock did):
    the writer's caches must still never hide its events.
    """
    with LmdbEventLog.open(tmp_path / "log") as log:
        log.append("s", usage(2), expected_seq=0)
        _run_child(
            f"""
            from ctxledger.events.types import UsageReported
            from ctxledger.storage import LmdbEventLog, _lmdb_lock
            _lmdb_lock.WriterLock.acquire = classmethod(lambda cls, folder: cls(folder, None))
            with LmdbEventLog.open({str(tmp_path / "log")!r}) as log:
                log.append("s", [UsageReported(prompt_tokens=9)] * 2, expected_seq=2)
            """
        )
        recorded = log.append("s", usage(1), expected_seq=4)
    assert (recorded[0].seq, recorded[0].position) == (5, 5)


def test_stale_reader_slots_are_cleared_on_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The reader slot of a process killed inside a read transaction is freed on open."""
    # Keep the environment open here: the first opener of an environment resets the reader
    # table anyway, so only an open that joins a live environment has stale slots to clear.
    with LmdbEventLog.open(tmp_path / "log"):
        with child_process(
            [sys.executable, "-c", _READER_CHILD.format(path=str(tmp_path / "log"))], stderr=None
        ) as child:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
            assert kill(child) == -signal.SIGKILL
        caplog.set_level(logging.INFO, logger="ctxledger")
        LmdbEventLog.open(tmp_path / "log", readonly=True).close()
    cleared = [
        record.slots  # type: ignore[attr-defined]  # a bound value of the event
        for record in caplog.records
        if record.getMessage() == "cleared stale reader slots"
    ]
    assert cleared == [1]


_READER_CHILD = """
import lmdb, time
env = lmdb.open({path!r}, max_dbs=16)
txn = env.begin()
print("ready", flush=True)
time.sleep(60)
"""


def _raw_value(log: LmdbEventLog, session_id: str, seq: int) -> bytes:
    with log._reading() as txn:
        number = log._number(txn, session_id)
        assert number is not None
        return bytes(txn.get(pack_pair(number, seq), db=log._shared.dbs.events))


def _run_child(source: str) -> None:
    subprocess.run([sys.executable, "-c", textwrap.dedent(source)], check=True, timeout=60)


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        # Found before queueing: a message's metadata is checked by append itself.
        (
            MessageAppended(
                message=Message(role="user", content="hi", metadata={"h": object()}).with_seq(1)
            ),
            "metadata",
        ),
        # Found by the journal as it encodes: a summary-like text field is checked nowhere else.
        (CompactionFailed(compaction_id="c1", detail="bad \ud800 text"), None),
    ],
)
def test_an_unencodable_event_fails_its_append_alone(
    tmp_path: Path, bad: Event, field: str | None
) -> None:
    """An event that cannot be encoded fails that append (nothing written); others land."""
    with LmdbEventLog.open(tmp_path / "log") as log:
        barrier = threading.Barrier(4)
        outcomes: dict[str, object] = {}

        def append(session: str, events: list[Event]) -> None:
            barrier.wait()
            try:
                outcomes[session] = log.append(session, events, expected_seq=0)
            except Exception as exc:
                outcomes[session] = exc

        threads = [
            threading.Thread(target=append, args=(name, events))
            for name, events in [("bad", [*usage(1), bad]), ("a", usage(2)), ("b", usage(3))]
        ]
        for thread in threads:
            thread.start()
        barrier.wait()
        for thread in threads:
            thread.join()
        error = outcomes["bad"]
        assert isinstance(error, InvalidMessageError) and error.field == field
        assert "'bad'" in str(error) and "event 1 of the batch" in str(error)
        assert (log.last_seq("bad"), log.last_seq("a"), log.last_seq("b")) == (0, 2, 3)
        assert sorted(log.sessions()) == ["a", "b"]
        assert log.last_position() == 5


@pytest.mark.parametrize(
    ("durability", "flushed"), [("sync", True), ("group", True), ("none", False)]
)
def test_the_durability_mode_reaches_the_environment(
    tmp_path: Path, durability: str, flushed: bool
) -> None:
    """"sync" and "group" open LMDB with fsync of data and meta pages; "none" without.

    A crash test with kill -9 cannot see a missing fsync (the page cache survives the process),
    so the flags themselves are checked; and never writemap, which turns a full disk into a
    SIGBUS instead of an error.
    """
    with LmdbEventLog.open(tmp_path / "log", durability=durability) as log:  # type: ignore[arg-type]
        flags = log._shared.env.flags()
    assert (flags["sync"], flags["metasync"]) == (flushed, flushed)
    assert not flags["writemap"]
