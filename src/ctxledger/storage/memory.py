"""The in-memory reference :class:`~ctxledger.storage.EventLog`, simple enough to be obvious."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence

from ctxledger.errors import (
    CorruptRecordError,
    CtxLedgerError,
    LeaseHeldError,
    LeaseLostError,
    StorageError,
    UnknownSessionError,
    VersionConflictError,
)
from ctxledger.events.codec import Codec
from ctxledger.events.types import Event
from ctxledger.storage._checks import (
    check_append,
    check_bound,
    check_page,
    check_range,
    check_snapshot,
    encode_checked,
    recorded_batch,
    stream_events,
)
from ctxledger.storage.leases import DEFAULT_LEASE_TTL, Lease, check_lease_request
from ctxledger.storage.protocol import AppendCallback, RecordedEvent

__all__ = ["MemoryEventLog"]



class MemoryEventLog:
    """An :class:`~ctxledger.storage.EventLog` held in memory, for tests and as the reference.

    Nothing survives the process. Snapshots are framed with a checksum like the LMDB backend's,
    so the contract suite can check that a damaged snapshot is skipped. Events are encoded on
    append (and the bytes dropped), so that an event a durable backend could not store is
    refused here too. It is also the reference :class:`~ctxledger.storage.LeaseStore` (leases
    expire by ``clock``).

    Args:
        clock: Returns the commit timestamp (unix seconds); ``time.time`` by default.
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: dict[str, list[RecordedEvent]] = {}
        self._global: list[RecordedEvent] = []
        self._snapshots: dict[str, dict[int, bytes]] = {}
        self._codec = Codec()
        self._leases: dict[str, Lease] = {}
        self._closed = False

    def append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        fence: Lease | None = None,
    ) -> list[RecordedEvent]:
        """Append ``events`` atomically; see :meth:`ctxledger.storage.EventLog.append`.

        With ``fence``, only while that lease is the session's (see
        :meth:`~ctxledger.storage.LeaseStore.append`).
        """
        batch = check_append(session_id, events, expected_seq)
        if fence is not None and fence.session_id != session_id:
            raise ValueError(f"the fence is a lease on {fence.session_id!r}, not {session_id!r}")
        with self._lock:
            self._check_open()
            if fence is not None:
                self._check_fence(fence)
            recorded = self._sessions.get(session_id, [])
            if len(recorded) != expected_seq:
                raise VersionConflictError(session_id, expected_seq, len(recorded))
            if not batch:
                return []
            encode_checked(session_id, batch)  # after the conflict check, as the LMDB log does
            now = self._clock()
            position = len(self._global)
            new = recorded_batch(session_id, batch, expected_seq + 1, position + 1, now)
            self._sessions.setdefault(session_id, recorded).extend(new)
            self._global.extend(new)
            return new

    async def aappend(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        fence: Lease | None = None,
    ) -> list[RecordedEvent]:
        """:meth:`append` for a caller on an event loop (it never blocks for long here)."""
        return self.append(session_id, events, expected_seq=expected_seq, fence=fence)

    def submit(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        callback: AppendCallback,
        fence: Lease | None = None,
    ) -> None:
        """Append at once and call ``callback`` here; see :meth:`EventLog.submit`."""
        batch = check_append(session_id, events, expected_seq)
        try:
            records = self.append(session_id, batch, expected_seq=expected_seq, fence=fence)
        except CtxLedgerError as exc:
            callback(None, exc)
        else:
            callback(records, None)

    def read(
        self,
        session_id: str,
        from_seq: int = 1,
        to_seq: int | None = None,
        *,
        limit: int | None = None,
    ) -> list[RecordedEvent]:
        """Return a range of the session's events; see :meth:`ctxledger.storage.EventLog.read`."""
        first, last = check_range(from_seq, to_seq, limit)
        with self._lock:
            self._check_open()
            recorded = self._sessions.get(session_id, [])
            stop = len(recorded) if last is None else min(last, len(recorded))
            if limit is not None:
                stop = min(stop, first - 1 + limit)
            return recorded[first - 1 : max(stop, first - 1)]

    def iter_events(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None
    ) -> Iterator[RecordedEvent]:
        """Stream the session's events in chunks of 512."""
        return stream_events(self.read, session_id, from_seq, to_seq)

    def iter_bodies(
        self, session_id: str, from_seq: int = 1, to_seq: int | None = None
    ) -> Iterator[tuple[int, Event]]:
        """``(seq, event)`` of the session's events; see :meth:`EventLog.iter_bodies`."""
        for record in self.iter_events(session_id, from_seq, to_seq):
            yield record.seq, record.event

    def last_seq(self, session_id: str) -> int:
        """Return the session's last event seq, 0 if it has none."""
        with self._lock:
            self._check_open()
            return len(self._sessions.get(session_id, ()))

    def sessions(self) -> list[str]:
        """Return every session id in creation order."""
        with self._lock:
            self._check_open()
            return list(self._sessions)

    def read_all(self, after_position: int = 0, *, limit: int | None = None) -> list[RecordedEvent]:
        """Return events of all sessions after ``after_position``, in commit order."""
        start, limit = check_page(after_position, limit)
        with self._lock:
            self._check_open()
            stop = len(self._global) if limit is None else start + limit
            return self._global[start:stop]

    def last_position(self) -> int:
        """Return the position of the last recorded event, 0 for an empty log."""
        with self._lock:
            self._check_open()
            return len(self._global)

    def save_snapshot(self, session_id: str, seq: int, data: bytes) -> None:
        """Store a checksummed snapshot taken after event ``seq`` of ``session_id``."""
        check_snapshot(session_id, seq)
        record = self._codec.frame(bytes(data))
        with self._lock:
            self._check_open()
            if session_id not in self._sessions:
                raise UnknownSessionError(f"no session {session_id!r}")
            self._snapshots.setdefault(session_id, {})[seq] = record

    def snapshot_seqs(self, session_id: str) -> list[int]:
        """Return the seqs of the session's stored snapshots, ascending."""
        with self._lock:
            self._check_open()
            return sorted(self._snapshots.get(session_id, {}))

    def delete_snapshots(self, session_id: str, seqs: Sequence[int]) -> None:
        """Delete the session's snapshots taken after events ``seqs``."""
        with self._lock:
            self._check_open()
            stored = self._snapshots.get(session_id, {})
            for seq in seqs:
                stored.pop(seq, None)

    def load_snapshot(
        self, session_id: str, at_or_before_seq: int | None = None
    ) -> tuple[int, bytes] | None:
        """Return the newest valid snapshot with seq <= the bound; damaged ones are skipped."""
        if at_or_before_seq is not None:
            at_or_before_seq = check_bound("at_or_before_seq", at_or_before_seq)
        with self._lock:
            self._check_open()
            stored = dict(self._snapshots.get(session_id, {}))
        for seq in sorted(stored, reverse=True):
            if at_or_before_seq is not None and seq > at_or_before_seq:
                continue
            try:
                return seq, self._codec.unframe(stored[seq], session_id=session_id, seq=seq)
            except CorruptRecordError:
                continue
        return None

    def acquire_lease(
        self,
        session_id: str,
        host_id: str,
        ttl: float = DEFAULT_LEASE_TTL,
        *,
        wait: float = 0.0,
    ) -> Lease:
        """Take the session's lease; see :meth:`ctxledger.storage.LeaseStore.acquire_lease`."""
        check_lease_request(session_id, host_id, ttl)
        deadline = time.monotonic() + wait
        while True:
            with self._lock:
                self._check_open()
                now = self._clock()
                held = self._leases.get(session_id)
                if held is None or held.expires_at <= now or held.host_id == host_id:
                    lease = self._leases[session_id] = Lease(
                        session_id=session_id,
                        host_id=host_id,
                        epoch=held.epoch + 1 if held is not None else 1,
                        expires_at=now + ttl,
                    )
                    return lease
                left = held.expires_at - now
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LeaseHeldError(session_id, held.host_id, held.epoch, left)
            time.sleep(max(0.001, min(left, remaining, 0.05)))

    def renew_lease(self, lease: Lease, ttl: float = DEFAULT_LEASE_TTL) -> Lease:
        """Extend ``lease``; see :meth:`ctxledger.storage.LeaseStore.renew_lease`."""
        check_lease_request(lease.session_id, lease.host_id, ttl)
        with self._lock:
            self._check_open()
            self._check_fence(lease)
            renewed = self._leases[lease.session_id] = Lease(
                session_id=lease.session_id,
                host_id=lease.host_id,
                epoch=lease.epoch,
                expires_at=self._clock() + ttl,
            )
            return renewed

    def renew_leases(
        self, leases: Sequence[Lease], ttl: float = DEFAULT_LEASE_TTL
    ) -> list[Lease | None]:
        """Renew many leases; see :meth:`ctxledger.storage.LeaseStore.renew_leases`."""
        leases = list(leases)
        for lease in leases:
            check_lease_request(lease.session_id, lease.host_id, ttl)
        if len({lease.session_id for lease in leases}) != len(leases):
            raise ValueError("renew_leases: one lease per session")
        renewed: list[Lease | None] = []
        for lease in leases:
            try:
                renewed.append(self.renew_lease(lease, ttl))
            except LeaseLostError:
                renewed.append(None)
        return renewed

    def release_lease(self, lease: Lease) -> None:
        """Give ``lease`` up; see :meth:`ctxledger.storage.LeaseStore.release_lease`."""
        with self._lock:
            self._check_open()
            held = self._leases.get(lease.session_id)
            if held is not None and (held.host_id, held.epoch) == (lease.host_id, lease.epoch):
                self._leases[lease.session_id] = Lease(
                    session_id=held.session_id,
                    host_id=held.host_id,
                    epoch=held.epoch,
                    expires_at=float("-inf"),
                )

    def current_lease(self, session_id: str) -> Lease | None:
        """Return the session's lease as recorded now (possibly expired), or None."""
        with self._lock:
            self._check_open()
            return self._leases.get(session_id)

    def close(self) -> None:
        """Close the log; later calls raise :class:`~ctxledger.errors.StorageError`."""
        with self._lock:
            self._closed = True

    def _check_fence(self, lease: Lease) -> None:
        held = self._leases.get(lease.session_id)
        if held is None or (held.host_id, held.epoch) != (lease.host_id, lease.epoch):
            raise LeaseLostError(
                lease.session_id,
                lease.host_id,
                lease.epoch,
                held.host_id if held is not None else None,
                held.epoch if held is not None else 0,
            )

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("the event log is closed")
