"""One timer thread for a host: deadlines (summary timeouts, renewals) without a thread each."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable

from ctxledger._logging import get_logger

__all__ = ["Timer"]

_log = get_logger(__name__)


class Timer:
    """Runs callbacks at deadlines on one daemon thread.

    A callback must be quick (it usually tells an actor something); a cancelled or late entry
    costs nothing.
    """

    def __init__(self, name: str = "ctxledger-timer") -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._cancelled: set[int] = set()
        self._ids = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def call_later(self, delay: float, callback: Callable[[], None]) -> int:
        """Run ``callback`` after ``delay`` seconds; return a handle for :meth:`cancel`."""
        handle = next(self._ids)
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + delay, handle, callback))
            self._cond.notify()
        return handle

    def cancel(self, handle: int) -> None:
        """Do not run the callback of ``handle`` (no-op if it already ran)."""
        with self._cond:
            if any(entry[1] == handle for entry in self._heap):
                self._cancelled.add(handle)

    def stop(self) -> None:
        """Stop the thread; callbacks not yet due never run."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    if self._heap:
                        wait = self._heap[0][0] - time.monotonic()
                        if wait <= 0:
                            break
                        self._cond.wait(wait)
                    else:
                        self._cond.wait()
                if self._stopped:
                    return
                _, handle, callback = heapq.heappop(self._heap)
                if handle in self._cancelled:
                    self._cancelled.discard(handle)
                    continue
            try:
                callback()
            except Exception:  # a failing callback must not stop the host's other deadlines
                _log.exception("timer_callback_failed")
