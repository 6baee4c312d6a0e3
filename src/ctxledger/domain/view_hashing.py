"""The hash of a model view (``ModelView.view_hash``), made afresh or resumed from the last view.

A served view is recorded with its SHA-256 (``ViewServed.view_hash``), and replay must rebuild
it byte for byte. :func:`view_hash` is the definition (two versions, see its docstring); the
history actor and ``DomainSession`` hash a session's views with what hashing the last one kept
(:func:`kept_hash_v1` for version 1, :func:`kept_hash_v2` for version 2), which gives the same
digest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, NamedTuple

import msgspec

from ctxledger.events._msgpack import array_header
from ctxledger.messages import Message

__all__ = [
    "KEEP_DIGESTS_FROM",
    "KEEP_ENCODINGS_FROM",
    "MARK_EVERY",
    "VIEW_HASH_VERSION",
    "Encodings",
    "Hashed",
    "kept_hash_v1",
    "kept_hash_v2",
    "view_hash",
]

#: The version of :func:`view_hash` the views of a Config built now are hashed with
#: (:attr:`ctxledger.Config.view_hash_version`; a Config recorded before schema 6 keeps 1).
VIEW_HASH_VERSION = 2

_hash_encoder = msgspec.msgpack.Encoder(order="deterministic")
#: What version 2 hashes first (apart from every byte string version 1 hashes, which begin with
#: a msgpack array header).
_V2_TAG = b"ctxledger view hash 2\n"


def view_hash(
    mode: str,
    checkpoint_id: str | None,
    messages: Sequence[Message],
    *,
    version: int = VIEW_HASH_VERSION,
) -> str:
    """Return the stable hash of a view's content: SHA-256 (hex) of its deterministic msgpack.

    Version 2 (a Config of schema 6 on) hashes ``b"ctxledger view hash 2\\n"``, then the
    msgpack of ``mode``, of ``checkpoint_id`` and of each message in turn, then of the messages'
    count: what a view shares with the last one hashed is hashed once, and a step hashes only
    what it adds (``Draft.view``). Version 1 (a Config recorded before schema 6) hashes the
    msgpack of the array ``(mode, checkpoint_id, messages)``, whose count comes first, so every
    view is hashed whole. ``ModelView.view_hash`` is ``view_hash(view.mode,
    view.checkpoint_id, view.messages, version=config.view_hash_version)`` for the session's
    Config in force.

    Raises:
        ValueError: ``version`` is neither 1 nor 2.
    """
    shown = tuple(messages)
    if version == 1:
        return hashlib.sha256(_hash_encoder.encode((mode, checkpoint_id, shown))).hexdigest()
    if version != 2:
        raise ValueError(f"view hash version must be 1 or 2, got {version!r}")
    digest = hashlib.sha256(_v2_head(mode, checkpoint_id))
    # A tuple's msgpack is its array header, then its items' (the encoder is compositional).
    encoded = _hash_encoder.encode(shown)
    digest.update(memoryview(encoded)[len(array_header(len(shown))) :])
    digest.update(_hash_encoder.encode(len(shown)))
    return digest.hexdigest()


def _v2_head(mode: str, checkpoint_id: str | None) -> bytes:
    return _V2_TAG + _hash_encoder.encode(mode) + _hash_encoder.encode(checkpoint_id)


#: The fewest messages of a view whose encodings version 1 keeps for the next (see
#: ``Draft.view``): below it one encoding of the whole view costs less than encoding the
#: messages one by one and joining them (``bench/bench_host.py``'s one session, views of 86
#: messages on average: 436 against 480 steps/s with them kept; 600-message views: the history
#: actor's step 1.38 -> 0.88 ms).
KEEP_ENCODINGS_FROM = 256

#: A view's messages and the encoding of each, kept between views (see :func:`kept_hash_v1`).
Encodings = tuple[tuple[Message, ...], tuple[bytes, ...]]

#: Version 2 keeps the digest every this many messages of a view (see :class:`Hashed`).
MARK_EVERY = 16
#: The fewest messages of a view whose digests version 2 keeps for the next: a step then
#: encodes and hashes only what it added, where hashing the whole view encodes and hashes it
#: all. A step of two messages (``bench/bench_view_hash.py``): resumed 3.3 µs against 4.8 whole
#: at 8 messages, 3.4 against 11.5 at 32, 5.5 against 77 at 256, 7.5 against 150 at 512.
KEEP_DIGESTS_FROM = 8


class Hashed(NamedTuple):
    """What hashing a view with version 2 keeps for the next view of the session (a cache of
    the state, see ``Draft.view``; never changed once made: its digests are copied before they
    are fed). No encoding is kept: a step encodes its new messages, and one that changes a
    message near the end also the few between the mark before it and the change.

    Attributes:
        head: The view's mode and checkpoint id (hashed first).
        shown: Its messages.
        marks: ``marks[j]`` is the digest of the head and the first ``j * MARK_EVERY``
            messages.
        end: The digest of the head and every message (before the count).
    """

    head: tuple[str, str | None]
    shown: tuple[Message, ...]
    marks: tuple[Any, ...]
    end: Any


def kept_hash_v2(
    mode: str, checkpoint_id: str | None, messages: Sequence[Message], kept: Hashed | None
) -> tuple[str, Hashed]:
    """:func:`view_hash` version 2, resuming from the digest ``kept`` has of the messages this
    view begins with (the whole of the last view in a step; else the last mark before the
    first message that differs), and what to keep for the next view."""
    shown = tuple(messages)
    encode = _hash_encoder.encode
    head = (mode, checkpoint_id)
    same = _same_prefix(shown, kept.shown) if kept is not None and kept.head == head else 0
    if kept is not None and same:
        if same == len(kept.shown):
            marks, digest, index = list(kept.marks), kept.end.copy(), same
        else:
            mark = same // MARK_EVERY
            marks = list(kept.marks[: mark + 1])
            digest, index = marks[-1].copy(), mark * MARK_EVERY
    else:
        digest = hashlib.sha256(_v2_head(mode, checkpoint_id))
        marks, index = [digest.copy()], 0
    count = len(shown)
    while index < count:
        stop = min(count, (index // MARK_EVERY + 1) * MARK_EVERY)
        digest.update(b"".join([encode(message) for message in shown[index:stop]]))
        index = stop
        if index % MARK_EVERY == 0:
            marks.append(digest.copy())
    end = digest.copy()
    digest.update(encode(count))
    return digest.hexdigest(), Hashed(head, shown, tuple(marks), end)


def kept_hash_v1(
    mode: str, checkpoint_id: str | None, messages: Sequence[Message], kept: Encodings | None
) -> tuple[str, Encodings]:
    """:func:`view_hash`, reusing the encodings ``kept`` of the last view hashed for the
    messages this view begins with (equal ones: the encoder is deterministic), and the
    encodings to keep for the next.

    The hash covers the msgpack of the whole view, whose array header (the messages' count)
    comes before the messages, so the digest itself cannot be carried over; encoding the
    messages is most of its cost and can. msgpack is compositional: a tuple's encoding is its
    header followed by its items' encodings, so the bytes hashed are those of
    :func:`view_hash`.
    """
    shown = tuple(messages)
    encode = _hash_encoder.encode
    same = _same_prefix(shown, kept[0]) if kept is not None else 0
    if same:
        assert kept is not None
        parts = kept[1][:same] + tuple(encode(message) for message in shown[same:])
    else:
        parts = tuple(encode(message) for message in shown)
    head = b"\x93" + encode(mode) + encode(checkpoint_id) + array_header(len(parts))
    # Fed in two parts: joining them first copies the whole view once more (into fresh pages).
    digest = hashlib.sha256(head)
    digest.update(b"".join(parts))
    return digest.hexdigest(), (shown, parts)


def _same_prefix(shown: tuple[Message, ...], kept: tuple[Message, ...]) -> int:
    """How many first messages ``shown`` and ``kept`` have in common (a masking boundary that
    moved changes a few results near the end; the rest is the same objects, compared at C
    speed, halving the span)."""
    size = min(len(shown), len(kept))
    if shown[:size] == kept[:size]:
        return size
    low, high = 0, size  # shown[:low] == kept[:low], shown[:high] != kept[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if shown[low:middle] == kept[low:middle]:
            low = middle
        else:
            high = middle
    return low
