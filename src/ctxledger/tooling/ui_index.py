"""What the live UI knows about a log: every session's cheap metadata, kept current by following
the log, and a report builder per session being looked at.

Starting costs one ``last_seq`` and one read of the last record per session (no fold), so the
first page of a log of 10,000 sessions is served in well under a second. A thread follows the
log (:func:`ctxledger.storage.tail`, from the position read at start) and keeps each session's
last event seq and last activity current, adding sessions created since. The columns that need
a session's events (messages, checkpoints, view tokens) are read when a page shows the session,
from where they were last read, so they cost nothing for sessions nobody looks at.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ctxledger._logging import get_logger
from ctxledger.domain.cost import Pricing
from ctxledger.errors import CtxLedgerError
from ctxledger.events import (
    CheckpointCreated,
    MessageAppended,
    SessionForked,
    ToolResultSynthesized,
    ViewServed,
)
from ctxledger.storage import EventLog, tail
from ctxledger.tooling.report_data import ReportBuilder

__all__ = ["SessionIndex", "SessionRow"]

_log = get_logger(__name__)
_BUILDERS = 8  # sessions whose report data is kept in memory (least recently shown evicted)


@dataclass
class _Built:
    """A session's report builder and the JSON of its last data."""

    lock: threading.Lock
    builder: ReportBuilder
    encoded: str | None = None
    event_seq: int = -1


@dataclass
class SessionRow:
    """One session as the index lists it.

    Attributes:
        session_id: The session.
        last_seq: Its last event seq (events recorded).
        last_activity: Commit time of its last event (unix seconds).
        messages: The newest message seq (``None`` until the session was shown once).
        checkpoints: Checkpoints the session recorded itself (``None`` until shown).
        view_tokens: Estimate of the last view served (``None`` until shown; 0: none served).
        scanned: The last event seq read for the columns above.
    """

    session_id: str
    last_seq: int
    last_activity: float
    messages: int | None = None
    checkpoints: int | None = None
    view_tokens: int | None = None
    scanned: int = 0

    def as_json(self) -> dict[str, Any]:
        """The row as ``/api/sessions`` lists it."""
        return {
            "session_id": self.session_id,
            "last_seq": self.last_seq,
            "checkpoints": self.checkpoints,
            "view_tokens": self.view_tokens,
            "messages": self.messages,
            "last_activity": self.last_activity,
        }


