"""A host's life: closed at interpreter exit if the program did not, and warned about if dropped.

A program that opens a :class:`~ctxledger.actors.host.Host` and ends (or raises) without
``close()`` must still exit, with its acknowledged appends on disk. So every thread of a host is
a daemon thread: the interpreter never waits for one. It does wait, as always, for the
program's own (non-daemon) threads, which may still be using the host; once they have ended,
an ``atexit`` handler closes the hosts still open. Closing is what ``close()`` does: batches
already handed to the log are committed and answered, and a summary being written in the
background is abandoned (its ``CompactionStarted`` is recovered as interrupted on the next open,
exactly as after a crash).

A host that is garbage-collected unclosed is closed (on a thread of its own, since the collector
may run on any thread, one of the host's own included) and named in a ``ResourceWarning``, as
Python does for files.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from ctxledger._logging import get_logger

__all__ = ["close_in_background", "track"]

_log = get_logger(__name__)

#: Seconds the exit handler waits for hosts being closed in the background.
EXIT_WAIT = 30.0


class _Closable(Protocol):
    def close(self) -> None: ...


_open: weakref.WeakSet[Any] = weakref.WeakSet()
_closing: set[threading.Thread] = set()
_lock = threading.Lock()


def track(host: _Closable) -> None:
    """Close ``host`` at interpreter exit unless it is closed (or collected) before."""
    with _lock:
        _open.add(host)


def close_in_background(close: Callable[[], None], name: str) -> None:
    """Run ``close`` on a daemon thread of its own (the exit handler waits for it)."""

    def run() -> None:
        try:
            close()
        except Exception:  # a finaliser has nobody to raise to
            _log.exception("host_close_failed", host=name)
        finally:
            with _lock:
                _closing.discard(thread)

    thread = threading.Thread(target=run, name="ctxledger-close", daemon=True)
    with _lock:
        _closing.add(thread)
    try:
        thread.start()
    except RuntimeError:  # no new threads at interpreter shutdown; the exit handler ran already
        with _lock:
            _closing.discard(thread)


def _close_all() -> None:
    with _lock:
        hosts = list(_open)
        closing = list(_closing)
    for host in hosts:
        try:
            host.close()
        except Exception:  # one host's failure must not keep the others open
            _log.exception("host_close_failed", host=repr(host))
    for thread in closing:
        thread.join(EXIT_WAIT)


atexit.register(_close_all)
