"""ctxledger's logging: structlog events sent through the standard ``logging`` module.

A library prints nothing unless the application asks. Every ctxledger logger is a structlog
logger over the stdlib logger of the same name (``ctxledger.actors.history``, ...), so
``logging.getLogger("ctxledger").setLevel(...)`` and the application's handlers decide what
appears where; until the application configures logging, a ``NullHandler`` on ``ctxledger`` keeps
even warnings off stderr. structlog's own global configuration is left to the application.

Each event reaches its handlers as one ``LogRecord`` whose message is the event name and whose
attributes hold the bound values (``record.session_id``, ``record.seq``, ...), which
:class:`KeyValueFormatter` writes out for a terminal.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog

__all__ = ["KeyValueFormatter", "get_logger", "log_to_stderr"]

ROOT = "ctxledger"
logging.getLogger(ROOT).addHandler(logging.NullHandler())

_PROCESSORS: list[Any] = [
    structlog.stdlib.filter_by_level,  # drop a disabled level before any work is done
    structlog.stdlib.render_to_log_kwargs,
]
#: The attributes a plain LogRecord has, so that a formatter can tell the bound values apart.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
}


def get_logger(name: str) -> Any:
    """Return the structlog logger of stdlib logger ``name`` (a name under ``ctxledger``)."""
    return structlog.wrap_logger(
        logging.getLogger(name),
        processors=_PROCESSORS,
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


class KeyValueFormatter(logging.Formatter):
    """A formatter that appends a record's bound values as ``key=value`` pairs."""

    def format(self, record: logging.LogRecord) -> str:
        """Format ``record`` as the base formatter does, then add its bound values."""
        text = super().format(record)
        extra = {k: v for k, v in vars(record).items() if k not in _RECORD_FIELDS}
        if not extra:
            return text
        return text + " " + " ".join(f"{key}={value}" for key, value in sorted(extra.items()))


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler that writes to whatever ``sys.stderr`` is when a record comes."""

    @property
    def stream(self) -> Any:
        import sys

        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:  # the base class sets it; stderr is looked up instead
        pass


_handler: logging.Handler | None = None


def log_to_stderr(level: int) -> None:
    """Send ctxledger's events at ``level`` and above to stderr (for an application's ``main``).

    The ``ctxledger`` command and the demo call this; a library user configures logging as
    usual instead. Calling it again replaces the earlier setting.
    """
    global _handler
    logger = logging.getLogger(ROOT)
    if _handler is not None:
        logger.removeHandler(_handler)
    _handler = _Stderr()
    _handler.setFormatter(KeyValueFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    logger.addHandler(_handler)
    logger.setLevel(level)
