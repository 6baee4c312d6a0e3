"""The host's own event loop, for coroutine summarisers asked for by threads."""

from __future__ import annotations

import asyncio
import threading

__all__ = ["HostLoop"]


class HostLoop:
    """The host's own event loop, started on first use, for coroutine summarisers asked for by
    threads (kept apart from the Host so that the threads never hold the Host itself)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def get(self) -> asyncio.AbstractEventLoop:
        """Return the loop, starting it (on a daemon thread) if need be."""
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="ctxledger-loop", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def stop(self) -> None:
        """Stop the loop if it was started (waiting at most 5 s for it)."""
        with self._lock:
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        if not thread.is_alive():
            loop.close()
