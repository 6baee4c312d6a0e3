"""Deadlock guards for tests of calls that must return (never timing assertions)."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from typing import Any

from ctxledger.actors.inline import acting_for

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


def worker_name() -> str:
    """Who is working on this thread: its name, or ``HistoryActor-<n> (inline)`` while it
    carries out a command in the place of history actor ``n`` (:mod:`ctxledger.actors.inline`:
    the caller's thread acting as the session's single writer, under the actor's lock)."""
    number = acting_for()
    if number is not None:
        return f"HistoryActor-{number} (inline on {threading.current_thread().name})"
    return threading.current_thread().name


class LogWriters:
    """Who handed each batch to a log (``log.submit = writers.wrap(log.submit)``): the
    :func:`worker_name` of each call, in order and by session."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.by_session: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def wrap(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(session_id: str, *args: Any, **kwargs: Any) -> Any:
            name = worker_name()
            with self._lock:
                self.names.append(name)
                self.by_session.setdefault(session_id, set()).add(name)
            return method(session_id, *args, **kwargs)

        return recorded


def reap(child: subprocess.Popen[Any]) -> None:
    """End a test's child process: kill it if it still runs, wait for it, close its pipes (in
    the test's ``finally``, so that no child or pipe outlives the test)."""
    if child.poll() is None:
        child.kill()
    child.wait()
    for pipe in (child.stdin, child.stdout, child.stderr):
        if pipe is not None:
            pipe.close()
