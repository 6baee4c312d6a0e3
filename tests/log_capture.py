"""Capture ctxledger's log events in tests, as ``structlog.testing.capture_logs`` would.

ctxledger logs through the standard library (``ctxledger._logging``): this attaches a handler to
the ``ctxledger`` logger for the duration of the block and turns each record back into the event
dict structlog would have built (``event``, ``log_level`` and the bound values).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ctxledger._logging import _RECORD_FIELDS


class _Collect(logging.Handler):
    def __init__(self, thread: int | None) -> None:
        super().__init__(logging.DEBUG)
        self.events: list[dict[str, Any]] = []
        self.thread = thread

    def emit(self, record: logging.LogRecord) -> None:
        if self.thread is not None and record.thread != self.thread:
            return
        extra = {k: v for k, v in vars(record).items() if k not in _RECORD_FIELDS}
        self.events.append(
            {"event": record.getMessage(), "log_level": record.levelname.lower(), **extra}
        )


@contextmanager
def capture_logs(
    name: str = "ctxledger", *, this_thread: bool = False
) -> Iterator[list[dict[str, Any]]]:
    """Yield a list that collects every event logged under ``name`` inside the block.

    With ``this_thread``, only what the calling thread logs: a host left by an earlier test may
    still log from its own threads (a summary it abandoned, finishing) while the block runs.
    """
    logger = logging.getLogger(name)
    handler = _Collect(threading.get_ident() if this_thread else None)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler.events
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
