"""What the live UI knows about a log: every session's cheap metadata, kept current by following
the log, and a report builder per session being looked at.

Starting costs the list of session ids and nothing per session (no fold, no read), so the first
page of a log of 10,000 sessions is served in well under a second. The order by activity comes
from reading the log's commit order backwards from its end, one page at a time and only as far
as the pages asked for need; a thread follows the log (:func:`ctxledger.storage.tail`, from the
position read at start) and moves each session that writes to the front, adding sessions
created since. The columns that need a session's events (messages, checkpoints, view tokens,
last seq) are read when a page shows the session, from where they were last read, so they cost
nothing for sessions nobody looks at.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ctxledger._logging import get_logger
from ctxledger.domain.cost import Pricing
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
_BACK_PAGE = 4096  # events per page of the backward scan that orders sessions by activity


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
        self._builders: OrderedDict[str, _Built] = OrderedDict()
        self._stop = threading.Event()
        position = log.last_position()  # first: what is recorded after it, the tail replays
        self._rows = {sid: SessionRow(sid, 0, 0.0) for sid in log.sessions()}
        # Sessions by their newest event, oldest first: the tail moves a session to the end as
        # it writes, the backward scan of the log puts older ones in front as it finds them.
        self._recent: OrderedDict[str, float] = OrderedDict()
        self._back = position  # events at or below this position are not scanned yet
        self._scanning = threading.Lock()
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
                    self._recent[record.session_id] = row.last_activity
                    self._recent.move_to_end(record.session_id)
        except Exception:  # the UI keeps serving what it has; the reason is logged
            _log.exception("ui_tail_failed")

    def _scan_back(self) -> bool:
        """Read one page of the log backwards from where the last one stopped; whether there
        was anything left to read."""
        with self._scanning:
            back = self._back
            if back <= 0:
                return False
            after = max(0, back - _BACK_PAGE)
            page = self.log.read_all(after, limit=back - after)
            with self._lock:
                for record in reversed(page):
                    sid = record.session_id
                    if sid in self._recent:
                        continue
                    self._recent[sid] = record.timestamp
                    self._recent.move_to_end(sid, last=False)
                    row = self._rows.setdefault(sid, SessionRow(sid, 0, 0.0))
                    row.last_activity = max(row.last_activity, record.timestamp)
                    row.last_seq = max(row.last_seq, record.seq)
                self._back = after
            return True

    def count(self, query: str = "") -> int:
        """Sessions whose id contains ``query``."""
        with self._lock:
            return sum(1 for sid in self._rows if query in sid)

    def page(
        self, *, offset: int = 0, limit: int = 50, query: str = "", sort: str = "activity"
    ) -> tuple[list[SessionRow], int]:
        """One page of sessions (most recently active first, or by id), with every column read,
        and how many match ``query`` in all.

        Ordering by activity reads the log backwards only as far as the page needs, once."""
        if sort == "id":
            with self._lock:
                ids = sorted(sid for sid in self._rows if query in sid)
                total = len(ids)
        else:
            wanted = offset + limit
            while True:
                with self._lock:
                    ids = [sid for sid in reversed(self._recent) if query in sid]
                    complete = self._back <= 0
                if len(ids) >= wanted or complete or not self._scan_back():
                    break
            with self._lock:
                total = sum(1 for sid in self._rows if query in sid)
                if complete and len(ids) < total:  # sessions without events: last, by id
                    seen = set(ids)
                    ids += sorted(sid for sid in self._rows if query in sid and sid not in seen)
        with self._lock:
            chosen = [self._rows[sid] for sid in ids[offset : offset + limit]]
        for row in chosen:
            self._scan(row)
        return chosen, total

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
        """The session's last event seq, kept current by the follower (None: unknown session)."""
        with self._lock:
            row = self._rows.get(session_id)
            if row is not None and row.last_seq:
                return row.last_seq
        last = self.log.last_seq(session_id)
        if not last:
            return None
        with self._lock:
            row = self._rows.setdefault(session_id, SessionRow(session_id, 0, 0.0))
            row.last_seq = max(row.last_seq, last)
            return row.last_seq
