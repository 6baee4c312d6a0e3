"""The fold: a session's state evolves by one recorded event at a time, deterministically.

Every decision input (config, usage figures, checkpoints, pins, synthesized results) comes from an
event, so replaying a log through :func:`apply` rebuilds the identical state. :func:`apply` is an
exhaustive dispatch table, one small function per event type (mypy checks that each function
takes the type it is filed under; the module refuses to import if an event type has none). Policy
(what a view masks, see :mod:`ctxledger.domain.masking`) is asked, not decided, here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from ctxledger.domain.masking import advance_mask, masked_results
from ctxledger.domain.record import StateRecord, Usage
from ctxledger.domain.usage import Calibration, ReportedUsage
from ctxledger.errors import InvalidSeqError
from ctxledger.events.types import (
    EVENT_TYPES,
    BudgetExhausted,
    CheckpointCreated,
    CheckpointReverted,
    CompactionFailed,
    CompactionStarted,
    ConfigChanged,
    Event,
    EventBase,
    HistoryCleared,
    MessageAppended,
    MessagePinned,
    MessageRetracted,
    RecordLost,
    SessionForked,
    SessionOpened,
    SummaryPrepared,
    TokenizerCalibrated,
    ToolResultSynthesized,
    TranscriptExported,
    UsageReported,
    ViewServed,
)
from ctxledger.messages import Message

__all__ = ["BACKGROUND_BACKOFF", "apply"]

#: Appended messages before a failed background compaction is retried, doubled per consecutive
#: failure (capped at ``BACKGROUND_BACKOFF << 5``).
BACKGROUND_BACKOFF = 4


def apply(state: StateRecord, event: Event) -> None:
    """Evolve ``state`` by one recorded event (an object of no event type is ignored).

    Raises:
        InvalidMessageError: An appended message does not carry the next seq (a gap or a
            repeat in the log).
        InvalidSeqError: A retraction or a clear does not fit the state (a damaged log).
    """
    state.events_applied += 1
    # One dict lookup by exact type (event types are final): a match statement tests the cases
    # in turn, and a failed isinstance on a msgspec Struct costs about 0.1 us, which replay pays
    # per event.
    handler = _HANDLERS.get(type(event))
    if handler is not None:
        handler(state, event)


def _message_appended(state: StateRecord, event: MessageAppended | ToolResultSynthesized) -> None:
    # _append inlined: two events in three are appends, and replay pays for every call.
    message = event.message
    state._append(message)
    if message.role == "tool":
        advance_mask(state)


def _append(state: StateRecord, message: Message) -> None:
    """Append ``message`` (history and indices), then move the re-masking boundary."""
    state._append(message)
    if message.role == "tool":
        advance_mask(state)


def _view_served(state: StateRecord, event: ViewServed) -> None:
    state.last_view_seq = event.through_seq
    state.last_view_hash = event.view_hash
    state.served_masked = masked_results(state)
    state.served_checkpoint_id = event.checkpoint_id
    if event.view_chars:
        state.accounting = msgspec.structs.replace(
            state.accounting, view_seq=event.through_seq, view_chars=event.view_chars
        )


def _usage_reported(state: StateRecord, event: UsageReported) -> None:
    last = len(state.history)
    through = event.through_seq or last
    state.usage = Usage(
        prompt_tokens=event.prompt_tokens,
        completion_tokens=event.completion_tokens,
        through_seq=min(through, last),
        epoch=len(state.checkpoints),
    )
    reported = ReportedUsage(
        prompt_tokens=event.prompt_tokens,
        completion_tokens=event.completion_tokens,
        cached_tokens=event.cached_tokens,
        cache_write_tokens=event.cache_write_tokens,
    )
    accounting = state.accounting
    state.accounting = msgspec.structs.replace(accounting, totals=accounting.totals.add(reported))


def _tokenizer_calibrated(state: StateRecord, event: TokenizerCalibrated) -> None:
    state.accounting = msgspec.structs.replace(
        state.accounting,
        paired_seq=state.accounting.view_seq,
        calibration=Calibration(
            samples=event.samples,
            mean_chars=event.mean_chars,
            mean_tokens=event.mean_tokens,
            m2_chars=event.m2_chars,
            m2_tokens=event.m2_tokens,
            co_moment=event.co_moment,
            chars_per_token=event.chars_per_token,
        ),
    )


def _checkpoint_created(state: StateRecord, event: CheckpointCreated) -> None:
    state.checkpoints.append(event.checkpoint)
    state.checkpoint_seq = state.last_seq
    # No retraction reaches results before the checkpoint in force until now (a revert of the
    # new one restores that one): their boundary moves cannot be undone.
    floor = state.tool_seqs.before
    state.mask_undo = [entry for entry in state.mask_undo if entry[0] > floor]
    state.active_restored = False
    state._advance_index_base(event.checkpoint)
    # A new checkpoint ends any prepared summary: it was activated, or it extends a checkpoint
    # that is no longer the active one.
    state.prepared = None


def _checkpoint_reverted(state: StateRecord, event: CheckpointReverted) -> None:
    # The restored checkpoint is active again (or, when the only one was reverted, none is: the
    # full history is shown, as after a clear of the checkpoints only); index entries the
    # reverted one moved out of memory are read back when touched. No checkpoint is current at
    # this position, so a compaction (say, with a focus) may follow at once. A prepared summary
    # extended the reverted checkpoint: it no longer applies.
    if event.restored is None:
        state.cleared_checkpoints = len(state.checkpoints)
    else:
        state.checkpoints.append(event.restored)
    state.checkpoint_seq = -1
    state.active_restored = True
    state.prepared = None


def _summary_prepared(state: StateRecord, event: SummaryPrepared) -> None:
    if state.background is not None and state.background.compaction_id == event.compaction_id:
        state.background = None
    state.prepared = event
    state.background_failures = 0


def _compaction_failed(state: StateRecord, event: CompactionFailed) -> None:
    state.compactions_failed += 1
    if not event.background:
        return
    if state.background is not None and state.background.compaction_id == event.compaction_id:
        state.background = None
    if event.reason != "interrupted":
        state.background_failures += 1
        backoff = BACKGROUND_BACKOFF << min(state.background_failures - 1, 5)
        state.background_retry_seq = state.last_seq + backoff


def _budget_exhausted(state: StateRecord, event: BudgetExhausted) -> None:
    state.accounting = msgspec.structs.replace(state.accounting, exhausted_cap=event.cap)


def _compaction_started(state: StateRecord, event: CompactionStarted) -> None:
    state.compactions_started += 1
    if event.background:
        state.background = event


def _message_pinned(state: StateRecord, event: MessagePinned) -> None:
    if not state.is_withdrawn(event.seq):  # a withdrawn message stays out of views
        state.pins.add(event.seq)


def _message_retracted(state: StateRecord, event: MessageRetracted) -> None:
    _retract(state, event.seq)
    if event.mask_count is not None:
        state.mask_count = event.mask_count


def _history_cleared(state: StateRecord, event: HistoryCleared) -> None:
    _clear(state, event.through_seq)


def _config_recorded(state: StateRecord, event: ConfigChanged | SessionOpened) -> None:
    # A fork's own SessionOpened follows its parent's prefix: keep that history.
    state.config = event.config
    state.render_cache.clear()


def _session_forked(state: StateRecord, event: SessionForked) -> None:
    state.forked_from = event.parent_id
    state.fork_seq = event.at_seq


def _record_lost(state: StateRecord, event: RecordLost) -> None:
    if event.message is not None:
        # Salvage's stand-in for a lost message: appended like the message it replaces.
        _append(state, event.message)


def _transcript_exported(state: StateRecord, event: TranscriptExported) -> None:
    """A record of an export: nothing a view depends on."""


def _retract(state: StateRecord, seq: int) -> None:
    """Withdraw message ``seq`` (the newest shown): undo what ``StateRecord._index`` entered."""
    try:
        target = state.retraction_target()
    except InvalidSeqError as exc:
        raise InvalidSeqError(f"cannot retract message {seq}: {exc}") from None
    if seq != target:
        raise InvalidSeqError(
            f"session {state.session_id!r}: cannot retract message {seq}, the newest message "
            f"still shown is {target}"
        )
    message = state.history[seq - 1]
    role = message.role
    if role == "tool":
        _drop_last(state.tool_seqs.items, seq)
        undo = state.mask_undo
        while undo and undo[-1][0] > len(state.tool_seqs):
            undo.pop()
        call_id = message.tool_call_id or ""
        if state._answers.recent.get(call_id) == seq:
            del state._answers.recent[call_id]
        call_seq = state._calls.get(call_id)
        if call_seq is not None:  # the call is shown again without its result: open
            for call in state.history[call_seq - 1].tool_calls:
                if call.id == call_id:
                    state._open[call_id] = call
    else:
        _drop_last(state.boundaries.items, seq)
        if role == "assistant":
            state.assistant_count -= 1
            calls = state._calls.recent
            for call in message.tool_calls:  # its results, if any, were retracted before it
                if calls.get(call.id) == seq:
                    del calls[call.id]
                state._open.pop(call.id, None)
        elif role == "user":
            _drop_last(state.user_seqs.items, seq)
            if state.first_user_seq == seq:
                state.first_user_seq = None
        elif role == "system" and state.head and state.head[-1].seq == seq:
            state.head.pop()
    state.pins.discard(seq)
    state.retracted.add(seq)
    if state.prepared is not None and state.prepared.covers_through_seq >= seq:
        state.prepared = None  # it summarises the withdrawn message
    if state.usage is not None and state.usage.through_seq >= seq:
        state.usage = None  # it measured a prompt that showed the message


def _clear(state: StateRecord, through_seq: int) -> None:
    """Withdraw every message up to ``through_seq`` (the newest): views start afresh."""
    if not state.cleared_through <= through_seq == state.last_seq:
        raise InvalidSeqError(
            f"session {state.session_id!r}: a clear must run through the newest message "
            f"{state.last_seq}, not {through_seq}"
        )
    state.cleared_through = through_seq
    state.cleared_checkpoints = len(state.checkpoints)
    state.prepared = None  # it summarises messages no view shows any more
    state.retracted = set()
    state.pins = set()
    state.usage = None
    state._reset_indices()  # open calls closed, ids free again, no head, no rounds
    state.index_base = through_seq
    state.mask_undo = []  # no retraction reaches back past a clear


def _drop_last(items: list[int], seq: int) -> None:
    """Remove ``seq`` from the end of a sorted index list, if it is there."""
    if items and items[-1] == seq:
        items.pop()


_Handler = Callable[[StateRecord, Any], None]
_E = TypeVar("_E", bound=EventBase)


def _on(
    kind: type[_E], handler: Callable[[StateRecord, _E], None], *, keeps_shown: bool = False
) -> tuple[type[EventBase], _Handler]:
    """A table entry; mypy checks that ``handler`` takes events of type ``kind``.

    An event may change how messages already in history are shown (a checkpoint, a pin, a
    retraction, a Config...) unless its entry says ``keeps_shown``: then it only appends
    messages or records something no rendering reads. The others count in
    :attr:`StateRecord.shown_epoch`, which the kept tail of the view is valid for
    (:func:`ctxledger.domain.projection.kept_tail`); the appends, two events in three, pay
    nothing for it.
    """
    if keeps_shown:
        return kind, handler

    def reshaping(state: StateRecord, event: _E) -> None:
        state.shown_epoch += 1
        handler(state, event)

    return kind, reshaping


_HANDLERS: dict[type[EventBase], _Handler] = dict(
    [
        _on(MessageAppended, _message_appended, keeps_shown=True),
        _on(ToolResultSynthesized, _message_appended, keeps_shown=True),
        _on(ViewServed, _view_served, keeps_shown=True),
        _on(UsageReported, _usage_reported, keeps_shown=True),
        _on(TokenizerCalibrated, _tokenizer_calibrated, keeps_shown=True),
        _on(BudgetExhausted, _budget_exhausted, keeps_shown=True),
        _on(CheckpointCreated, _checkpoint_created),
        _on(CheckpointReverted, _checkpoint_reverted),
        _on(CompactionStarted, _compaction_started, keeps_shown=True),
        _on(SummaryPrepared, _summary_prepared, keeps_shown=True),
        _on(CompactionFailed, _compaction_failed, keeps_shown=True),
        _on(MessagePinned, _message_pinned),
        _on(MessageRetracted, _message_retracted),
        _on(HistoryCleared, _history_cleared),
        _on(ConfigChanged, _config_recorded),
        _on(SessionOpened, _config_recorded),
        _on(SessionForked, _session_forked),
        _on(RecordLost, _record_lost),
        _on(TranscriptExported, _transcript_exported, keeps_shown=True),
    ]
)

# Exhaustive: a new event type without a handler fails here, at import, not silently in a fold.
_unhandled = set(EVENT_TYPES) ^ _HANDLERS.keys()
if _unhandled:  # pragma: no cover
    raise TypeError(f"the fold has no handler for {sorted(t.__name__ for t in _unhandled)}")
