"""Argument checks and helpers shared by every :class:`~ctxledger.storage.EventLog` backend."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import msgspec

from ctxledger.errors import InvalidArgumentError, InvalidMessageError
from ctxledger.events.codec import encode_payload
from ctxledger.events.types import EVENT_TYPES, Event, MessageAppended, ToolResultSynthesized
from ctxledger.messages import check_metadata
from ctxledger.storage.protocol import AppendCallback, RecordedEvent, check_session_id

__all__ = [
    "MAX_SEQ",
    "RecordsCallback",
    "check_append",
    "check_bound",
    "check_limit",
    "check_page",
    "check_range",
    "check_snapshot",
    "encode_checked",
    "recorded_batch",
    "stream_events",
]

_EVENT_CLASSES = tuple(EVENT_TYPES)


def check_append(session_id: str, events: Sequence[Event], expected_seq: int) -> list[Event]:
    """Validate the arguments of ``append`` and return the batch as a list.

    Runs on the caller's thread before anything is queued, so that a request that breaks a limit
    never reaches a shared transaction. Message text was checked when each message was built;
    metadata (a mutable dict of anything) is checked here, where it is about to be stored.

    Raises:
        TypeError: An argument has the wrong type or a batch item is not an event.
        InvalidSessionIdError: ``session_id`` breaks :func:`check_session_id`.
        InvalidMessageError: A message's metadata cannot be encoded.
        ValueError: ``expected_seq`` is negative.
    """
    check_session_id(session_id)
    if isinstance(expected_seq, bool) or not isinstance(expected_seq, int):
        raise TypeError(f"expected_seq must be an int, got {expected_seq!r}")
    if expected_seq < 0:
        raise ValueError(f"expected_seq must be >= 0, got {expected_seq}")
    batch = list(events)
    for index, event in enumerate(batch):
        if not isinstance(event, _EVENT_CLASSES):
            raise TypeError(f"expected an event, got {type(event).__name__}")
        if (type(event) is MessageAppended or type(event) is ToolResultSynthesized) and (
            event.message.metadata
        ):
            where = f"session {session_id!r}, event {index} of the batch"
            check_metadata(event.message.metadata, where)
    return batch


def encode_checked(session_id: str, events: Sequence[Event]) -> list[bytes]:
    """The msgpack payloads of ``events``, or the named error of the first that cannot be encoded.

    Raises:
        InvalidMessageError: An event cannot be encoded (for example text with a lone surrogate
            in a field that is not checked when it is built, such as a summary).
    """
    payloads = []
    for index, event in enumerate(events):
        try:
            payloads.append(encode_payload(event))
        except (TypeError, ValueError, OverflowError) as exc:
            tag = type(event).__struct_config__.tag
            raise InvalidMessageError(
                f"session {session_id!r}, event {index} of the batch ({tag}) cannot be "
                f"encoded: {exc}",
                limit="encodable as msgpack (valid UTF-8 text)",
            ) from exc
    return payloads


#: The largest seq, position or limit a read honours (PostgreSQL's ``bigint``): no log holds
#: an event past it, so a range starting beyond it is empty and larger bounds are this one.
MAX_SEQ = (1 << 63) - 1


def _check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(name, f"must be an int, got {value!r}")
    return value


def check_range(from_seq: int, to_seq: int | None, limit: int | None) -> tuple[int, int | None]:
    """Validate a read range; return ``(first, last)`` with ``1 <= first <= MAX_SEQ``.

    Every backend answers alike for any int: a ``from_seq`` below 1 reads from 1, one past
    :data:`MAX_SEQ` gives the empty range ``(MAX_SEQ, 0)``, and ``to_seq`` is kept within
    ``0..MAX_SEQ`` (``last`` stays None without one). ``limit`` is left to the caller, checked.

    Raises:
        InvalidArgumentError: ``from_seq`` or ``to_seq`` is not an int (a bool is not), or
            ``limit`` is not None or an int of at least 0 (a ``TypeError`` and a ``ValueError``).
    """
    first = _check_int("from_seq", from_seq)
    check_limit(limit)
    if to_seq is not None:
        to_seq = check_bound("to_seq", to_seq)
    if first > MAX_SEQ:
        return MAX_SEQ, 0
    return max(first, 1), to_seq


def check_limit(limit: int | None) -> int | None:
    """Return ``limit`` at most :data:`MAX_SEQ` (None: no limit).

    Raises:
        InvalidArgumentError: ``limit`` is not None or an int of at least 0.
    """
    if limit is None:
        return None
    if _check_int("limit", limit) < 0:
        raise InvalidArgumentError("limit", f"must be >= 0, got {limit}")
    return min(limit, MAX_SEQ)


def check_page(after_position: int, limit: int | None) -> tuple[int, int | None]:
    """Validate a page of the global order; return ``(after_position, limit)`` within bounds.

    Raises:
        InvalidArgumentError: ``after_position`` is not an int, or ``limit`` is not None or an
            int of at least 0.
    """
    return check_bound("after_position", after_position), check_limit(limit)


def check_bound(name: str, value: int) -> int:
    """Return the seq or position ``value`` within ``0..MAX_SEQ``, the range every backend stores.

    Raises:
        InvalidArgumentError: It is not an int (a bool is not); ``argument`` is ``name``.
    """
    return min(max(_check_int(name, value), 0), MAX_SEQ)


def check_snapshot(session_id: str, seq: int) -> None:
    """Validate the position of a snapshot.

    Raises:
        TypeError: ``session_id`` is not a string or ``seq`` not an int.
        InvalidSessionIdError: ``session_id`` breaks :func:`check_session_id`.
        ValueError: ``seq`` is negative.
    """
    check_session_id(session_id)
    if isinstance(seq, bool) or not isinstance(seq, int):
        raise TypeError(f"snapshot seq must be an int, got {seq!r}")
    if seq < 0:
        raise ValueError(f"snapshot seq must be >= 0, got {seq}")


def recorded_batch(
    session_id: str, batch: Sequence[Event], first_seq: int, first_position: int, timestamp: float
) -> list[RecordedEvent]:
    """The records of an appended ``batch``: consecutive seqs and positions, one commit time."""
    records = []
    for index, event in enumerate(batch):  # a loop: a comprehension makes a function, 4 cells
        records.append(
            RecordedEvent(
                session_id=session_id,
                seq=first_seq + index,
                position=first_position + index,
                timestamp=timestamp,
                event=event,
            )
        )
    return records


class RecordsCallback(msgspec.Struct):
    """The group committer's callback for a :meth:`~ctxledger.storage.EventLog.submit` of
    ``batch``: answers ``callback`` with the batch's records, or with the error.

    A Struct rather than a closure: a batch in flight keeps one object alive for the cyclic
    collector, not a function and a cell per variable, and it is built without a call into
    Python (one per append).
    """

    session_id: str
    batch: Sequence[Event]
    callback: AppendCallback

    def __call__(self, outcome: tuple[int, int, float] | None, error: BaseException | None) -> None:
        if error is not None:
            self.callback(None, error)
            return
        assert outcome is not None  # a committed op's outcome: (first seq, position, time)
        self.callback(recorded_batch(self.session_id, self.batch, *outcome), None)


#: Events per :meth:`~ctxledger.storage.EventLog.read` when :func:`stream_events` streams.
STREAM_CHUNK = 512


def stream_events(
    read: Callable[..., list[RecordedEvent]],
    session_id: str,
    from_seq: int = 1,
    to_seq: int | None = None,
) -> Iterator[RecordedEvent]:
    """:meth:`~ctxledger.storage.EventLog.iter_events` of any backend, over its ``read``.

    Reads :data:`STREAM_CHUNK` events at a time (``read(session_id, first, to_seq, limit=...)``),
    so memory stays bounded however long the session is, and each chunk is one short read (a
    read transaction, a query) rather than one held for the whole stream.
    """
    first, _ = check_range(from_seq, to_seq, None)
    while True:
        chunk = read(session_id, first, to_seq, limit=STREAM_CHUNK)
        yield from chunk
        if len(chunk) < STREAM_CHUNK:
            return
        first = chunk[-1].seq + 1
