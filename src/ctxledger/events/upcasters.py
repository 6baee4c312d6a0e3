"""Upcasters: turn events stored under an old tag into the current shape before typed decoding.

A breaking schema change is a new tag plus an upcaster registered under the old tag (DESIGN §3).
An upcaster receives the raw decoded map of a stored event (``{"type": old_tag, ...}``) and returns
a map in a newer shape; chains (``v0 -> v1 -> current``) are followed until the tag is current.
Upcasters run only on the slow path, when the typed fast path meets a tag it does not know.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ctxledger.errors import EventDecodeError, UnknownEventTypeError
from ctxledger.events.types import EVENT_TYPES

__all__ = ["CURRENT_TAGS", "Upcaster", "register_upcaster", "upcast", "upcaster_tags"]

#: A function from the raw map of an old event to the raw map of a newer one.
Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

#: The tag of every current event type.
CURRENT_TAGS: frozenset[str] = frozenset(
    str(event_type.__struct_config__.tag) for event_type in EVENT_TYPES
)

_UPCASTERS: dict[str, Upcaster] = {}


def register_upcaster(old_tag: str) -> Callable[[Upcaster], Upcaster]:
    """Register the decorated function as the upcaster of events stored under ``old_tag``.

    Args:
        old_tag: A tag that older versions wrote and the current vocabulary no longer has.

    Returns:
        A decorator that registers its function and returns it unchanged.

    Raises:
        ValueError: ``old_tag`` is a current tag (it would shadow a live event type) or already
            has an upcaster.
    """

    if old_tag in CURRENT_TAGS:
        raise ValueError(f"{old_tag!r} is a current event tag; upcasters are for old tags")
    if old_tag in _UPCASTERS:
        raise ValueError(f"an upcaster for {old_tag!r} is already registered")

    def decorator(function: Upcaster) -> Upcaster:
        _UPCASTERS[old_tag] = function
        return function

    return decorator


def upcaster_tags() -> frozenset[str]:
    """Return the old tags that have an upcaster."""
    return frozenset(_UPCASTERS)


def upcast(raw: dict[str, Any]) -> dict[str, Any]:
    """Bring the raw map of a stored event up to a current tag.

    Args:
        raw: The decoded map of a stored event, with its tag under ``"type"``.

    Returns:
        The map in the current shape (``raw`` itself when its tag is already current).

    Raises:
        UnknownEventTypeError: The tag (or one an upcaster produced) is neither current nor known
            to an upcaster.
        EventDecodeError: The upcasters loop.
    """
    seen: list[object] = []
    while True:
        tag = raw.get("type")
        if tag in CURRENT_TAGS:
            return raw
        upcaster = _UPCASTERS.get(tag) if isinstance(tag, str) else None
        if upcaster is None:
            raise UnknownEventTypeError(tag)
        if tag in seen:
            raise EventDecodeError(f"upcasters loop: {' -> '.join(map(repr, [*seen, tag]))}")
        seen.append(tag)
        raw = upcaster(dict(raw))


@register_upcaster("message_added_v0")
def _message_added_v0(raw: dict[str, Any]) -> dict[str, Any]:
    """Upcast the pre-release ``message_added_v0``, whose message fields were flat on the event.

    Kept as the worked example of the hook; the golden corpus holds one such record.
    """
    message = {name: value for name, value in raw.items() if name != "type"}
    return {"type": "message_appended", "message": message}
