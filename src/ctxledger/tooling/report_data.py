"""What a session report shows, derived from the log alone: the data behind ``ctxledger report``
and ``ctxledger ui``.

One pass over the session's own events folds its state exactly as replay does
(:func:`ctxledger.replay.fold_session`, then one event at a time) and records:

- each step (a ``ViewServed``): the newest message, the whole history's size, the estimate the
  policy compared with the threshold, the threshold (and the target, where the Config has one),
  whether the view rebuilt to the recorded hash, and the exact view served (rebuilt before the
  event is folded, as :func:`ctxledger.replay.verify` does, so ``view_at`` of that step);
- each compaction (``CheckpointCreated``): its summary, fact block, covered seqs, tokens, the
  summariser, its wall time, how long the agent waited (below), and the loss audit
  (:func:`ctxledger.domain.audit.audit_checkpoint` on the state right after the checkpoint);
- failed compactions, reverts, usage totals and, given prices, their cost.

Waiting is derived from the log's commit timestamps, since the log does not record it: a
compaction made on the step's path (no prepared summary) made the agent wait from its
``CompactionStarted`` to its ``CheckpointCreated``; a prepared summary recorded before the step
began (the session's last own event before the activation) cost no wait; one recorded after it
made the agent wait at most from that event to the activation (an upper bound: the agent may
have started the step a little later).

The data is a plain JSON-able dict (see :meth:`ReportBuilder.data`), shaped to stay small: every
text once in a table, each view as the runs of message ids that differ from the previous step's.
Texts longer than :data:`CLIP_CHARS` are clipped (head and tail) and listed in ``clipped``.
The builder is incremental: :meth:`ReportBuilder.catch_up` folds the events recorded since.
"""

from __future__ import annotations

from typing import Any

from ctxledger.config import Config
from ctxledger.domain import CharTokenizer, SessionState, Tokenizer, build_view, threshold_for
from ctxledger.domain.audit import audit_checkpoint
from ctxledger.domain.cost import Pricing
from ctxledger.events import (
    CheckpointCreated,
    CheckpointReverted,
    CompactionFailed,
    CompactionStarted,
    SessionForked,
    SessionOpened,
    SummaryPrepared,
    ViewServed,
)
from ctxledger.replay import fold_session
from ctxledger.storage import EventLog, RecordedEvent
from ctxledger.tooling._report_tables import CLIP_CHARS, Tables, runs
from ctxledger.tooling.timeline import LAYER_OF_REASON

__all__ = ["CLIP_CHARS", "FORMAT_VERSION", "KEYFRAME_EVERY", "LOST_SHOWN", "ReportBuilder"]

#: Version of the data format (bumped when a field changes meaning).
FORMAT_VERSION = 1
#: Lost facts listed per compaction (the count is always whole).
LOST_SHOWN = 200
#: Every this many steps a view is stored whole, so the page rebuilds any step quickly.
KEYFRAME_EVERY = 64

_BACKGROUND_EVENTS = (SummaryPrepared,)


