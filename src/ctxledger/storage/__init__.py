"""Event storage: the :class:`EventLog` protocol, the in-memory reference and the LMDB log."""

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

__all__ = [
    "DEFAULT_MAP_SIZE",
    "DURABILITY_MODES",
    "MAX_SESSION_ID_BYTES",
    "AppendCallback",
    "Durability",
    "EventLog",
    "LmdbEventLog",
    "MemoryEventLog",
    "RecordedEvent",
    "check_durability",
    "check_session_id",
]
