"""One writer per LMDB folder: an advisory lock on a file in the folder, held while writing.

LMDB itself lets any number of processes write one environment (it serialises their
transactions), but a ctxledger writer keeps caches of each session's last seq, and a host is the
single writer of its sessions: a second writing process would make both fail later with version
conflicts. So a writer takes an exclusive ``flock`` on :data:`LOCK_FILE` in the folder before it
opens the environment, writes its pid into the file, and keeps the lock until it closes. The
kernel drops the lock when the process dies, however it dies: a crash never leaves a stale lock,
and the pid left in the file by a dead writer is never reported (only a held lock is). Readers
take no lock, so read-only opens (the CLI, replay, verify) work while a host writes.
"""

from __future__ import annotations

import fcntl
import os

from ctxledger.errors import LogLockedError, StorageError

__all__ = ["LOCK_FILE", "WriterLock"]

#: The lock file in each LMDB folder (next to LMDB's own ``data.mdb`` and ``lock.mdb``).
LOCK_FILE = "writer.lock"


class WriterLock:
    """The exclusive writer lock of one folder, held from :meth:`acquire` until :meth:`release`.

    Args:
        folder: The folder (a real path).
        fd: The open lock file, locked.
    """

    def __init__(self, folder: str, fd: int) -> None:
        self.folder = folder
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, folder: str) -> WriterLock:
        """Lock ``folder`` for writing, or fail at once if another process holds it.

        Raises:
            LogLockedError: Another live process holds the lock; the error names its pid.
            StorageError: The lock file cannot be created or locked.
        """
        path = os.path.join(folder, LOCK_FILE)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot open the writer lock {path!r}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise LogLockedError(folder, holder) from None
        except OSError as exc:
            os.close(fd)
            raise StorageError(f"cannot lock {path!r}: {exc}") from exc
        try:
            # The pid is for the message a refused opener prints; the lock itself is the flock.
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:
            os.close(fd)  # closing drops the lock
            raise StorageError(f"cannot write the writer lock {path!r}: {exc}") from exc
        return cls(folder, fd)

    def release(self) -> None:
        """Drop the lock (closing the file drops it); a second call does nothing."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _read_pid(fd: int) -> int | None:
    """The pid the holder wrote, or None if it has not written it yet (or wrote garbage)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
