"""One writer per LMDB folder: a second writing open fails naming the writer; readers never do.

The cross-process cases use real child processes that hold a folder open, and SIGKILL them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ctxledger import Host, HostOptions, Message
from ctxledger.errors import LogLockedError, StorageError
from ctxledger.events.types import UsageReported
from ctxledger.replay import rebuild
from ctxledger.storage import LmdbEventLog, open_log
from ctxledger.storage._lmdb_lock import LOCK_FILE
from guards import reap

#: Opens the folder argv[1] for writing, appends one event, says "ready", holds until stdin ends.
_HOLDER = """
import sys
from ctxledger.events.types import UsageReported
from ctxledger.storage import LmdbEventLog
log = LmdbEventLog.open(sys.argv[1])
log.append("held", [UsageReported(prompt_tokens=7)], expected_seq=0)
print("ready", flush=True)
sys.stdin.read()
log.close()
"""


@contextmanager
def holding_writer(folder: Path) -> Iterator[subprocess.Popen[str]]:
    """A child process that writes ``folder`` until the block ends (or the test kills it)."""
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready", "the child could not open the folder"
        yield child
    finally:
        reap(child)


def test_a_second_process_cannot_write_a_folder_another_live_process_writes(
    tmp_path: Path,
) -> None:
    """The refused open names the folder and the writer's pid, and opens nothing."""
    with holding_writer(tmp_path / "log") as child, pytest.raises(LogLockedError) as caught:
        LmdbEventLog.open(tmp_path / "log")
    error = caught.value
    assert error.pid == child.pid
    assert error.path == os.path.realpath(tmp_path / "log")
    assert f"process {child.pid}" in str(error) and str(tmp_path / "log") in str(error)
    assert isinstance(error, StorageError)


def test_the_lock_of_a_killed_writer_is_gone_at_once(tmp_path: Path) -> None:
    """After SIGKILL of the writer, the next open writes without waiting or retrying."""
    with holding_writer(tmp_path / "log") as child:
        with pytest.raises(LogLockedError):
            LmdbEventLog.open(tmp_path / "log")
        child.send_signal(signal.SIGKILL)
        child.wait()
        with LmdbEventLog.open(tmp_path / "log") as log:
            recorded = log.append("held", [UsageReported(prompt_tokens=8)], expected_seq=1)
    assert recorded[0].seq == 2


def test_readers_work_while_another_process_writes(tmp_path: Path) -> None:
    """Read-only opens, the replay and a read-only open_log all work beside a live writer."""
    with holding_writer(tmp_path / "log"):
        with LmdbEventLog.open(tmp_path / "log", readonly=True) as log:
            assert [r.event for r in log.read("held")] == [UsageReported(prompt_tokens=7)]
        with open_log(tmp_path / "log", readonly=True) as log:
            assert log.last_seq("held") == 1


def test_a_closed_writer_lets_another_process_write(tmp_path: Path) -> None:
    """Closing the log releases the lock: a child can then write the folder."""
    LmdbEventLog.open(tmp_path / "log").close()
    with holding_writer(tmp_path / "log") as child:
        assert child.poll() is None


def test_a_pid_left_by_a_dead_writer_is_not_a_lock(tmp_path: Path) -> None:
    """The pid file a crashed writer left behind is overwritten, never reported."""
    (tmp_path / "log").mkdir()
    (tmp_path / "log" / LOCK_FILE).write_text("999999999\n")
    with LmdbEventLog.open(tmp_path / "log"):
        assert (tmp_path / "log" / LOCK_FILE).read_text() == f"{os.getpid()}\n"


def test_two_writing_handles_in_one_process_are_refused(tmp_path: Path) -> None:
    """A second writing open in this process fails naming this process until the first closes."""
    first = LmdbEventLog.open(tmp_path / "log")
    try:
        with pytest.raises(LogLockedError, match="this process") as caught:
            LmdbEventLog.open(tmp_path / "log")
        assert caught.value.pid == os.getpid()
        first.append("s", [UsageReported(prompt_tokens=1)], expected_seq=0)
    finally:
        first.close()
    with LmdbEventLog.open(tmp_path / "log") as second:
        assert second.append("s", [UsageReported(prompt_tokens=2)], expected_seq=1)[0].seq == 2


def test_a_second_host_on_a_folder_is_refused_and_readers_still_work(tmp_path: Path) -> None:
    """Host.open of a folder a Host of this process writes fails; rebuild reads beside it."""
    host = Host.open(tmp_path / "log", options=HostOptions(durability="none"))
    try:
        host.session("s").append(Message.user("hello"))
        with pytest.raises(LogLockedError):
            Host.open(tmp_path / "log", options=HostOptions(durability="none"))
        assert [m.content for m in rebuild(tmp_path / "log", "s").history] == ["hello"]
        assert host.session("s").append(Message.user("still here")) == 2
    finally:
        host.close()


def test_a_host_cannot_open_a_folder_another_process_writes(tmp_path: Path) -> None:
    """Host.open raises LogLockedError naming the child that writes the folder."""
    with holding_writer(tmp_path / "log") as child, pytest.raises(LogLockedError) as caught:
        Host.open(tmp_path / "log")
    assert caught.value.pid == child.pid


def test_a_writer_cannot_join_an_environment_this_process_opened_read_only(
    tmp_path: Path,
) -> None:
    """LMDB allows one environment per file and process: with only read-only handles open, a
    writing open says so (close them first) instead of failing later."""
    LmdbEventLog.open(tmp_path / "log").close()
    with LmdbEventLog.open(tmp_path / "log", readonly=True) as reader:
        with pytest.raises(StorageError, match="open read-only in this process") as caught:
            LmdbEventLog.open(tmp_path / "log")
        assert not isinstance(caught.value, LogLockedError)
        assert reader.sessions() == []
    LmdbEventLog.open(tmp_path / "log").close()
