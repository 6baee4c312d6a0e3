"""A small-window session driver shared by the snapshot tests (chunks, windowed indices)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from ctxledger import Config, Message, ToolCall

#: A config that compacts every few steps and snapshots often. The snapshot tests count what a
#: fold reads past the newest snapshot, so the events of a step are kept as they were written
#: for them: no background compaction (its own tests are in test_background.py).
SMALL = Config(
    context_window=1500,
    compression_threshold=0.6,
    min_retain_rounds=1,
    micro_batch=2,
    snapshot_interval=7,
    prepare_threshold=0.0,
)


def ids() -> Callable[[], str]:
    """Deterministic ids for a host: id1, id2, ..."""
    counter = itertools.count(1)
    return lambda: f"id{next(counter)}"


def drive(session: Any, steps: int, *, start: int = 0) -> list[tuple[int, str]]:
    """Run ``steps`` agent steps (a user turn every third, one tool call each); return views.

    The call of step ``n`` has id ``f"{session.id}-{n}"``. It returns once a summary prepared
    in the background meanwhile is recorded, and the snapshots are stored (a quiet point).
    """
    served = []
    for n in range(start, start + steps):
        batch = []
        if n % 3 == 0:
            batch.append(Message.user(f"step {n} " + "u" * 200))
        call = ToolCall(f"{session.id}-{n}", "bash", f'{{"n": {n}}}')
        batch += [Message.assistant(f"trying {n}", [call]), Message.tool("o" * 200, call.id)]
        session.append_many(batch)
        view = session.prepare_step()
        served.append((view.through_seq, view.view_hash))
    session.wait_background()
    return served
