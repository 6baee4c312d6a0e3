"""msgpack framing shared by the code that assembles an encoding from encoded parts.

msgpack is compositional: an array's encoding is its header (which holds its length) followed
by its items' encodings, so a caller that keeps the items encoded one by one can make the
encoding of any array of them without encoding the items again.
"""

from __future__ import annotations

__all__ = ["array_header"]


def array_header(length: int) -> bytes:
    """The msgpack header of an array of ``length`` items (the items follow it, encoded)."""
    if length < 16:
        return bytes((0x90 | length,))
    if length < 1 << 16:
        return b"\xdc" + length.to_bytes(2, "big")
    return b"\xdd" + length.to_bytes(4, "big")
