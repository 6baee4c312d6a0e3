"""Checking a log: :func:`verify` re-derives every served view and checkpoint and compares.

It reports, never repairs: the log is opened read-only. A salvaged log (``ctxledger salvage``)
holds a ``RecordLost`` where a damaged record was: verify lists each one, and a check that the
loss makes impossible (a view built over the lost message, anything after a lost record that
held no message) is listed with it instead of failing, since the log no longer holds what the
view was made of. The session's stored snapshots are checked too: a damaged one is reported
(the host skips it and folds the events instead), as is one that does not restore the fold it
was taken from.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from ctxledger._arguments import check_callable
from ctxledger.domain import CharTokenizer, Tokenizer
from ctxledger.errors import CtxLedgerError, EventDecodeError, UnknownSessionError
from ctxledger.replay._arguments import check_read
from ctxledger.replay.checks import Mismatch, SessionCheck, fold_with_losses
from ctxledger.replay.damage import read_until_damage
from ctxledger.replay.rebuild import LogSource, open_log
from ctxledger.storage import EventLog

__all__ = ["Mismatch", "SessionCheck", "VerifyReport", "verify"]


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    """The result of :func:`verify`.

    Attributes:
        ok: No mismatch was found.
        sessions: Sessions checked.
        events: Events read.
        views_checked: Served views rebuilt and compared.
        checkpoints_checked: Checkpoint boundaries checked.
        mismatches: Everything that did not match.
        lost: What a salvaged log says it lost: each ``RecordLost`` (kind ``record_lost``),
            and each check it made impossible (its kind, saying why). Not mismatches.
        snapshots_checked: Stored snapshots read and compared with the fold.
    """

    ok: bool
    sessions: int
    events: int
    views_checked: int
    checkpoints_checked: int
    mismatches: list[Mismatch]
    lost: list[Mismatch] = []
    snapshots_checked: int = 0


def verify(
    source: LogSource,
    session_id: str | None = None,
    *,
    tokenizer: Tokenizer | None = None,
    progress: Callable[[str], None] | None = None,
) -> VerifyReport:
    """Verify one session, or every session of a log.

    Checks record checksums, event and message seq density, tool-call pairing, every checkpoint
    boundary (never splitting a tool call, extending the checkpoint that was active), every
    served view (the rebuilt ``view_hash`` must equal the recorded one) and every stored
    snapshot (intact, and restoring the fold at its event). Each session's events before its
    first problem are all checked, so the earliest mismatch of a session marks where what still
    verifies ends. What a salvaged log lost is listed in :attr:`VerifyReport.lost`.

    Args:
        source: An LMDB folder (opened read-only) or an open event log.
        session_id: The session to check; every session when omitted.
        tokenizer: The tokenizer the host used (chars // 3 by default).
        progress: Called with each session id before it is checked.

    Raises:
        UnknownSessionError: ``session_id`` is not in the log.
        InvalidSessionIdError: ``session_id`` is not None or a string.
        InvalidArgumentError: ``source`` is not a folder, a URI or an event log, ``tokenizer``
            is not a Tokenizer, or ``progress`` cannot be called; nothing is opened.
        StorageError: The folder is not an event log.
    """
    check_read(source, session_id, tokenizer=tokenizer, optional_id=True)
    check_callable("progress", progress, optional=True)
    tokenizer = tokenizer or CharTokenizer()
    checks: list[SessionCheck] = []
    snapshots = 0
    with open_log(source) as log:
        sessions = log.sessions() if session_id is None else [session_id]
        if session_id is not None and log.last_seq(session_id) == 0:
            raise UnknownSessionError(f"unknown session {session_id!r}")
        for sid in sessions:
            if progress is not None:
                progress(sid)
            check = SessionCheck(sid, tokenizer, lambda pid, at: fold_with_losses(log, pid, at))
            snapshots += _verify_session(log, check)
            checks.append(check)
    mismatches = [m for check in checks for m in check.mismatches]
    return VerifyReport(
        ok=not mismatches,
        sessions=len(sessions),
        events=sum(check.events for check in checks),
        views_checked=sum(check.views for check in checks),
        checkpoints_checked=sum(check.checkpoints for check in checks),
        mismatches=mismatches,
        lost=[m for check in checks for m in check.lost],
        snapshots_checked=snapshots,
    )


def _verify_session(log: EventLog, check: SessionCheck) -> int:
    """Feed the session's readable events to ``check``; return the snapshots compared."""
    try:
        pending = set(log.snapshot_seqs(check.session_id))
    except CtxLedgerError:
        pending = set()
    compared = 0
    try:
        for seq, event in read_until_damage(log, check.session_id):
            if not check.feed(seq, event):
                return compared
            if seq in pending:
                pending.discard(seq)
                compared += check.check_snapshot(log, seq)
    except EventDecodeError as exc:
        check.report(getattr(exc, "seq", None) or check.previous + 1, "corrupt", str(exc))
    return compared