def target_tokens(config: Config) -> int | None:
    """The compaction target in tokens, where the Config has one (``Config.compaction_target``,
    or ``Config.sizes()``'s target); None for Configs without it."""
    sizes = getattr(config, "sizes", None)
    if callable(sizes):
        measured = sizes()
        for name in ("target_tokens", "target"):
            value = getattr(measured, name, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    share = getattr(config, "compaction_target", None)
    if isinstance(share, int | float) and not isinstance(share, bool) and share > 0:
        return int(config.context_window * share)
    return None


class ReportBuilder:
    """Folds one session's events into report data; call :meth:`catch_up` again to follow it.

    Args:
        log: The event log (only read).
        session_id: The session.
        tokenizer: Counts tokens; the host's default (``chars // 3``) when omitted.
        pricing: Prices the recorded usage (no cost is shown without it).

    Raises:
        UnknownSessionError: The session has no events (from :meth:`catch_up`).
        CorruptRecordError: A record is damaged (from :meth:`catch_up`).
    """

    def __init__(
        self,
        log: EventLog,
        session_id: str,
        *,
        tokenizer: Tokenizer | None = None,
        pricing: Pricing | None = None,
    ) -> None:
        self.log = log
        self.session_id = session_id
        self.tokenizer = tokenizer or CharTokenizer()
        self.pricing = pricing
        self.event_seq = 0
        self.state: SessionState | None = None
        self._tables = Tables()
        self._steps: dict[str, list[Any]] = {
            key: [] for key in ("seq", "t", "h", "e", "vt", "thr", "tgt", "cp", "ok", "n", "view")
        }
        self._previous_view: list[int] = []
        self._compactions: list[dict[str, Any]] = []
        self._compaction_index: dict[str, int] = {}
        self._failed: list[dict[str, Any]] = []
        self._reverts: list[dict[str, Any]] = []
        self._history_tokens = 0
        self._counted = 0
        self._started: dict[str, tuple[float, bool]] = {}
        self._prepared_at: dict[str, float] = {}
        self._agent_at = 0.0  # commit time of the last own event that is not background work
        self._last_activity = 0.0

    def catch_up(self) -> bool:
        """Fold the session's events recorded since the last call; whether there were any."""
        before = self.event_seq
        for record in self.log.iter_events(self.session_id, self.event_seq + 1):
            self.feed(record)
        if self.state is None:
            fold_session(self.log, self.session_id)  # raises UnknownSessionError
        return self.event_seq > before

    def feed(self, record: RecordedEvent) -> None:
        """Fold one of the session's own events, the next one in order."""
        event = record.event
        state = self.state
        if state is None or isinstance(event, SessionOpened | SessionForked):
            # The opening events (and a fork's parent prefix) fold exactly as recovery does.
            state, _ = fold_session(self.log, self.session_id, through_event_seq=record.seq)
            self.state = state
        else:
            if isinstance(event, ViewServed):
                self._step(state, event, record.timestamp)
            state.apply(event)
        self.event_seq = record.seq
        self._last_activity = record.timestamp
        self._count_history(state)
        if isinstance(event, CompactionStarted):
            self._started[event.compaction_id] = (record.timestamp, event.background)
        elif isinstance(event, SummaryPrepared):
            self._prepared_at[event.compaction_id] = record.timestamp
        elif isinstance(event, CheckpointCreated):
            self._compaction(state, event, record.timestamp)
        elif isinstance(event, CompactionFailed):
            self._failed.append(
                {
                    "step": len(self._steps["seq"]) + 1,
                    "t": record.timestamp,
                    "reason": event.reason,
                    "detail": self._tables.text(event.detail),
                    "background": event.background,
                }
            )
        elif isinstance(event, CheckpointReverted):
            self._reverts.append(
                {
                    "step": len(self._steps["seq"]) + 1,
                    "t": record.timestamp,
                    "checkpoint_id": event.checkpoint_id,
                    "restored_id": None if event.restored is None else event.restored.id,
                    "reason": self._tables.text(event.reason),
                }
            )
        background = isinstance(event, _BACKGROUND_EVENTS) or (
            isinstance(event, CompactionStarted | CompactionFailed) and event.background
        )
        if not background:
            self._agent_at = record.timestamp

    def _count_history(self, state: SessionState) -> None:
        history = state.history
        if len(history) < self._counted:  # never expected (history only grows); stay exact
            self._history_tokens, self._counted = 0, 0
        for index in range(self._counted, len(history)):
            self._history_tokens += self.tokenizer.count_message(history[index])
        self._counted = len(history)

    def _step(self, state: SessionState, event: ViewServed, timestamp: float) -> None:
        view = build_view(state, tokenizer=self.tokenizer)
        ids = [self._tables.message(message, state) for message in view.messages]
        steps = self._steps
        index = len(steps["seq"])
        keep = 0
        if index % KEYFRAME_EVERY:
            previous = self._previous_view
            limit = min(len(previous), len(ids))
            while keep < limit and previous[keep] == ids[keep]:
                keep += 1
        self._previous_view = ids
        config = state.config
        active = state.active_checkpoint
        steps["seq"].append(event.through_seq)
        steps["t"].append(timestamp)
        steps["h"].append(self._history_tokens)
        steps["e"].append(event.estimated_tokens)
        steps["vt"].append(view.view_tokens)
        steps["thr"].append(threshold_for(state))
        steps["tgt"].append(target_tokens(config))
        steps["cp"].append(-1 if active is None else self._compaction_index.get(active.id, -1))
        steps["ok"].append(
            int(view.view_hash == event.view_hash and view.through_seq == event.through_seq)
        )
        steps["n"].append(len(ids))
        steps["view"].append([keep, *runs(ids[keep:])])

    def _compaction(self, state: SessionState, event: CheckpointCreated, timestamp: float) -> None:
        checkpoint = event.checkpoint
        waited, how = self._waited(event, timestamp)
        report = audit_checkpoint(state)
        text = self._tables.text
        kind = LAYER_OF_REASON.get(checkpoint.reason, "auto")
        if event.prepared and kind == "auto":
            kind = "prepared"
        self._compaction_index[checkpoint.id] = len(self._compactions)
        self._compactions.append(
            {
                "id": checkpoint.id,
                "kind": kind,
                "reason": checkpoint.reason,
                "prepared": event.prepared,
                "step": len(self._steps["seq"]) + 1,
                "t": timestamp,
                "first_seq": report.first_seq,
                "covers_through_seq": checkpoint.covers_through_seq,
                "retain_from_seq": checkpoint.retain_from_seq,
                "messages": report.messages,
                "tokens_before": checkpoint.tokens_before,
                "tokens_after": checkpoint.tokens_after,
                "prefix_kept_tokens": checkpoint.prefix_kept_tokens,
                "summarizer": checkpoint.summarizer,
                "seconds": checkpoint.summary_seconds,
                "calls": checkpoint.summarizer_calls,
                "input_chars": checkpoint.input_chars,
                "output_chars": checkpoint.output_chars,
                "waited": waited,
                "waited_how": how,
                "focus": text(checkpoint.focus) if checkpoint.focus else -1,
                "summary": text(checkpoint.summary),
                "facts": text(checkpoint.facts) if checkpoint.facts else -1,
                "previous_id": checkpoint.previous_checkpoint_id or "",
                "audit": {
                    "counts": {k: [c.facts, c.kept, c.lost] for k, c in report.counts.items()},
                    "kept": len(report.kept),
                    "lost_total": len(report.lost),
                    "lost": [[f.seq, f.kind, text(f.text)] for f in report.lost[:LOST_SHOWN]],
                },
            }
        )

    def _waited(self, event: CheckpointCreated, timestamp: float) -> tuple[float, str]:
        started = self._started.get(event.compaction_id)
        if started is not None and not started[1]:
            return max(0.0, timestamp - started[0]), "summariser on the step's path"
        if event.prepared:
            ready = self._prepared_at.get(event.compaction_id)
            if ready is None or ready <= self._agent_at:
                return 0.0, "prepared in the background before the step"
            waited = max(0.0, timestamp - self._agent_at)
            return waited, "waited for the background summary (at most)"
        return event.checkpoint.summary_seconds, "summariser's wall time"

    def data(self) -> dict[str, Any]:
        """The report data as of the last event folded (plain JSON-able values).

        Raises:
            UnknownSessionError: Nothing was folded yet and the session has no events.
        """
        if self.state is None:
            self.catch_up()
        state = self.state
        assert state is not None
        tables = self._tables
        history = [tables.message(message, state) for message in state.history]
        withdrawn = [
            m.seq for m in state.history if m.seq is not None and state.is_withdrawn(m.seq)
        ]
        totals = state.accounting.totals
        usage = None
        if totals.calls:
            usage = {
                "input_tokens": totals.input_tokens,
                "cached_tokens": totals.cached_tokens,
                "cache_write_tokens": totals.cache_write_tokens,
                "output_tokens": totals.output_tokens,
                "calls": totals.calls,
            }
        config = state.config
        compactions = self._compactions
        return {
            "format": FORMAT_VERSION,
            "session_id": self.session_id,
            "event_seq": self.event_seq,
            "last_activity": self._last_activity,
            "forked_from": state.forked_from or "",
            "config": {
                "context_window": config.context_window,
                "compression_threshold": config.compression_threshold,
                "threshold_tokens": config.threshold_tokens,
                "compaction_target": getattr(config, "compaction_target", None),
                "target_tokens": target_tokens(config),
                "prepare_threshold": config.prepare_threshold,
                "threshold_policy": config.threshold_policy,
            },
            "totals": {
                "messages": state.last_seq,
                "steps": len(self._steps["seq"]),
                "history_tokens": self._history_tokens,
                "compactions": len(compactions),
                "failed": len(self._failed),
                "summary_seconds": sum(c["seconds"] for c in compactions),
                "waited_seconds": sum(c["waited"] for c in compactions),
                "usage": usage,
                "cost": self.pricing.cost(totals) if self.pricing and usage else None,
            },
            "texts": tables.texts,
            "clipped": tables.clipped,
            "msgs": tables.messages,
            "history": history,
            "withdrawn": withdrawn,
            "pins": sorted(state.pins),
            "steps": self._steps,
            "keyframe_every": KEYFRAME_EVERY,
            "compactions": compactions,
            "failed": self._failed,
            "reverts": self._reverts,
        }