class SessionIndex:
    """The sessions of a log, their metadata and report builders, shared by the UI's threads.

    Args:
        log: The event log, opened read-only by the caller (and closed by it).
        pricing: Prices the usage shown in reports.
        poll: Seconds between two looks at the log while it is idle.
    """

    def __init__(self, log: EventLog, *, pricing: Pricing | None = None, poll: float = 0.2):
        self.log = log
        self.pricing = pricing
        self._lock = threading.Lock()
        self._rows: dict[str, SessionRow] = {}
        self._builders: OrderedDict[str, _Built] = OrderedDict()
        self._stop = threading.Event()
        position = log.last_position()  # first: what is recorded after it, the tail replays
        for session_id in log.sessions():
            last = log.last_seq(session_id)
            when = 0.0
            if last:
                try:
                    when = log.read(session_id, last, last)[0].timestamp
                except (CtxLedgerError, IndexError):  # a damaged last record: listed all the same
                    when = 0.0
            self._rows[session_id] = SessionRow(session_id, last, when)
        self._thread = threading.Thread(
            target=self._follow, args=(position, poll), name="ctxledger-ui-tail", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop following the log (the log itself is the caller's to close)."""
        self._stop.set()
        self._thread.join(timeout=5)

    def _follow(self, position: int, poll: float) -> None:
        try:
            for record in tail(self.log, position, stop=self._stop, poll=poll):
                with self._lock:
                    row = self._rows.get(record.session_id)
                    if row is None:
                        row = self._rows[record.session_id] = SessionRow(record.session_id, 0, 0.0)
                    row.last_seq = max(row.last_seq, record.seq)
                    row.last_activity = max(row.last_activity, record.timestamp)
        except Exception:  # the UI keeps serving what it has; the reason is logged
            _log.exception("ui_tail_failed")

    def count(self, query: str = "") -> int:
        """Sessions whose id contains ``query``."""
        with self._lock:
            return sum(1 for sid in self._rows if query in sid)

    def page(
        self, *, offset: int = 0, limit: int = 50, query: str = "", sort: str = "activity"
    ) -> tuple[list[SessionRow], int]:
        """One page of sessions (most recently active first, or by id), with every column read,
        and how many match ``query`` in all."""
        with self._lock:
            rows = [row for sid, row in self._rows.items() if query in sid]
        if sort == "id":
            rows.sort(key=lambda row: row.session_id)
        else:
            rows.sort(key=lambda row: (-row.last_activity, row.session_id))
        chosen = rows[offset : offset + limit]
        for row in chosen:
            self._scan(row)
        return chosen, len(rows)

    def row(self, session_id: str) -> SessionRow | None:
        """The session's row, every column read; None for a session the log does not hold."""
        with self._lock:
            row = self._rows.get(session_id)
        if row is None:
            if self.log.last_seq(session_id) == 0:
                return None
            with self._lock:  # recorded since the last look of the follower
                row = self._rows.setdefault(session_id, SessionRow(session_id, 0, 0.0))
        self._scan(row)
        return row

    def _scan(self, row: SessionRow) -> None:
        """Read the session's events since the last scan into the row's columns."""
        with self._lock:
            start = row.scanned + 1
        messages, checkpoints, view = row.messages or 0, row.checkpoints or 0, row.view_tokens or 0
        last, when = row.scanned, row.last_activity
        for record in self.log.iter_events(row.session_id, start):
            event = record.event
            if isinstance(event, MessageAppended | ToolResultSynthesized):
                messages = max(messages, event.message.seq or 0)
            elif isinstance(event, SessionForked):
                messages = max(messages, event.at_seq)
            elif isinstance(event, CheckpointCreated):
                checkpoints += 1
            elif isinstance(event, ViewServed):
                view = event.estimated_tokens
            last, when = record.seq, max(when, record.timestamp)
        with self._lock:
            if last >= row.scanned:
                row.messages, row.checkpoints, row.view_tokens = messages, checkpoints, view
                row.scanned = last
                row.last_seq = max(row.last_seq, last)
                row.last_activity = max(row.last_activity, when)

    def report(self, session_id: str) -> bytes | None:
        """The session's row and report data as JSON (``{..., "report": {...}}``), brought up to
        date; None for an unknown session."""
        row = self.row(session_id)
        if row is None:
            return None
        with self._lock:
            entry = self._builders.get(session_id)
            if entry is None:
                builder = ReportBuilder(self.log, session_id, pricing=self.pricing)
                entry = self._builders[session_id] = _Built(threading.Lock(), builder)
            self._builders.move_to_end(session_id)
            while len(self._builders) > _BUILDERS:
                self._builders.popitem(last=False)
        with entry.lock:  # one fold per session at a time; other sessions are served meanwhile
            entry.builder.catch_up()
            if entry.encoded is None or entry.event_seq != entry.builder.event_seq:
                # Encoded under the lock: the builder's lists grow with its next catch-up.
                body = {**row.as_json(), "report": entry.builder.data()}
                entry.encoded = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
                entry.event_seq = entry.builder.event_seq
            return entry.encoded.encode("utf-8")

    def version(self, session_id: str) -> int | None:
        """The session's last event seq as the follower saw it (None: unknown session)."""
        with self._lock:
            row = self._rows.get(session_id)
            if row is not None:
                return row.last_seq
        last = self.log.last_seq(session_id)
        return last or None
