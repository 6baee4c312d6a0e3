"""A throwaway PostgreSQL cluster (``ctxledger.testing.postgres.TemporaryCluster``) does not
outlive the process that started it: closed, it is stopped and removed with its watchdog; when
its owner is killed (SIGKILL: no ``finally``, no ``atexit``), the watchdog stops the server and
removes the folder. Real clusters, a real child process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctxledger.testing.postgres import TemporaryCluster, find_server_binaries
from guards import reap

pytestmark = pytest.mark.skipif(
    find_server_binaries() is None and os.environ.get("CI") != "true",
    reason="needs the PostgreSQL server binaries (initdb, pg_ctl)",
)

#: Seconds a test waits for the watchdog's clean-up (it takes well under one on a quiet machine).
DEADLINE = 120

_OWNER = """
import time
from ctxledger.testing.postgres import TemporaryCluster
cluster = TemporaryCluster()
postmaster = int((cluster.folder / "data" / "postmaster.pid").read_text().split()[0])
print(cluster.folder, postmaster, cluster.watchdog_pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie that nobody reaps counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except OSError:  # no /proc here: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in ("Z", "X")


def _gone(folder: Path, *pids: int) -> bool:
    """Poll until ``folder`` is removed and every process in ``pids`` ended (or the deadline)."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        if not folder.exists() and not any(_alive(pid) for pid in pids):
            return True
        time.sleep(0.05)
    return False


def test_a_cluster_whose_owner_is_killed_is_stopped_and_removed() -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline()
        assert line, owner.stderr.read() if owner.stderr else "the owner printed nothing"
        folder_text, postmaster_text, watchdog_text = line.split()
        folder, postmaster, watchdog = Path(folder_text), int(postmaster_text), int(watchdog_text)
        assert folder.is_dir() and _alive(postmaster) and _alive(watchdog)
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    finally:
        reap(owner)
    assert _gone(folder, postmaster, watchdog), (
        f"{folder} or the server (pid {postmaster}) outlived its killed owner"
    )


def test_a_closed_cluster_leaves_no_folder_server_or_watchdog() -> None:
    cluster = TemporaryCluster()
    postmaster = int((cluster.folder / "data" / "postmaster.pid").read_text().split()[0])
    watchdog = cluster.watchdog_pid
    assert watchdog is not None and _alive(watchdog) and _alive(postmaster)
    cluster.close()
    assert cluster.watchdog_pid is None
    assert not cluster.folder.exists() and not _alive(watchdog)
    assert _gone(cluster.folder, postmaster)


def test_a_cluster_works_where_no_watchdog_can_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))  # an embedded Python
    with TemporaryCluster() as cluster:
        assert cluster.watchdog_pid is None and cluster.running
        postmaster = int((cluster.folder / "data" / "postmaster.pid").read_text().split()[0])
    assert _gone(cluster.folder, postmaster)
