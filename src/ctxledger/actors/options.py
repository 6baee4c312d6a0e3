"""The :class:`HostOptions` of a :class:`~ctxledger.Host`: its host-level settings in one struct.

A session's policy is its :class:`~ctxledger.Config` (recorded in the log, per session); how one
host runs (durability, pool sizes, eviction, leases) is a :class:`HostOptions`, never recorded.
Objects the host is given (the default Config, the summariser, the tokenizer, the clock and the
id factory) stay keyword arguments of ``Host``/``Host.open``: they are injections, not settings.

Before ``HostOptions`` the same settings were keyword arguments of ``Host.open`` and ``Host``;
they still work, each with a :class:`DeprecationWarning` naming the field to use
(:func:`resolve_options`).
"""

from __future__ import annotations

import os
import secrets
import socket
import warnings
from typing import Any, TypedDict

import msgspec

from ctxledger.actors.arguments import check_count, check_flag, check_seconds
from ctxledger.actors.summary_process import SUPPORTED, in_processes
from ctxledger.config import KeywordsMeta
from ctxledger.errors import InvalidArgumentError
from ctxledger.storage import (
    DEFAULT_LEASE_TTL,
    DURABILITY_MODES,
    Durability,
    EventLog,
    LeaseStore,
    MemoryEventLog,
    check_durability,
)

__all__ = [
    "DEPRECATED_KEYWORDS",
    "HostOptions",
    "LegacyHostKeywords",
    "default_host_id",
    "options_in_force",
    "processes_in_force",
    "resolve_options",
]


