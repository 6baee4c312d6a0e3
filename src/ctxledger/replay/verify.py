"""Checking a log: :func:`verify` re-derives every served view and checkpoint and compares.

It reports, never repairs: the log is opened read-only.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from ctxledger.domain import CharTokenizer, SessionState, Tokenizer, build_view, remask_of
from ctxledger.errors import CtxLedgerError, EventDecodeError, UnknownSessionError
from ctxledger.events import (
    CheckpointCreated,
    MessageAppended,
    SessionForked,
    SessionOpened,
    ToolResultSynthesized,
    ViewServed,
)
from ctxledger.replay.damage import read_until_damage
from ctxledger.replay.rebuild import LogSource, open_log
from ctxledger.runtime.loading import fold_session
from ctxledger.storage import EventLog

__all__ = ["Mismatch", "VerifyReport", "verify"]


class Mismatch(msgspec.Struct, frozen=True, kw_only=True):
    """One problem found in a log.

    Attributes:
        session: The session.
        seq: The event seq where it was found.
        kind: ``view_hash``, ``remask`` (a view's recorded re-mask, ``ViewServed.remask``, is
            not the one replay derives), ``checkpoint``, ``seq_gap``, ``message_seq``,
            ``tool_pairing``, ``corrupt`` (a record that cannot be read, at its exact seq; for a
            fork whose parent is damaged before the fork point, at its ``SessionForked`` event)
            or ``structure``.
        expected: What the log records (for ``view_hash``: the recorded hash).
        actual: What replay derives (for ``view_hash``: the rebuilt hash).
        detail: A sentence for people.
    """

    session: str
    seq: int
    kind: str
    expected: str = ""
    actual: str = ""
    detail: str = ""


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    """The result of :func:`verify`.

    Attributes:
        ok: No mismatch was found.
        sessions: Sessions checked.
        events: Events read.
        views_checked: Served views rebuilt and compared.
        checkpoints_checked: Checkpoint boundaries checked.
        mismatches: Everything that did not match.
    """

    ok: bool
    sessions: int
    events: int
    views_checked: int
    checkpoints_checked: int
    mismatches: list[Mismatch]


class _Counts:
    def __init__(self) -> None:
        self.events = 0
        self.views = 0
        self.checkpoints = 0
        self.mismatches: list[Mismatch] = []


def verify(
    source: LogSource,
    session_id: str | None = None,
    *,
    tokenizer: Tokenizer | None = None,
    progress: Callable[[str], None] | None = None,
) -> VerifyReport:
    """Verify one session, or every session of a log.

    Checks record checksums, event and message seq density, tool-call pairing, every checkpoint
    boundary (never splitting a tool call, extending the checkpoint that was active) and every
    served view (the rebuilt ``view_hash`` must equal the recorded one). Each session's events
    before its first problem are all checked, so the earliest mismatch of a session marks where
    what still verifies ends (what ``salvage`` keeps).

    Args:
        source: An LMDB folder (opened read-only) or an open event log.
        session_id: The session to check; every session when omitted.
        tokenizer: The tokenizer the host used (chars // 3 by default).
        progress: Called with each session id before it is checked.

    Raises:
        UnknownSessionError: ``session_id`` is not in the log.
    """
    counts = _Counts()
    tokenizer = tokenizer or CharTokenizer()
    with open_log(source) as log:
        sessions = log.sessions() if session_id is None else [session_id]
        if session_id is not None and log.last_seq(session_id) == 0:
            raise UnknownSessionError(f"unknown session {session_id!r}")
        for sid in sessions:
            if progress is not None:
                progress(sid)
            _verify_session(log, sid, tokenizer, counts)
    return VerifyReport(
        ok=not counts.mismatches,
        sessions=len(sessions),
        events=counts.events,
        views_checked=counts.views,
        checkpoints_checked=counts.checkpoints,
        mismatches=counts.mismatches,
    )


def _verify_session(log: EventLog, sid: str, tokenizer: Tokenizer, counts: _Counts) -> None:
    def report(seq: int, kind: str, detail: str, expected: str = "", actual: str = "") -> None:
        counts.mismatches.append(
            Mismatch(
                session=sid, seq=seq, kind=kind, expected=expected, actual=actual, detail=detail
            )
        )

    state: SessionState | None = None
    opened: SessionOpened | None = None
    previous = 0
    try:
        for seq, event in read_until_damage(log, sid):
            counts.events += 1
            if seq != previous + 1:
                report(seq, "seq_gap", f"events {previous + 1}..{seq - 1} are missing")
            previous = seq
            if state is None:
                if not isinstance(event, SessionOpened):
                    report(seq, "structure", "the log does not start with SessionOpened")
                    return
                opened, state = event, SessionState.new(sid, event.config)
            elif isinstance(event, SessionForked):
                assert opened is not None
                try:
                    state, _ = fold_session(
                        log,
                        event.parent_id,
                        through_event_seq=event.parent_event_seq,
                        use_snapshots=False,
                    )
                except EventDecodeError as exc:
                    report(
                        seq,
                        "corrupt",
                        f"parent {event.parent_id!r} is damaged before the fork point "
                        f"(event {event.parent_event_seq}): {exc}",
                    )
                    return
                state.rebase(sid, opened.config)
            elif isinstance(event, MessageAppended | ToolResultSynthesized):
                _check_message(state, event.message, seq, report)
            elif isinstance(event, CheckpointCreated):
                counts.checkpoints += 1
                _check_checkpoint(state, event, seq, report)
            elif isinstance(event, ViewServed):
                counts.views += 1
                view = build_view(state, tokenizer=tokenizer)
                if view.view_hash != event.view_hash or view.through_seq != event.through_seq:
                    report(
                        seq,
                        "view_hash",
                        f"the view served at message seq {event.through_seq} does not rebuild",
                        expected=event.view_hash,
                        actual=view.view_hash,
                    )
                elif event.remask is not None:
                    # Logs written before the field existed record None: nothing to compare.
                    remask = remask_of(state, view, tokenizer=tokenizer)
                    if remask != event.remask:
                        report(
                            seq,
                            "remask",
                            f"the re-mask recorded with the view at message seq "
                            f"{event.through_seq} does not rebuild",
                            expected=repr(event.remask),
                            actual=repr(remask),
                        )
            try:
                state.apply(event)
            except CtxLedgerError as exc:
                # The fold cannot go on past an impossible event; what made it so is reported.
                if not counts.mismatches or counts.mismatches[-1].seq != seq:
                    report(seq, "structure", f"event cannot be folded: {exc}")
                return
    except EventDecodeError as exc:
        report(getattr(exc, "seq", None) or previous + 1, "corrupt", str(exc))


def _check_message(state: SessionState, message, seq: int, report) -> None:  # type: ignore[no-untyped-def]
    if message.seq != state.last_seq + 1:
        report(seq, "message_seq", f"message seq {message.seq} follows {state.last_seq}")
    if message.role == "tool" and message.tool_call_id not in state.open_tool_calls():
        report(seq, "tool_pairing", f"tool result {message.tool_call_id!r} answers no open call")


def _check_checkpoint(state: SessionState, event: CheckpointCreated, seq: int, report) -> None:  # type: ignore[no-untyped-def]
    checkpoint = event.checkpoint
    active = state.active_checkpoint
    if checkpoint.previous_checkpoint_id != (active.id if active else None):
        report(seq, "checkpoint", f"checkpoint {checkpoint.id} does not extend the active one")
    if not checkpoint.covers_through_seq < checkpoint.retain_from_seq <= state.last_seq + 1:
        report(seq, "checkpoint", f"checkpoint {checkpoint.id} has an impossible range")
        return
    if active is not None and checkpoint.retain_from_seq <= active.retain_from_seq:
        report(seq, "checkpoint", f"checkpoint {checkpoint.id} does not cut after the previous one")
    calls: dict[str, int] = {}
    for message in state.history[checkpoint.retain_from_seq - 1 :]:
        for call in message.tool_calls:
            calls[call.id] = message.seq or 0
        if message.role == "tool" and message.tool_call_id not in calls:
            report(
                seq,
                "checkpoint",
                f"checkpoint {checkpoint.id} splits tool result seq {message.seq} from its call",
            )
            return
