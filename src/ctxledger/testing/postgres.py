"""A throwaway PostgreSQL cluster for tests and benchmarks: ``initdb`` in a temporary folder.

:class:`TemporaryCluster` runs the server binaries of the machine (``initdb`` and ``pg_ctl`` on
``PATH``, or where ``pg_config --bindir`` says, or Debian's ``/usr/lib/postgresql/<version>/bin``)
in a fresh folder, listening only on a unix socket inside that folder (no TCP port, so nothing
can collide with another cluster), and removes the folder when closed::

    with TemporaryCluster() as cluster:
        log = PostgresEventLog.open(cluster.create_database())

``initdb`` refuses to run as root, so under root the binaries run as the ``postgres`` system user,
which then owns the folder. The server's ``fsync`` stays on: benchmarks measure real commits.

A process that dies without closing its cluster (SIGKILL, SIGTERM, a CI job's timeout) does not
leave the server running: a small watchdog process, started with the cluster in a session of its
own, waits for its owner's pipe to close (the owner's exit closes it, however it ends), then
stops the server (``pg_ctl stop -m immediate``) and removes the folder.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from ctxledger.errors import StorageError

__all__ = ["TemporaryCluster", "find_server_binaries"]

_PORT = 5432  # only names the socket file: the socket lives in the cluster's private folder
_SUPERUSER = "postgres"

# The watchdog (standard library only, run with ``python -c``): argv is the cluster's folder,
# pg_ctl's path and the keywords that run it as the server's user. It reads its input until the
# owner closes it or dies, then stops the server if it still runs and removes the folder.
_WATCHDOG = """
import json, os, shutil, subprocess, sys
folder, pg_ctl, as_user = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
sys.stdin.buffer.read()
data = os.path.join(folder, "data")
if os.path.exists(os.path.join(data, "postmaster.pid")):
    env = {**os.environ, "HOME": folder, "LC_ALL": "C"}
    try:
        subprocess.run([pg_ctl, "-D", data, "stop", "-w", "-m", "immediate"], cwd=folder,
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=120, **as_user)
    except (OSError, subprocess.SubprocessError):
        pass
