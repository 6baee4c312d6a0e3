"""Disk full, on a real 4 MiB tmpfs: appends fail by name, nothing half-written, and recover.

The tmpfs is mounted for the test (CI runs as root); where mounting is not permitted the tests
skip and say why. LMDB is opened without ``writemap`` (as always), so a full disk is an error
from the commit's write, not a SIGBUS from a page of the map.
"""

from __future__ import annotations

import errno
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxledger import Host, Message, StorageError
from ctxledger.events.types import Event, MessageAppended
from ctxledger.storage import LmdbEventLog

DISK_FULL = "disk full"


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted under the test's directory, unmounted afterwards."""
    mount = tmp_path / "small"
    mount.mkdir()
    try:
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    except FileNotFoundError:
        pytest.skip("no mount command here, so no small filesystem to fill")
    if result.returncode != 0:
        pytest.skip(
            f"mounting a 4 MiB tmpfs is not permitted here ({result.stderr.strip()}); "
            "the disk-full tests need root or CAP_SYS_ADMIN"
        )
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False, timeout=60)


def fill(mount: Path) -> Path:
    """Write a file until the filesystem has no space left; return it (unlink it to free)."""
    filler = mount / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (65536, 4096, 1):  # then the last partial blocks
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
    finally:
        os.close(fd)
    assert os.statvfs(mount).f_bavail == 0
    return filler


def big(seq: int) -> Event:
    """A message too large to fit in pages LMDB already has: it must grow the file."""
    return MessageAppended(message=Message.user(os.urandom(100_000).hex()).with_seq(seq))


def test_a_full_disk_fails_the_append_by_name_and_the_log_recovers(small_fs: Path) -> None:
    """Appends on a full disk raise StorageError naming it; nothing of them is visible; after
    space is freed the same open log appends again, and a reopen shows exactly what succeeded."""
    log = LmdbEventLog.open(small_fs / "log")
    try:
        before = [big(1), big(2)]
        log.append("a", before, expected_seq=0)
        filler = fill(small_fs)
        errors: list[BaseException] = []

        def append(session: str) -> None:
            try:
                log.append(session, [big(1), big(2)], expected_seq=0)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=append, args=(f"w{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        with pytest.raises(StorageError, match=DISK_FULL) as caught:
            log.append("a", [big(3)], expected_seq=2)
        assert str(small_fs) in str(caught.value)
        assert len(errors) == 4 and all(
            isinstance(e, StorageError) and DISK_FULL in str(e) for e in errors
        )
        assert (log.sessions(), log.last_seq("a"), log.last_position()) == (["a"], 2, 2)

        filler.unlink()
        log.append("a", [big(3)], expected_seq=2)
        log.append("w0", [big(1)], expected_seq=0)
    finally:
        log.close()
    with LmdbEventLog.open(small_fs / "log") as reopened:
        assert reopened.sessions() == ["a", "w0"]
        assert [r.event for r in reopened.read("a")][:2] == before
        assert (reopened.last_seq("a"), reopened.last_position()) == (3, 4)


def test_a_host_keeps_appending_after_space_is_freed(small_fs: Path) -> None:
    """A session's append on a full disk fails by name and leaves its history as it was; once
    space is freed the same host and session go on, and a restart sees the same history."""
    text = [os.urandom(100_000).hex() for _ in range(3)]
    with Host.open(small_fs / "host") as host:
        session = host.session("s")
        session.append(Message.user(text[0]))
        filler = fill(small_fs)
        with pytest.raises(StorageError, match=DISK_FULL):
            session.append(Message.user(text[1]))
        assert [m.content for m in session.history()] == [text[0]]
        filler.unlink()
        assert session.append(Message.user(text[2])) == 2
        assert [m.content for m in session.history()] == [text[0], text[2]]
    with Host.open(small_fs / "host") as host:
        assert [(m.seq, m.content) for m in host.session("s").history()] == [
            (1, text[0]),
            (2, text[2]),
        ]


def test_a_step_on_a_full_disk_fails_and_the_session_goes_on_from_its_log(small_fs: Path) -> None:
    """Session.step folds its appends before the log has them: on a full disk the step fails
    by name, the session is reloaded from its log (history as it was), and once space is freed
    the next step goes on from there; a restart sees the same."""
    text = [os.urandom(50_000).hex() for _ in range(3)]  # all three fit the default window
    with Host.open(small_fs / "host") as host:
        session = host.session("s")
        session.step([Message.user(text[0])])
        filler = fill(small_fs)
        with pytest.raises(StorageError, match=DISK_FULL):
            session.step([Message.assistant(text[1])])
        assert [m.content for m in session.history()] == [text[0]]
        filler.unlink()
        view = session.step([Message.assistant(text[2])])
        assert view.appended_seqs == (2,) and view.messages[-1].content == text[2]
    with Host.open(small_fs / "host") as host:
        assert [(m.seq, m.content) for m in host.session("s").history()] == [
            (1, text[0]),
            (2, text[2]),
        ]
