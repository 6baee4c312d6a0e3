"""Snapshots v3: index entries before the active checkpoint stay out of the snapshot.

``SLACK`` and ``HISTORY_CHUNK`` are shrunk so that a few dozen steps push entries out of memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from chunky import SMALL, drive, ids

from ctxledger import Host, InvalidMessageError, Message, ToolCall
from ctxledger.domain import indices, readers
from ctxledger.domain.snapshot import _snapshot_decoder
from ctxledger.replay.loading import fold_session


@pytest.fixture(autouse=True)
def small_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readers, "HISTORY_CHUNK", 4)
    monkeypatch.setattr(indices, "SLACK", 2)


def index_sizes(state: Any) -> tuple[int, int]:
    """In-memory entries of the snapshot's indices, and its hashed ids."""
    snap = _snapshot_decoder.decode(state.to_snapshot())
    held = len(snap.user_seqs) + len(snap.boundaries) + len(snap.tool_seqs)
    return held + len(snap.calls) + len(snap.answers), len(snap.call_hashes)


def test_snapshot_indices_stop_growing_with_the_session(tmp_path: Path) -> None:
    """After many checkpoints, a snapshot holds about as many index entries as after a few."""
    with Host.open(tmp_path / "db", config=SMALL, id_factory=ids()) as host:
        drive(host.session("a"), 40)
        early, early_hashed = index_sizes(fold_session(host.log, "a")[0])
        drive(host.session("a"), 120, start=40)
        state, _ = fold_session(host.log, "a")
        late, late_hashed = index_sizes(state)
        assert len(state.checkpoints) > 10 and state.index_base > 300
        assert late <= early + 12  # bounded by what follows the active checkpoint
        assert late_hashed > early_hashed > 0  # old ids are only remembered as 4-byte hashes
        assert state.tool_seqs.before > 100 and state.boundaries.before > 100


def test_resumed_indices_read_old_entries_back_and_equal_the_full_fold(tmp_path: Path) -> None:
    """Touching an index entry before the base reads it back from history; equal to full fold."""
    with Host.open(tmp_path / "db", config=SMALL, id_factory=ids()) as host:
        served = drive(host.session("a"), 80)
        fast, _ = fold_session(host.log, "a")
        full, _ = fold_session(host.log, "a", use_snapshots=False)
        assert fast.to_snapshot() == full.to_snapshot()
        assert fast.tool_seqs.before > 0 and fast.history.loaded_chunks() == 0
        assert fast.tool_ordinal(5) == full.tool_ordinal(5)
        assert fast.boundary_at_or_before(7) == full.boundary_at_or_before(7)
        assert fast.boundaries_between(1, 60) == full.boundaries_between(1, 60)
        assert list(fast.user_seqs) == list(full.user_seqs)
        assert fast.tool_seqs.before == 0  # read back
        assert fast.to_snapshot() == full.to_snapshot()  # reading back changes no byte
        for seq, view_hash in served[::7]:
            assert host.session("a").view_at(seq).view_hash == view_hash


def test_an_old_tool_call_id_is_still_refused_after_recovery(tmp_path: Path) -> None:
    """A reused id from before the base is caught through its hash, after a restart."""
    with Host.open(tmp_path / "db", config=SMALL, id_factory=ids()) as host:
        drive(host.session("a"), 60)
    with Host.open(tmp_path / "db", config=SMALL, id_factory=ids()) as host:
        session = host.session("a")
        with pytest.raises(InvalidMessageError, match="already used"):
            session.append(Message.assistant("again", [ToolCall("a-0", "bash", "{}")]))
        fresh = ToolCall("call-new", "bash", "{}")
        session.append_many([Message.assistant("new", [fresh]), Message.tool("ok", fresh.id)])


def test_a_pinned_old_tool_exchange_is_shown_whole_after_recovery(tmp_path: Path) -> None:
    """Pinning a tool result from before the base shows its call and result (ids read back)."""
    with Host.open(tmp_path / "db", config=SMALL, id_factory=ids()) as host:
        drive(host.session("a"), 60)
    with Host.open(tmp_path / "db", config=SMALL, id_factory=ids()) as host:
        session = host.session("a")
        old_result = next(m for m in session.history()[:20] if m.role == "tool")
        assert old_result.seq is not None
        session.pin(old_result.seq)
        view = session.build_model_view()
        shown = {m.seq for m in view.messages}
        assert {old_result.seq - 1, old_result.seq} <= shown


def test_a_live_session_refuses_an_old_id_and_shows_an_old_pin_across_checkpoints(
    tmp_path: Path,
) -> None:
    """Without a restart too: the live state keeps only hashes of old ids and reads them back.

    Each checkpoint drops what was read back, so the pin is checked across several of them.
    """
    with Host.open(tmp_path / "db", config=SMALL, id_factory=ids()) as host:
        session = host.session("a")
        drive(session, 60)
        with pytest.raises(InvalidMessageError, match="already used"):
            session.append(Message.assistant("again", [ToolCall("a-1", "bash", "{}")]))
        old_result = next(m for m in session.history()[:20] if m.role == "tool")
        assert old_result.seq is not None
        session.pin(old_result.seq)
        checkpoints = len(session.checkpoints())
        for start in (60, 75, 90):
            drive(session, 15, start=start)
            view = session.build_model_view()
            assert {old_result.seq - 1, old_result.seq} <= {m.seq for m in view.messages}
        assert len(session.checkpoints()) >= checkpoints + 3  # the base moved in between
        with pytest.raises(InvalidMessageError, match="already used"):
            session.append(Message.assistant("again", [ToolCall("a-2", "bash", "{}")]))
