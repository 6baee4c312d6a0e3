"""A session's history and checkpoints, list-like, read back from the log when resumed.

A state resumed from a snapshot holds only the newest, partial history chunk and the active
checkpoint; :class:`History` and :class:`Checkpoints` read the rest back through a reader (see
:mod:`ctxledger.replay.loading`) the first time it is touched, and keep hash chains over their
items so that a snapshot can tell two histories apart without holding them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from typing import overload

import msgspec

from ctxledger.checkpoints import Checkpoint
from ctxledger.errors import EventDecodeError, InvalidSeqError
from ctxledger.messages import Message

__all__ = ["HISTORY_CHUNK", "CheckpointReader", "Checkpoints", "History", "HistoryReader"]

# The digests hash each item's deterministic encoding (the snapshot codec's settings).
_encoder = msgspec.msgpack.Encoder(order="deterministic")

#: Messages per history chunk. A snapshot holds only the last, partial chunk; full chunks are
#: read back from the log's append events when a seq in them is touched (consecutive missing
#: chunks in one read). Chunks are not stored apart, so the size only sets the snapshot's tail
#: (< 256 messages) and the granularity of read-backs.
HISTORY_CHUNK = 256

#: Reads messages ``first..last`` (seqs, inclusive) back from where they were recorded.
HistoryReader = Callable[[int, int], list[Message]]

#: Reads back every checkpoint recorded up to the snapshot a state was resumed from, oldest first.
CheckpointReader = Callable[[], list[Checkpoint]]


class Checkpoints(Sequence[Checkpoint]):
    """A session's checkpoints, oldest first, list-like.

    A state resumed from a snapshot knows only the active checkpoint (and those made since);
    the earlier ones are read back through ``reader`` the first time one is touched. The fold,
    planning and views only need the active one and the count.
    """

    __slots__ = ("_before", "_digest", "_digested", "_earlier", "_known", "_reader")

    def __init__(self) -> None:
        self._before = 0  # checkpoints before _known, not in memory unless _earlier is set
        self._earlier: list[Checkpoint] | None = None
        self._known: list[Checkpoint] = []
        self._reader: CheckpointReader | None = None
        self._digest = b""  # hash chain over the encoded checkpoints ...
        self._digested = 0  # ... of the first this many (caught up lazily, in digest())

    @classmethod
    def resumed(
        cls, count: int, active: Checkpoint | None, digest: bytes, reader: CheckpointReader | None
    ) -> Checkpoints:
        """Return ``count`` checkpoints of which only the last, ``active``, is in memory."""
        if (active is None) != (count == 0):
            raise ValueError(f"{count} checkpoints, active checkpoint {active!r}")
        checkpoints = cls()
        if active is not None:
            checkpoints._before = count - 1
            checkpoints._known = [active]
        checkpoints._reader = reader
        checkpoints._digest = digest
        checkpoints._digested = count
        return checkpoints

    def copy(self) -> Checkpoints:
        """Return an independent copy (checkpoints are immutable and shared)."""
        other = Checkpoints()
        other._before = self._before
        other._earlier = self._earlier
        other._known = self._known.copy()
        other._reader = self._reader
        other._digest = self._digest
        other._digested = self._digested
        return other

    def append(self, checkpoint: Checkpoint) -> None:
        """Record the newest checkpoint."""
        self._known.append(checkpoint)

    def __len__(self) -> int:
        return self._before + len(self._known)

    def _load_earlier(self) -> list[Checkpoint]:
        if self._earlier is None:
            if self._reader is None:
                raise InvalidSeqError("earlier checkpoints are not loaded and have no reader")
            earlier = self._reader()[: self._before]
            if len(earlier) != self._before:
                raise EventDecodeError(
                    f"read back {len(earlier)} earlier checkpoints, expected {self._before}"
                )
            self._earlier = earlier
        return self._earlier

    @overload
    def __getitem__(self, index: int) -> Checkpoint: ...

    @overload
    def __getitem__(self, index: slice) -> list[Checkpoint]: ...

    def __getitem__(self, index: int | slice) -> Checkpoint | list[Checkpoint]:
        if isinstance(index, slice):
            return list(self)[index]
        length = len(self)
        if index < 0:
            index += length
        if not 0 <= index < length:
            raise IndexError("checkpoint index out of range")
        if index >= self._before:
            return self._known[index - self._before]
        return self._load_earlier()[index]

    def __iter__(self) -> Iterator[Checkpoint]:
        if self._before:
            yield from self._load_earlier()
        yield from self._known

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Checkpoints | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Checkpoints(count={len(self)})"

    def digest(self) -> bytes:
        """Return the hash chain over every checkpoint: equal sequences, equal digests."""
        while self._digested < len(self):
            encoded = _encoder.encode(self[self._digested])
            self._digest = hashlib.blake2b(self._digest + encoded, digest_size=16).digest()
            self._digested += 1
        return self._digest


class History(Sequence[Message]):
    """A session's messages, list-like: ``history[i].seq == i + 1``.

    Kept in chunks of :data:`HISTORY_CHUNK` messages. A state decoded from a snapshot knows only
    the last, partial chunk; the full chunks before it are read through ``reader`` the first time
    a seq in them is touched, and then kept. Full chunks never change (messages are immutable).
    """

    __slots__ = ("_chunks", "_digest", "_digested", "_length", "_reader", "_tail")

    def __init__(self) -> None:
        self._chunks: list[list[Message] | None] = []  # full chunks; None = not read yet
        self._tail: list[Message] = []
        self._length = 0
        self._reader: HistoryReader | None = None
        self._digest = b""  # hash chain over the encoded full chunks ...
        self._digested = 0  # ... of the first this many (caught up lazily, in digest())

    @classmethod
    def resumed(
        cls, length: int, tail: list[Message], digest: bytes, reader: HistoryReader | None
    ) -> History:
        """Return a history of ``length`` messages whose full chunks are read lazily."""
        history = cls()
        full = length // HISTORY_CHUNK
        if len(tail) != length - full * HISTORY_CHUNK:
            raise ValueError(f"history tail holds {len(tail)} messages, length is {length}")
        history._chunks = [None] * full
        history._tail = list(tail)
        history._length = length
        history._reader = reader
        history._digest = digest
        history._digested = full
        return history

    def copy(self) -> History:
        """Return an independent copy (chunks and messages are immutable and shared)."""
        other = History()
        other._chunks = self._chunks.copy()
        other._tail = self._tail.copy()
        other._length = self._length
        other._reader = self._reader
        other._digest = self._digest
        other._digested = self._digested
        return other

    def digest(self) -> bytes:
        """Return the hash chain over every full chunk: equal histories, equal digests.

        Chunks filled since the last call are hashed now (they are in memory: a resumed history
        starts with its snapshot's digest), so the fold itself never encodes a message.
        """
        while self._digested < len(self._chunks):
            encoded = _encoder.encode(self._chunk(self._digested))
            self._digest = hashlib.blake2b(self._digest + encoded, digest_size=16).digest()
            self._digested += 1
        return self._digest

    @property
    def tail(self) -> list[Message]:
        """The messages after the last full chunk (what a snapshot stores)."""
        return self._tail

    def append(self, message: Message) -> None:
        """Append the next message (the caller checks its seq)."""
        tail = self._tail
        tail.append(message)
        self._length += 1
        if len(tail) == HISTORY_CHUNK:
            self._chunks.append(tail)
            self._tail = []

    def __len__(self) -> int:
        return self._length

    def _chunk(self, number: int) -> list[Message]:
        chunks = self._chunks
        if number == len(chunks):
            return self._tail
        chunk = chunks[number]
        if chunk is None:
            self._fill(number, number + 1)
            chunk = chunks[number]
            assert chunk is not None
        return chunk

    def _fill(self, start: int, stop: int) -> None:
        """Read back the missing full chunks ``start <= number < stop``, one read per run."""
        chunks = self._chunks
        stop = min(stop, len(chunks))
        number = start
        while number < stop:
            if chunks[number] is not None:
                number += 1
                continue
            end = number
            while end < stop and chunks[end] is None:
                end += 1
            first = number * HISTORY_CHUNK + 1
            if self._reader is None:
                raise InvalidSeqError(f"messages {first}.. are not loaded and have no reader")
            messages = self._reader(first, end * HISTORY_CHUNK)
            if len(messages) != (end - number) * HISTORY_CHUNK or messages[0].seq != first:
                raise EventDecodeError(
                    f"history chunks from seq {first} read back {len(messages)} messages"
                )
            for index in range(number, end):
                offset = (index - number) * HISTORY_CHUNK
                chunks[index] = messages[offset : offset + HISTORY_CHUNK]
            number = end

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._length)
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            out: list[Message] = []
            if start < stop:
                self._fill(start // HISTORY_CHUNK, (stop - 1) // HISTORY_CHUNK + 1)
            while start < stop:
                number, offset = divmod(start, HISTORY_CHUNK)
                chunk = self._chunk(number)
                take = min(stop - start, len(chunk) - offset)
                out.extend(chunk[offset : offset + take])
                start += take
            return out
        length = self._length
        if index < 0:
            index += length
        if not 0 <= index < length:
            raise IndexError("history index out of range")
        number, offset = divmod(index, HISTORY_CHUNK)
        return self._chunk(number)[offset]

    def __iter__(self) -> Iterator[Message]:
        self._fill(0, len(self._chunks))
        for number in range(len(self._chunks)):
            yield from self._chunk(number)
        yield from self._tail

    def __eq__(self, other: object) -> bool:
        if isinstance(other, History | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"History(length={self._length}, loaded={self.loaded_chunks()})"

    def loaded_chunks(self) -> int:
        """Return how many full chunks are in memory."""
        return sum(chunk is not None for chunk in self._chunks)
