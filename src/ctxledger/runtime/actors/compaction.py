"""The compaction actor: runs the summariser off the hot path of a session."""

from __future__ import annotations

from typing import Any

import pykka
import structlog

from ctxledger.domain import CompactionPlan, run_summarizer
from ctxledger.summarizers import Summarizer

__all__ = ["CompactionActor"]


class CompactionActor(pykka.ThreadingActor):
    """Calls the summariser for one compaction plan at a time.

    The caller waits with ``summary_timeout``; on a timeout it abandons this actor (its late answer
    is discarded) and starts a fresh one, so a hung summariser never holds a session hostage. The
    thread is a daemon so that a summariser stuck in I/O cannot keep the process alive.
    """

    use_daemon_thread = True

    def __init__(self, session_id: str, summarizer: Summarizer) -> None:
        super().__init__()
        self._session_id = session_id
        self._summarizer = summarizer
        self._log: Any = None

    def on_start(self) -> None:
        self._log = structlog.get_logger().bind(session_id=self._session_id, actor="compaction")

    def summarize(self, plan: CompactionPlan) -> tuple[str | None, str]:
        """Run the summariser for ``plan``; return (summary or None, failure detail)."""
        try:
            summary = run_summarizer(plan, self._summarizer)
        except Exception as exc:  # a user's summariser may raise anything; it must not kill us
            self._log.warning("summarizer_raised", error=repr(exc))
            return None, f"summarizer raised {type(exc).__name__}: {exc}"
        if not summary:
            return None, "summarizer returned no summary"
        return summary, ""