def default_host_id() -> str:
    """A host id unique to this process: ``<hostname>-<pid>-<random hex>``."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"


#: The largest ``host_id``, in characters: room for the longest host name (253) in a
#: :func:`default_host_id`, not for a document.
MAX_HOST_ID_CHARS = 512


class _OptionsMeta(KeywordsMeta):
    """Refuses a positional argument or an unknown keyword with an
    :class:`InvalidArgumentError` naming it, as ``Config`` does with a ``ConfigError``."""

    error = InvalidArgumentError
    example = "HostOptions(history_actors=4)"
    noun = "option"


class HostOptions(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, metaclass=_OptionsMeta
):
    """How one host runs: durability, pool sizes, eviction, snapshots and leases (never recorded).

    Every field is checked when the options are built (also when decoded with msgspec); a
    wrong type or a value out of range raises :class:`~ctxledger.errors.InvalidArgumentError`
    (or :class:`~ctxledger.errors.ConfigError` for ``durability``) naming the field; so does a
    positional argument or an unknown keyword. Nothing is clamped. The counts have maximums
    (given below) well above any use, so that a typo cannot start thousands of threads.
    ``Host.options`` returns the options in force, with the ``None`` fields resolved (but
    ``snapshot_interval``, whose ``None`` leaves the interval to each session's Config).

    Attributes:
        durability: How an append reaches the disk: ``"sync"`` (an append that returned is on
            disk), ``"group"`` (same guarantee, batched) or ``"none"`` (unsafe: for tests and
            bulk imports). ``None`` (the default): ``"sync"`` when :meth:`Host.open` opens the
            log; for ``Host(log)``, the mode the log was opened with (a mode set here must
            match it).
        max_active_sessions: Session states kept in memory, host-wide; the least recently used
            idle ones beyond it are evicted (their log stays; they are re-activated on next
            use). Default 1,024; at most 1,000,000.
        history_actors: History actors (the writers, a thread each); sessions are spread over
            them by id. Default 2; at most 64.
        compaction_workers: Summariser calls that can run at once (a thread each). Default 4;
            at most 64.
        projection_actors: Sessions that can be loaded from the log at once (a thread each).
            Default 2; at most 64.
        background_compactions: Background compactions at once, host-wide. Default 4; at most
            1,024.
        host_id: This host's id on a shared log (leases name it): printable text (no NUL, no
            control character, no lone surrogate) of at most 512 characters. ``None`` (the
            default): a fresh :func:`default_host_id`. Give every running host its
            own; a lease also records the process holding it, so a host restarted on the same
            machine takes the leases of its dead predecessor at once, whatever either's id.
        lease_ttl: Seconds a session's lease lasts unless renewed (renewed every third of it);
            a host that dies is taken over this long after its last renewal at most. Default
            10 s.
        lease_wait: Seconds an activation waits at most for a lease another host holds before
            it fails with :class:`~ctxledger.errors.LeaseHeldError`. ``None`` (the default):
            ``2 * lease_ttl + 1`` s, long enough for the lease of a dead host to expire.
        leases: Take session leases: ``None`` (the default) takes them when the log is a
            :class:`~ctxledger.storage.LeaseStore` shared between hosts (PostgreSQL; not the
            in-memory log, which no other process can see); ``True`` on any LeaseStore (an
            error on a log that is none); ``False`` never (one host per database only).
        summary_processes: Worker processes that make the background summaries of the
            built-in offline summariser (:class:`~ctxledger.summarizers.ExtractiveSummarizer`,
            exactly), outside this process's GIL: while one runs on a thread, the agent's calls
            wait behind it (see :mod:`ctxledger.actors.summary_process`); a background summary
            nobody waits for yet waits for a worker to start or be free. ``None`` (the
            default): 1 with that summariser on a POSIX machine of more than one CPU, else 0. 0
            makes them on the compaction threads; at most 64. Another summariser always runs
            on the compaction threads: a number above 0 with one is an error.
        snapshot_interval: Events between the projection snapshots of every session of the
            host (recovery reads at most this many past the newest). An int takes precedence
            over the ``snapshot_interval`` of each session's :class:`~ctxledger.Config` (which
            is recorded all the same). ``None`` (the default): each session's own
            ``Config.snapshot_interval`` (1,000 unless set). At most 2**64 - 1, as in a
            Config.
    """

    durability: Durability | None = None
    max_active_sessions: int = 1024
    history_actors: int = 2
    compaction_workers: int = 4
    projection_actors: int = 2
    background_compactions: int = 4
    host_id: str | None = None
    lease_ttl: float = DEFAULT_LEASE_TTL
    lease_wait: float | None = None
    leases: bool | None = None
    summary_processes: int | None = None
    snapshot_interval: int | None = None

    def __post_init__(self) -> None:
        if self.durability is not None:
            check_durability(self.durability)
        for name, (minimum, maximum) in _COUNTS.items():
            value = getattr(self, name)
            if value is not None or name not in _OPTIONAL:
                _check_range(name, value, minimum, maximum)
        if self.host_id is not None:
            _check_host_id(self.host_id)
        check_seconds("lease_ttl", self.lease_ttl)
        if self.lease_wait is not None:
            check_seconds("lease_wait", self.lease_wait)
        check_flag("leases", self.leases, optional=True)


#: The fields that are counts: their least and greatest values (documented in HostOptions).
_COUNTS = {
    "max_active_sessions": (1, 1_000_000),
    "history_actors": (1, 64),
    "compaction_workers": (1, 64),
    "projection_actors": (1, 64),
    "background_compactions": (1, 1024),
    "summary_processes": (0, 64),
    "snapshot_interval": (1, 2**64 - 1),
}
#: The counts whose None means "derived" (see HostOptions).
_OPTIONAL = frozenset({"summary_processes", "snapshot_interval"})


def _check_range(name: str, value: object, minimum: int, maximum: int) -> None:
    """Check that ``value`` is an int (not a bool) in ``minimum..maximum``.

    Raises:
        InvalidArgumentError: It is not; the error names ``name`` and the range.
    """
    if check_count(name, value, minimum=minimum) > maximum:
        raise InvalidArgumentError(
            name, f"must be at most {maximum:,} (an integer in {minimum}..{maximum:,}), got {value}"
        )


def _check_host_id(host_id: object) -> None:
    """Check that ``host_id`` is printable text of 1 to :data:`MAX_HOST_ID_CHARS` characters.

    Raises:
        InvalidArgumentError: It is not; ``argument`` is ``"host_id"``.
    """
    if not isinstance(host_id, str) or not host_id:
        raise InvalidArgumentError(
            "host_id", f"must be a non-empty string or None, got {host_id!r}"
        )
    if len(host_id) > MAX_HOST_ID_CHARS:
        raise InvalidArgumentError(
            "host_id", f"must be at most {MAX_HOST_ID_CHARS} characters, got {len(host_id):,}"
        )
    if not host_id.isprintable():
        bad = next(index for index, char in enumerate(host_id) if not char.isprintable())
        raise InvalidArgumentError(
            "host_id",
            f"must be printable text (no NUL, control character or lone surrogate): "
            f"{host_id!r} holds {host_id[bad]!r} at index {bad}",
        )


class LegacyHostKeywords(TypedDict, total=False):
    """The deprecated keyword arguments of ``Host``/``Host.open``: :class:`HostOptions` fields."""

    durability: Durability
    max_active_sessions: int
    history_actors: int
    compaction_workers: int
    projection_actors: int
    background_compactions: int
    host_id: str | None
    lease_ttl: float
    lease_wait: float | None
    leases: bool | None


#: Every keyword :func:`resolve_options` still accepts (each a HostOptions field).
DEPRECATED_KEYWORDS = frozenset(LegacyHostKeywords.__annotations__)


def resolve_options(
    options: object, legacy: dict[str, Any], caller: str, *, stacklevel: int = 3
) -> HostOptions:
    """Return the options of a ``Host``/``Host.open`` call given ``options=`` or old keywords.

    Each old keyword emits a :class:`DeprecationWarning` naming the :class:`HostOptions` field
    to use, then maps into it (and is checked like it).

    Args:
        options: The ``options=`` argument (``None``: the defaults).
        legacy: The other keyword arguments of the call.
        caller: ``"Host"`` or ``"Host.open"``, for the messages.
        stacklevel: The warnings' stack level (that of the user's call).

    Raises:
        TypeError: A keyword is neither an argument nor a HostOptions field (as Python would).
        InvalidArgumentError: ``options`` is not a HostOptions, or is given beside an old
            keyword (nothing is opened then); or an old keyword's value is invalid.
        ConfigError: ``durability`` is not a durability mode.
    """
    unknown = sorted(set(legacy) - DEPRECATED_KEYWORDS)
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
    if options is not None and not isinstance(options, HostOptions):
        raise InvalidArgumentError(
            "options", f"expected a ctxledger.HostOptions or None, got {type(options).__name__}"
        )
    if not legacy:
        return options if options is not None else HostOptions()
    if options is not None:
        name = sorted(legacy)[0]
        raise InvalidArgumentError(
            name, f"given beside options=: set it as options=HostOptions({name}=...) instead"
        )
    for name in legacy:
        warnings.warn(
            f"{caller}({name}=...) is deprecated: pass options=HostOptions({name}=...)",
            DeprecationWarning,
            stacklevel=stacklevel,
        )
    return HostOptions(**legacy)


def processes_in_force(options: HostOptions, summarizer: object) -> HostOptions:
    """Return ``options`` with ``summary_processes`` resolved for ``summarizer``.

    Raises:
        InvalidArgumentError: ``summary_processes`` is above 0 and ``summarizer`` is not the
            built-in offline summariser (which alone runs in processes).
    """
    asked = options.summary_processes
    if not in_processes(summarizer):
        if asked:
            raise InvalidArgumentError(
                "summary_processes",
                f"only the built-in ExtractiveSummarizer runs in processes, not "
                f"{type(summarizer).__name__}: leave it None or 0",
            )
        return msgspec.structs.replace(options, summary_processes=0)
    if not SUPPORTED:
        if asked:
            raise InvalidArgumentError(
                "summary_processes", f"worker processes need a POSIX system, not {os.name!r}"
            )
        asked = 0
    elif asked is None:
        asked = 1 if (os.cpu_count() or 1) > 1 else 0
    return msgspec.structs.replace(options, summary_processes=asked)


def options_in_force(options: HostOptions, log: EventLog) -> HostOptions:
    """Return ``options`` for a host on ``log`` with every ``None`` field resolved.

    ``durability`` becomes the log's mode, ``host_id`` a fresh :func:`default_host_id`,
    ``lease_wait`` ``2 * lease_ttl + 1`` and ``leases`` whether this host takes leases.

    Raises:
        InvalidArgumentError: ``durability`` differs from the mode ``log`` was opened with (or
            ``log`` has none), or ``leases=True`` and ``log`` is no LeaseStore.
    """
    durability = getattr(log, "durability", None)
    if durability not in DURABILITY_MODES:  # a backend without modes (the in-memory log)
        durability = None
    if options.durability is not None and options.durability != durability:
        found = f"was opened with {durability!r}" if durability else "has no durability mode"
        raise InvalidArgumentError(
            "durability", f"{options.durability!r} asked, but the {type(log).__name__} {found}"
        )
    is_store = isinstance(log, LeaseStore)
    if options.leases and not is_store:
        raise InvalidArgumentError(
            "leases", f"leases=True needs a LeaseStore log, not {type(log).__name__}"
        )
    lease_ttl = float(options.lease_ttl)
    return msgspec.structs.replace(
        options,
        durability=durability,
        host_id=options.host_id if options.host_id is not None else default_host_id(),
        lease_ttl=lease_ttl,
        lease_wait=2 * lease_ttl + 1.0 if options.lease_wait is None else float(options.lease_wait),
        leases=(is_store and not isinstance(log, MemoryEventLog))
        if options.leases is None
        else options.leases,
    )
