"""Old logs are sacred: a log from an earlier version opens, verifies and serves the same views.

``tests/data/log_v0`` was written once by ctxledger 0.1.0 before runtime v2
(``tests/data/make_log_v0.py``); ``log_v0.json`` lists what that version served.
``tests/data/log_v1`` was written once after runtime v2 (``tests/data/make_log_v1.py``): background
compaction, fact blocks, a reverted checkpoint, usage reports, Config changes and withdrawals.
``tests/data/log_v2`` was written once after issue 17 (``tests/data/make_log_v2.py``): usage with
cache figures, calibration, a token cap reached and raised, the gain rule, the floor guard and
digested summariser input.
``tests/data/log_v3`` was written once on main 2cca20a, the last shape before the two-mark policy
and the v3 actors (``tests/data/make_log_v3.py``): that day's defaults, recorded re-masks, a
retraction that moved the masking boundary back, reactive compactions, a revert, a clear, a pin,
a fork, the dynamic threshold and a tool call answered by recovery.
``tests/data/log_v4`` was written once on main e6f04f2, the first shape of the two-mark policy
(Config schema 4, ``tests/data/make_log_v4.py``): a kept first request shown truncated, fact
blocks listing its omitted lines, prepared summaries activated, the revert of the only
checkpoint, a set and a derived ``compaction_target``.
``tests/data/log_v5`` was written once on main 4bb9afc, the last shape of Config schema 5 and of
the view hash's first version (``tests/data/make_log_v5.py``): as ``log_v4``, and a conversation
of 322 messages never compacted, whose long views were hashed with the encodings kept from the
last view.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ctxledger import Host, Message
from ctxledger.replay import rebuild, verify, view_at
from ctxledger.replay.loading import fold_session
from ctxledger.storage import LmdbEventLog

DATA = Path(__file__).resolve().parents[1] / "data"
LISTINGS = {
    name: json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))
    for name in ("log_v0", "log_v1", "log_v2", "log_v3", "log_v4", "log_v5")
}


@pytest.fixture(params=sorted(LISTINGS))
def old_log(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, dict[str, dict]]:
    """A private copy of an old log folder (LMDB writes its lock file next to the data)."""
    target = tmp_path / request.param
    shutil.copytree(DATA / request.param, target)
    return target, LISTINGS[request.param]


def test_old_log_verifies(old_log: tuple[Path, dict[str, dict]]) -> None:
    """Every view and checkpoint the old version recorded is re-derived without a mismatch."""
    path, listing = old_log
    report = verify(path)
    assert report.ok, report
    assert report.views_checked == sum(len(entry["views"]) for entry in listing.values())
    checkpoints = sum(len(entry["checkpoints"]) for entry in listing.values())
    assert report.checkpoints_checked == checkpoints


def test_old_log_serves_the_same_views(old_log: tuple[Path, dict[str, dict]]) -> None:
    """Time travel to each served step rebuilds the view hash the old version recorded."""
    path, listing = old_log
    for session_id, entry in listing.items():
        last_hash_at: dict[int, str] = {}
        for through_seq, view_hash in entry["views"]:
            last_hash_at[through_seq] = view_hash
        for through_seq, view_hash in last_hash_at.items():
            assert view_at(path, session_id, through_seq).view_hash == view_hash, (
                session_id,
                through_seq,
            )
        state = rebuild(path, session_id)
        assert [checkpoint.id for checkpoint in state.checkpoints] == entry["rebuilt_checkpoints"]
        assert len(state.history) == entry["messages"]


def test_old_log_keeps_working_in_a_new_host(old_log: tuple[Path, dict[str, dict]]) -> None:
    """A new host continues every old session; the log still verifies afterwards."""
    path, listing = old_log
    with Host.open(path) as host:
        assert sorted(host.sessions()) == sorted(listing)
        for session_id in listing:
            session = host.session(session_id)
            before = len(session.history())
            session.append(Message.user(f"continuing {session_id}"))
            view = session.prepare_step()
            assert view.through_seq == before + 1
    assert verify(path).ok


def test_log_v1_holds_the_recent_events() -> None:
    """The v1 fixture exercises the events added since v0 (so the tests above cover them)."""
    types = set().union(*(entry["types"] for entry in LISTINGS["log_v1"].values()))
    assert {
        "SummaryPrepared",
        "CheckpointReverted",
        "UsageReported",
        "ConfigChanged",
        "MessageRetracted",
        "HistoryCleared",
        "ToolResultSynthesized",
    } <= types


def test_log_v2_holds_the_issue_17_events(tmp_path: Path) -> None:
    """The v2 fixture exercises calibration and the cap (so the tests above cover them)."""
    shutil.copytree(DATA / "log_v2", tmp_path / "log_v2")
    types = set().union(*(entry["types"] for entry in LISTINGS["log_v2"].values()))
    assert {"TokenizerCalibrated", "BudgetExhausted", "SummaryPrepared", "ConfigChanged"} <= types
    with LmdbEventLog.open(tmp_path / "log_v2", readonly=True) as log:
        reports = [
            record.event
            for session_id in LISTINGS["log_v2"]
            for record in log.read(session_id)
            if type(record.event).__name__ == "UsageReported"
        ]
    assert any(report.cached_tokens and report.cache_write_tokens for report in reports)
    assert any(report.cached_tokens and not report.cache_write_tokens for report in reports)


def test_log_v3_holds_re_masks_and_withdrawals(tmp_path: Path) -> None:
    """The v3 fixture exercises re-masks, mask_count, reactive compaction and the rest."""
    shutil.copytree(DATA / "log_v3", tmp_path / "log_v3")
    listing = LISTINGS["log_v3"]
    types = set().union(*(entry["types"] for entry in listing.values()))
    assert {
        "CheckpointReverted",
        "HistoryCleared",
        "MessagePinned",
        "MessageRetracted",
        "SessionForked",
        "SummaryPrepared",
        "ToolResultSynthesized",
        "ConfigChanged",
    } <= types
    assert sum(entry["remasks"] for entry in listing.values()) > 0
    with LmdbEventLog.open(tmp_path / "log_v3", readonly=True) as log:
        events = [record.event for record in log.read("main")]
    assert any(getattr(event, "mask_count", None) is not None for event in events)
    reasons = {event.checkpoint.reason for event in events if hasattr(event, "checkpoint")}
    assert "prompt_too_long" in reasons


def test_old_snapshots_are_skipped_and_the_events_folded(
    old_log: tuple[Path, dict[str, dict]],
) -> None:
    """A snapshot of the old format is not resumed from: the fold reads the events instead."""
    path, listing = old_log
    with LmdbEventLog.open(path, readonly=True) as log:
        assert any(log.load_snapshot(session_id) is not None for session_id in listing)
        for session_id in listing:
            fast, _ = fold_session(log, session_id)
            full, _ = fold_session(log, session_id, use_snapshots=False)
            assert fast.to_snapshot() == full.to_snapshot(), session_id
