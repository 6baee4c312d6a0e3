"""Choosing the backend from a target: a ``postgresql://`` URI or an LMDB folder."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from ctxledger.storage.lmdb import LmdbEventLog
from ctxledger.storage.protocol import Durability

if TYPE_CHECKING:
    from ctxledger.storage.postgres import PostgresEventLog

__all__ = ["LogTarget", "describe_target", "is_postgres_target", "open_log"]

_SCHEMES = ("postgresql://", "postgres://")

#: Where a log lives: a ``postgresql://`` (or ``postgres://``) URI, or an LMDB folder.
LogTarget = str | os.PathLike[str]


def is_postgres_target(target: LogTarget) -> bool:
    """Whether ``target`` names a PostgreSQL database (a ``postgresql://`` or ``postgres://``
    URI) rather than an LMDB folder."""
    return isinstance(target, str) and target.startswith(_SCHEMES)


def describe_target(target: LogTarget) -> str:
    """``target`` for messages: a URI without its password, or the folder."""
    if not is_postgres_target(target):
        return os.fspath(target)
    parts = urlsplit(str(target))
    if parts.password is None:
        return str(target)
    host = parts.netloc.rpartition("@")[2]
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=f"{user}{host}"))


def open_log(
    target: LogTarget,
    *,
    durability: Durability = "sync",
    readonly: bool = False,
    clock: Callable[[], float] = time.time,
) -> LmdbEventLog | PostgresEventLog:
    """Open the event log at ``target``: PostgreSQL for a URI, LMDB (the default) for a folder.

    A URI opens a :class:`~ctxledger.storage.PostgresEventLog` (schema ``ctxledger``; it needs
    the ``postgres`` extra); anything else is a folder, opened as an
    :class:`~ctxledger.storage.LmdbEventLog` and created if missing (unless ``readonly``).

    Args:
        target: A ``postgresql://`` URI or a folder.
        durability: ``"sync"``, ``"group"`` or ``"none"``, as both backends define it.
        readonly: Open for reading only; a missing log is then an error, never created.
        clock: Returns commit timestamps (unix seconds).

    Raises:
        ConfigError: ``durability`` is not a durability mode.
        InvalidArgumentError: A folder that is empty, holds a NUL or is not valid UTF-8
            (nothing is created).
        StorageError: The log cannot be opened (a read-only open of a missing log included).
        ImportError: A URI was given but psycopg is not installed.
    """
    if is_postgres_target(target):
        from ctxledger.storage.postgres import PostgresEventLog

        return PostgresEventLog.open(
            str(target), durability=durability, readonly=readonly, clock=clock
        )
    return LmdbEventLog.open(target, durability=durability, readonly=readonly, clock=clock)
