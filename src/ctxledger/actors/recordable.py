"""Write only what reads back: the check every rare control event passes before it is committed.

An event is handed to the journal only if the current codec decodes its encoding back into an
equal event. Struct fields are not type-checked when an event is built, so without this a
``Config`` that is not one, a focus that is not text or a count beyond 64 bits would be stored,
serve until the next restart, and then fail every replay of the session (data lost by bad
input). The hot events (appends, served views, usage reports and the calibration that follows
them) skip the round trip: their parts are validated where they are made (a message when it is
built and its metadata by the log; a view by the domain; usage counts at the session's
boundary), and they are most of what a session records.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from ctxledger.config import Config
from ctxledger.errors import ConfigError, CtxLedgerError, InvalidMessageError
from ctxledger.events import (
    ConfigChanged,
    Event,
    MessageAppended,
    SessionOpened,
    TokenizerCalibrated,
    UsageReported,
    ViewServed,
)
from ctxledger.events.codec import decode_payload, encode_payload

__all__ = ["check_recordable"]

_HOT = frozenset({MessageAppended, ViewServed, UsageReported, TokenizerCalibrated})
_CONFIG_EVENTS = (SessionOpened, ConfigChanged)


def check_recordable(events: Iterable[Event]) -> None:
    """Check that each control event among ``events`` reads back as itself.

    Raises:
        ConfigError: A ``SessionOpened`` or ``ConfigChanged`` whose Config would not read back
            (``field`` is ``"config"``).
        InvalidMessageError: Another event that would not read back.
    """
    for event in events:
        if type(event) in _HOT:
            continue
        try:
            encoded = encode_payload(event)
            same = decode_payload(encoded) == event
            reason = "" if same else "it would read back as a different value"
        except (CtxLedgerError, TypeError, ValueError, OverflowError, RecursionError) as exc:
            reason = getattr(exc, "reason", None) or f"{type(exc).__name__}: {exc}"
        if reason:
            raise _unreadable(event, reason)


def _unreadable(event: Event, reason: str) -> CtxLedgerError:
    tag = type(event).__struct_config__.tag
    if isinstance(event, _CONFIG_EVENTS):
        config = event.config
        if not isinstance(config, Config):
            return ConfigError(
                "config", f"expected a ctxledger.Config, got {type(config).__name__}"
            )
        if not _reads_back(config):
            return ConfigError("config", f"this Config cannot be recorded ({reason})")
    return InvalidMessageError(
        f"a {tag!r} event cannot be recorded: {reason}; nothing was written",
        field=str(tag),
        limit="reads back with the current codec",
    )


def _reads_back(config: Config) -> bool:
    try:
        return bool(msgspec.msgpack.decode(msgspec.msgpack.encode(config), type=Config) == config)
    except (msgspec.MsgspecError, TypeError, ValueError, OverflowError, RecursionError):
        return False
