"""Event storage: the :class:`EventLog` protocol, the in-memory reference, LMDB and PostgreSQL.

:func:`open_log` picks the backend from a target: a ``postgresql://`` URI opens a
:class:`PostgresEventLog` (the ``postgres`` extra, imported on first use), a folder an
:class:`LmdbEventLog`.
"""

from typing import TYPE_CHECKING, Any

from ctxledger.storage._group_commit import queued_commits
from ctxledger.storage._open import LogTarget, describe_target, is_postgres_target, open_log
from ctxledger.storage.copy import CopyReport, copy_log
from ctxledger.storage.leases import DEFAULT_LEASE_TTL, Lease, LeaseStore
from ctxledger.storage.lmdb import DEFAULT_MAP_SIZE, LmdbEventLog
from ctxledger.storage.memory import MemoryEventLog
from ctxledger.storage.protocol import (
    DURABILITY_MODES,
    MAX_SESSION_ID_BYTES,
    AppendCallback,
    Durability,
    EventLog,
    RecordedEvent,
    check_durability,
    check_session_id,
)
from ctxledger.storage.tail import PositionWaiter, tail

if TYPE_CHECKING:
    from ctxledger.storage.postgres import PostgresEventLog

__all__ = [
    "DEFAULT_LEASE_TTL",
    "DEFAULT_MAP_SIZE",
    "DURABILITY_MODES",
    "MAX_SESSION_ID_BYTES",
    "AppendCallback",
    "CopyReport",
    "Durability",
    "EventLog",
    "Lease",
    "LeaseStore",
    "LmdbEventLog",
    "LogTarget",
    "MemoryEventLog",
    "PositionWaiter",
    "PostgresEventLog",
    "RecordedEvent",
    "check_durability",
    "check_session_id",
    "copy_log",
    "describe_target",
    "is_postgres_target",
    "open_log",
    "queued_commits",
    "tail",
]


def __getattr__(name: str) -> Any:
    # psycopg is an extra: import the PostgreSQL backend only when it is asked for.
    if name == "PostgresEventLog":
        from ctxledger.storage.postgres import PostgresEventLog

        return PostgresEventLog
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
