"""What no kill -9 test can see: the LMDB log flushes where it promises, never overwrites.

A SIGKILLed process leaves its writes in the page cache, where the next process finds them, so
a missing fsync passes every crash test. These tests watch the environment itself: a wrapper
around the real ``lmdb.Environment`` records each write transaction and each ``sync`` call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lmdb
import pytest

from ctxledger.errors import StorageError
from ctxledger.events.types import Event, UsageReported
from ctxledger.storage import LmdbEventLog, copy_log
from ctxledger.storage import _lmdb_env as env_module


def usage(count: int, start: int = 0) -> list[Event]:
    """``count`` small events, told apart by their ``prompt_tokens``."""
    return [UsageReported(prompt_tokens=start + index) for index in range(count)]


class RecordingEnvironment:
    """A real ``lmdb.Environment`` that records its write transactions and ``sync`` calls."""

    def __init__(self, env: lmdb.Environment, calls: list[tuple[str, Any]]) -> None:
        self._env = env
        self.calls = calls

    def begin(self, *args: Any, **kwargs: Any) -> lmdb.Transaction:
        """Begin a transaction, noting a write one."""
        if kwargs.get("write"):
            self.calls.append(("write", None))
        return self._env.begin(*args, **kwargs)

    def sync(self, force: bool = False) -> None:
        """Flush, noting whether the flush was forced."""
        self.calls.append(("sync", force))
        self._env.sync(force)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """What every environment opened during the test did (writes and syncs, in order)."""
    recorded: list[tuple[str, Any]] = []
    real_open = lmdb.open

    def recording_open(*args: Any, **kwargs: Any) -> RecordingEnvironment:
        return RecordingEnvironment(real_open(*args, **kwargs), recorded)

    monkeypatch.setattr(env_module.lmdb, "open", recording_open)
    return recorded


def test_sync_forces_a_flush_of_a_log_written_without_one(
    tmp_path: Path, calls: list[tuple[str, Any]]
) -> None:
    """LmdbEventLog.sync() on a durability="none" log calls env.sync(True), after the writes.

    Without ``force`` LMDB skips the flush of an environment opened with ``sync=False``.
    """
    with LmdbEventLog.open(tmp_path / "log", durability="none") as log:
        log.append("s", usage(3), expected_seq=0)
        del calls[:]
        log.sync()
        assert calls == [("sync", True)]


def test_a_copy_is_flushed_after_its_last_write(
    tmp_path: Path, calls: list[tuple[str, Any]]
) -> None:
    """copy_log writes its target without a flush per batch, then forces one flush at the end."""
    with LmdbEventLog.open(tmp_path / "source", durability="none") as source:
        for session in ("a", "b"):
            source.append(session, usage(4), expected_seq=0)
        source.save_snapshot("a", 4, b"snap")
    del calls[:]
    copy_log(tmp_path / "source", tmp_path / "target")
    writes = [index for index, call in enumerate(calls) if call[0] == "write"]
    syncs = [index for index, call in enumerate(calls) if call == ("sync", True)]
    assert writes and syncs and syncs[-1] > writes[-1]


def test_a_sync_log_commits_with_fsync_and_never_calls_an_unforced_sync(
    tmp_path: Path, calls: list[tuple[str, Any]]
) -> None:
    """Durability "sync" is LMDB's own flush at each commit: no write relies on a later sync."""
    with LmdbEventLog.open(tmp_path / "log", durability="sync") as log:
        log.append("s", usage(2), expected_seq=0)
        flags = log._shared.env.flags()
    assert (flags["sync"], flags["metasync"]) == (True, True)
    assert ("sync", False) not in calls


def test_an_append_never_overwrites_a_stored_event(tmp_path: Path) -> None:
    """If the writer's caches ever disagreed with the disk, the append fails; history stays.

    The caches are made to lie directly (no public path leads there: that is the point of the
    guard). The put is ``overwrite=False``: it refuses the existing key, the group fails with a
    StorageError naming the seq, and the next group reloads the caches from the disk.
    """
    with LmdbEventLog.open(tmp_path / "log") as log:
        log.append("s", usage(2), expected_seq=0)
        journal = log._shared.journal
        assert journal is not None
        writer = journal._writer
        number = writer._numbers["s"]  # type: ignore[attr-defined]
        writer._last[number] = 1  # type: ignore[attr-defined]  # the cache now lies
        with pytest.raises(StorageError, match="seq 2 or position 3 exists"):
            log.append("s", usage(1, start=90), expected_seq=1)
        assert [r.event for r in log.read("s")] == usage(2)
        assert log.last_position() == 2
        assert log.append("s", usage(1, start=5), expected_seq=2)[0].seq == 3
