"""Which summaries have the facts of their covered messages read before the checkpoint needs them.

A checkpoint's fact block (:func:`ctxledger.domain.facts.checkpoint_fact_block`) reads every
message the checkpoint newly covers, ~50 µs a message, on the history actor, while the step that
makes the checkpoint waits (10-20 ms for a summary of a few hundred messages, and every session
of that actor waits behind it). Read ahead on the compaction thread that made the summary, or in
the worker process that made it (:meth:`~ctxledger.actors.summary_process.SummaryProcesses.
summarize` with ``reads``; the host keeps what it sends), they are found in
:func:`~ctxledger.domain.facts.extract_facts`'s memo instead.

That is always done for a foreground summary (its checkpoint is made as soon as it is answered).
For a background summary it is done only for a session that is served views (one only appended
to, an import, activates none: reading ahead for it made ``bench/peers.py``'s sequential
appends' p99 2.3-2.5 ms against 1.6-1.7) and while the host serves few sessions
(:class:`FactWarming`): then nearly every summary prepared ahead is activated soon, by the same
session (one session of ``bench_host.py``'s workload, 300 steps on a fresh host: p99 13.9-15.7
ms against 18.7-19.5 ms). With many sessions most are extended, replaced or outlived before
that, and reading their messages only took the GIL from every session's steps (its open loop of
1,024 sessions, when every background summary was read ahead: p99 34-40 ms against 14-15 ms).
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque

from ctxledger.domain import CompactionPlan
from ctxledger.domain.facts import extract_facts

__all__ = ["FactWarming", "warm_facts"]

#: The latest background jobs whose sessions are counted.
RECENT_JOBS = 32

#: At most this many sessions among them: the host serves few.
FEW_SESSIONS = 2


class FactWarming:
    """Counts the sessions of the latest background jobs; shared by the compaction threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._recent: deque[str] = deque(maxlen=RECENT_JOBS)

    def wanted(
        self, session_id: str, plan: CompactionPlan, *, background: bool, served: bool = True
    ) -> bool:
        """Note a job of ``session_id`` and say whether the facts of ``plan``'s messages are
        read once its summary is made: the plan has a block, and the job is a foreground one,
        or a background one of a session ``served`` a view since its active checkpoint's cut
        (one that is only appended to, an import, activates no summary) while the latest
        background jobs came from :data:`FEW_SESSIONS` sessions at most."""
        if not plan.fact_chars:
            return False
        if not background:
            return True
        with self._lock:
            self._recent.append(session_id)
            return served and len(set(self._recent)) <= FEW_SESSIONS


def warm_facts(plan: CompactionPlan) -> None:
    """Read the facts of ``plan``'s covered messages now, into the memo the checkpoint's block
    reads them from. A failure here is met again, and reported, where the block is made."""
    with contextlib.suppress(Exception):
        extract_facts(plan.covered)
