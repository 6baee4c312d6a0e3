"""Deadlock guards for tests of calls that must return (never timing assertions)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

#: Seconds a call may take before the test calls it hung.
GUARD = 120.0


def outcome_of(call: Callable[[], Any], name: str = "the call") -> dict[str, Any]:
    """Run ``call`` on a daemon thread; return ``{"value": ...}`` or ``{"error": ...}``.

    Fails the test if the call has not returned after :data:`GUARD` seconds.
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(GUARD)
    assert not thread.is_alive(), f"{name} hung"
    return outcome


def call_in_thread(call: Callable[[], Any]) -> Any:
    """Run ``call`` under the guard; return its value or raise its error."""
    outcome = outcome_of(call)
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def deep_list(levels: int) -> list[Any]:
    """A list nested ``levels`` deep (metadata no encoder can take)."""
    root: list[Any] = []
    node = root
    for _ in range(levels):
        child: list[Any] = []
        node.append(child)
        node = child
    return root
