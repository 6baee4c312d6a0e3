"""Windowed indices of a session: what precedes the active checkpoint stays in the log.

A session's indices (round starts, cut points, tool-result seqs, tool-call ids and their answers)
grow with every message, but planning and projection only look at the part after the active
checkpoint. So each index keeps in memory only its entries after a *base* seq (the message
before the active checkpoint's ``retain_from_seq``), plus a few before it (:data:`SLACK`): the
older entries are counted, and rebuilt from history (``SessionState`` supplies the reader) the
first time one is touched. A snapshot stores what is in memory, so its size no longer grows
with the session.

Tool-call ids before the base are kept as 4-byte hashes (in seq order), so that a reused id is
still refused without reading history back: a hash hit is confirmed against the real ids. Their
answers are only counted: they are looked up by id in rare paths (an old pinned exchange).
"""

from __future__ import annotations

import zlib
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from typing import overload

from ctxledger.errors import EventDecodeError, InvalidSeqError

__all__ = ["HASH_SIZE", "SLACK", "SeqList", "SeqMap", "id_hash"]

#: Entries at or before the base kept in memory by each sorted index, so that the last rounds and
#: tool results before a fresh checkpoint are at hand without reading history back.
SLACK = 64


#: Bytes of an :func:`id_hash`.
HASH_SIZE = 4


def id_hash(call_id: str) -> bytes:
    """The 4-byte hash (CRC-32) a tool-call id before the base is remembered by.

    Only a filter: a match is confirmed against the real ids, read back from history.
    """
    return zlib.crc32(call_id.encode()).to_bytes(HASH_SIZE, "big")


def _seq_then_id(entry: tuple[str, int]) -> tuple[int, str]:
    return entry[1], entry[0]


class SeqList(Sequence[int]):
    """A sorted list of seqs of which only the newest are in memory.

    ``items`` holds the entries after the base and up to :data:`SLACK` before it; ``before``
    counts the older ones, which ``load`` reads back (all entries, ascending) when one is touched.
    The fold appends to ``items`` directly.
    """

    __slots__ = ("before", "items", "load")

    def __init__(
        self,
        items: list[int] | None = None,
        before: int = 0,
        load: Callable[[], list[int]] | None = None,
    ) -> None:
        self.items: list[int] = [] if items is None else items
        self.before = before
        self.load = load

    def copy(self) -> SeqList:
        """Return an independent copy."""
        return SeqList(self.items.copy(), self.before, self.load)

    def append(self, seq: int) -> None:
        """Append a seq greater than every entry."""
        self.items.append(seq)

    def forget(self, base: int) -> None:
        """Drop from memory the entries ``<= base`` but the last :data:`SLACK` of them."""
        drop = bisect_right(self.items, base) - SLACK
        if drop > 0:
            del self.items[:drop]
            self.before += drop

    def window(self, base: int) -> tuple[int, list[int]]:
        """``(before, items)`` as :meth:`forget` would leave them: what a snapshot stores."""
        drop = max(0, bisect_right(self.items, base) - SLACK)
        return self.before + drop, self.items[drop:]

    def _all(self) -> list[int]:
        if self.before:
            if self.load is None:
                raise InvalidSeqError("index entries before the base are not loaded, no reader")
            older = self.load()[: self.before]
            if len(older) != self.before or (self.items and older and older[-1] >= self.items[0]):
                raise EventDecodeError(
                    f"read back {len(older)} index entries, expected {self.before}"
                )
            self.items[:0] = older
            self.before = 0
        return self.items

    def __len__(self) -> int:
        return self.before + len(self.items)

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> list[int]: ...

    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if start >= self.before and step == 1:
                return self.items[start - self.before : stop - self.before]
            return self._all()[index]
        if index < 0:
            index += len(self)
        if index >= self.before:
            return self.items[index - self.before]
        if index < 0:
            raise IndexError("index out of range")
        return self._all()[index]

    def __iter__(self) -> Iterator[int]:
        return iter(self._all())

    def bisect_left(self, seq: int) -> int:
        """The position of the first entry ``>= seq``."""
        items = self.items
        if not self.before or (items and seq > items[0]):
            return self.before + bisect_left(items, seq)
        return bisect_left(self._all(), seq)

    def bisect_right(self, seq: int) -> int:
        """The position after the last entry ``<= seq``."""
        items = self.items
        if not self.before or (items and seq >= items[0]):
            return self.before + bisect_right(items, seq)
        return bisect_right(self._all(), seq)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SeqList | list):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SeqList(len={len(self)}, in_memory={len(self.items)})"