shutil.rmtree(folder, ignore_errors=True)
"""


def find_server_binaries() -> Path | None:
    """Return the folder holding ``initdb``, ``pg_ctl`` and ``postgres``, or None if absent.

    Looks on ``PATH`` first, then asks ``pg_config --bindir``, then takes the newest
    ``/usr/lib/postgresql/<version>/bin``.
    """
    found = shutil.which("initdb")
    if found is not None and shutil.which("pg_ctl") is not None:
        return Path(found).resolve().parent
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10
            )
            candidates.append(Path(out.stdout.strip()))
    debian = Path("/usr/lib/postgresql")
    if debian.is_dir():
        versions = sorted(
            (p for p in debian.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)
        )
        candidates += [version / "bin" for version in reversed(versions)]
    for folder in candidates:
        if all((folder / name).is_file() for name in ("initdb", "pg_ctl", "postgres")):
            return folder
    return None


class TemporaryCluster:
    """A PostgreSQL cluster in a temporary folder, started on a private unix socket.

    Args:
        settings: Extra server settings (``postgresql.conf`` names and values).
        bindir: The folder of the server binaries; found by :func:`find_server_binaries`
            when omitted.
        os_user: The system user that runs the server when this process is root.

    Attributes:
        folder: The cluster's folder (data directory, socket and server log).
        bindir: The folder of the server binaries.

    Raises:
        StorageError: The server binaries are missing, or ``initdb`` or the start failed (the
            message quotes the server log).
    """

    def __init__(
        self,
        *,
        settings: Mapping[str, str] | None = None,
        bindir: Path | None = None,
        os_user: str = _SUPERUSER,
    ) -> None:
        found = bindir or find_server_binaries()
        if found is None:
            raise StorageError(
                "PostgreSQL server binaries (initdb, pg_ctl) not found on PATH, "
                "in pg_config --bindir or in /usr/lib/postgresql/*/bin"
            )
        self.bindir = found
        self._as_user: dict[str, Any] = {}
        # Short, under /tmp: a unix socket path must fit in ~100 bytes.
        self.folder = Path(tempfile.mkdtemp(prefix="ctxledger-pg-", dir="/tmp"))
        self._data = self.folder / "data"
        self._running = False
        self._watchdog: subprocess.Popen[bytes] | None = None
        try:
            if os.geteuid() == 0:
                entry = pwd.getpwnam(os_user)
                os.chown(self.folder, entry.pw_uid, entry.pw_gid)
                self._as_user = {
                    "user": entry.pw_uid,
                    "group": entry.pw_gid,
                    "extra_groups": [g.gr_gid for g in grp.getgrall() if os_user in g.gr_mem],
                }
            self._watchdog = self._start_watchdog()
            self._run(
                "initdb",
                "-D",
                str(self._data),
                "-U",
                _SUPERUSER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",  # the cluster is thrown away; the server itself still fsyncs
            )
            conf = {
                "listen_addresses": "''",
                "unix_socket_directories": f"'{self.folder}'",
                "port": str(_PORT),
                "max_connections": "200",
                "fsync": "on",
                "synchronous_commit": "on",
                **(settings or {}),
            }
            with open(self._data / "postgresql.auto.conf", "a", encoding="utf-8") as auto:
                auto.writelines(f"{name} = {value}\n" for name, value in conf.items())
            self.start()
        except BaseException:
            self.close()
            raise

    @property
    def host(self) -> str:
        """The ``host`` to connect to: the folder of the server's unix socket."""
        return str(self.folder)

    @property
    def port(self) -> int:
        """The port that names the socket file."""
        return _PORT

    @property
    def running(self) -> bool:
        """Whether the server was started and not stopped since."""
        return self._running

    def dsn(self, dbname: str = "postgres") -> str:
        """Return a ``postgresql://`` URI for database ``dbname`` of this cluster."""
        return f"postgresql://{_SUPERUSER}@/{dbname}?host={self.folder}&port={_PORT}"

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self._pg_ctl("start", "-w", "-t", "60", "-l", str(self.folder / "server.log"))
        self._running = True

    def stop(self, mode: str = "fast") -> None:
        """Stop the server; ``mode="immediate"`` kills it without a checkpoint (a crash)."""
        self._running = False
        self._pg_ctl("stop", "-w", "-m", mode)

    def create_database(self, name: str | None = None) -> str:
        """Create an empty database (a fresh name unless given) and return its DSN."""
        import psycopg  # the `postgres` extra; imported on use

        name = name or f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')  # the name is ours: no injection
        return self.dsn(name)

    def close(self) -> None:
        """Stop the server (immediately: its data is thrown away), remove the folder and end
        the watchdog."""
        if self._running:
            with contextlib.suppress(StorageError):
                self.stop("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            # Nothing is left for it to do. Killed, not told by closing its input: a child
            # forked from this process (without exec) would hold that pipe open.
            watchdog.kill()
            watchdog.wait()
            assert watchdog.stdin is not None
            with contextlib.suppress(OSError):
                watchdog.stdin.close()

    def _start_watchdog(self) -> subprocess.Popen[bytes] | None:
        """Start the watchdog (see the module docstring); None where no interpreter can be
        started (an embedded Python): the cluster then works without one."""
        pg_ctl, as_user = str(self.bindir / "pg_ctl"), json.dumps(self._as_user)
        try:
            return subprocess.Popen(
                [sys.executable, "-c", _WATCHDOG, str(self.folder), pg_ctl, as_user],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a terminal's Ctrl-C is the owner's to handle
            )
        except OSError:
            return None

    @property
    def watchdog_pid(self) -> int | None:
        """The process id of the watchdog that cleans up if this process dies (None once
        closed, or where none could start)."""
        return None if self._watchdog is None else self._watchdog.pid

    def __enter__(self) -> TemporaryCluster:
        """Return the running cluster; it is closed when the block ends."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the cluster."""
        self.close()

    def _pg_ctl(self, *args: str) -> None:
        self._run("pg_ctl", "-D", str(self._data), *args)

    def _run(self, program: str, *args: str) -> None:
        env = {**os.environ, "HOME": str(self.folder), "LC_ALL": "C"}
        try:
            subprocess.run(
                [str(self.bindir / program), *args],
                cwd=self.folder,
                env=env,
                capture_output=True,
                text=True,
                check=True,
                timeout=120,
                **self._as_user,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            output = getattr(exc, "stderr", "") or getattr(exc, "stdout", "") or ""
            log = self.folder / "server.log"
            if log.is_file():
                output += "\n" + log.read_text(errors="replace")[-2000:]
            raise StorageError(f"{program} {' '.join(args[:1])} failed: {exc}\n{output}") from exc