class SeqMap:
    """Tool-call id -> seq, of which only the entries after the base are in memory.

    ``older`` counts the entries moved out of the in-memory part by :meth:`forget` (the part a
    snapshot stores). A map resumed from a snapshot has only that part: with ``hashes`` (the
    :func:`id_hash` of each older entry, in (seq, id) order) a lookup reads the older entries
    back through ``load`` only when the id's hash is among them; without, any miss reads them
    back (for a map looked up by id only in rare paths). The older entries read back stay
    cached until the next :meth:`forget`. Only a map without ``load`` keeps the entries it
    forgets in memory (it has no other way to answer for them).
    """

    __slots__ = ("_hash_set", "_hashes", "_old", "_unhashed", "load", "older", "recent")

    def __init__(
        self,
        recent: dict[str, int] | None = None,
        older: int = 0,
        hashes: bytes | None = None,
        load: Callable[[], dict[str, int]] | None = None,
    ) -> None:
        self.recent: dict[str, int] = {} if recent is None else recent
        self.older = older
        self._hashes = None if hashes is None else bytearray(hashes)
        self._unhashed: list[str] = []  # forgotten ids whose hashes are not computed yet
        self.load = load
        self._old: dict[str, int] | None = None if older else {}
        self._hash_set: set[bytes] | None = None

    @property
    def hashes(self) -> bytearray | None:
        """The :func:`id_hash` of each older entry in (seq, id) order; None if not kept.

        Computed when asked for (a snapshot, a lookup), not by :meth:`forget`: a replay that
        takes no snapshot never hashes.
        """
        hashes, unhashed = self._hashes, self._unhashed
        if hashes is not None and unhashed:
            hash_set = self._hash_set
            for call_id in unhashed:
                digest = id_hash(call_id)
                hashes += digest
                if hash_set is not None:
                    hash_set.add(digest)
            unhashed.clear()
        return hashes

    def copy(self) -> SeqMap:
        """Return an independent copy."""
        hashes = self.hashes
        copied = None if hashes is None else bytes(hashes)
        other = SeqMap(self.recent.copy(), self.older, copied, self.load)
        other._old = None if self._old is None else self._old.copy()
        other._hash_set = None if self._hash_set is None else self._hash_set.copy()
        return other

    def __setitem__(self, call_id: str, seq: int) -> None:
        self.recent[call_id] = seq

    def forget(self, base: int) -> None:
        """Move the entries with seqs ``<= base`` out of memory (their hashes stay, if kept).

        ``recent`` must be in seq order (as the fold inserts, and as :meth:`in_seq_order`
        restores after decoding); hashes are added in (seq, id) order, so that equal states
        keep equal hashes. ``recent`` is replaced by a new dict holding the rest: deleting its
        first entries one by one would leave the dict to skip them on every later scan.
        """
        recent = self.recent
        count = 0
        for seq in recent.values():
            if seq > base:
                break
            count += 1
        if not count:
            return
        entries = list(recent.items())
        self.recent = dict(entries[count:])
        moved = sorted(entries[:count], key=_seq_then_id)
        if self._hashes is not None:
            self._unhashed.extend([call_id for call_id, _ in moved])
        if self._old is not None:
            if self.load is None:
                self._old.update(moved)
            else:  # read back when a lookup needs them: memory stays bounded, forget cheap
                self._old = None
        self.older += count

    @staticmethod
    def in_seq_order(entries: dict[str, int]) -> dict[str, int]:
        """``entries`` re-inserted in (seq, id) order (a decoded snapshot has them by id)."""
        return dict(sorted(entries.items(), key=lambda entry: (entry[1], entry[0])))

    def _older(self) -> dict[str, int]:
        if self._old is None:
            if self.load is None:
                raise InvalidSeqError("tool-call ids before the base are not loaded, no reader")
            old = self.load()
            if len(old) != self.older:
                raise EventDecodeError(f"read back {len(old)} tool-call ids, expected {self.older}")
            self._old = old
        return self._old

    def _maybe_old(self, call_id: str) -> bool:
        if self._old is not None:
            return call_id in self._old
        hashes = self.hashes
        if hashes is not None:
            if self._hash_set is None:
                view = bytes(hashes)
                size = HASH_SIZE
                self._hash_set = {view[i : i + size] for i in range(0, len(view), size)}
            if id_hash(call_id) not in self._hash_set:
                return False
        return call_id in self._older()

    def get(self, call_id: str) -> int | None:
        """The seq of ``call_id``, or None."""
        seq = self.recent.get(call_id)
        if seq is None and self._maybe_old(call_id):
            return self._older()[call_id]
        return seq

    def __contains__(self, call_id: object) -> bool:
        return isinstance(call_id, str) and (call_id in self.recent or self._maybe_old(call_id))

    def __len__(self) -> int:
        return len(self.recent) + self.older

    def __iter__(self) -> Iterator[str]:
        yield from self._older()
        yield from self.recent

    def keys(self) -> SeqMap:
        """Self: a collection of the ids (``in`` needs no read-back unless a hash matches)."""
        return self

    def __repr__(self) -> str:
        return f"SeqMap(len={len(self)}, in_memory={len(self.recent)})"
