"""Snapshots v2: history stays out of the snapshot and is read back from the log in chunks.

``HISTORY_CHUNK`` is shrunk to a few messages here so that small sessions have many full chunks.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from chunky import SMALL, drive, ids
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from ctxledger import Host, InvalidSeqError, Message
from ctxledger.domain import SessionState, readers
from ctxledger.replay.loading import fold_session, read_messages
from ctxledger.testing import SessionMachine


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readers, "HISTORY_CHUNK", 4)


def test_resumed_state_reads_chunks_lazily_and_equals_the_full_fold(tmp_path: Path) -> None:
    """A state resumed from a snapshot holds no full chunk until one is touched."""
    with Host.open(tmp_path / "db", config=SMALL, id_factory=ids()) as host:
        served = drive(host.session("a"), 30)
        fast, _ = fold_session(host.log, "a")
        full, _ = fold_session(host.log, "a", use_snapshots=False)
        assert fast.history.loaded_chunks() == 0
        assert fast.to_snapshot() == full.to_snapshot()
        assert len(fast.history) == len(full.history) > 40
        assert len(fast.checkpoints) == len(full.checkpoints) >= 2
        assert fast.active_checkpoint == full.active_checkpoint
        assert fast.checkpoints._earlier is None  # only the active one is in memory
        assert fast.checkpoints[0] == full.checkpoints[0]
        assert list(fast.checkpoints) == list(full.checkpoints)
        assert fast.checkpoints[1:] == full.checkpoints[1:]
        assert fast.history[5] == full.history[5]
        assert fast.history.loaded_chunks() == 1
        assert fast.history[-1] == full.history[-1]
        assert fast.history[3:18] == full.history[3:18]
        assert fast.history[::3] == full.history[::3]
        assert list(fast.history) == list(full.history)
        assert fast.history == full.history
        for seq, view_hash in served:
            assert host.session("a").view_at(seq).view_hash == view_hash
    with Host.open(tmp_path / "db", config=SMALL, id_factory=ids()) as host:
        again = host.session("a")
        again.append(Message.user("after recovery"))
        assert again.history() == [*full.history, again.history()[-1]]


def test_snapshot_holds_only_the_partial_chunk(tmp_path: Path) -> None:
    """A snapshot does not carry the history: only its length and last, partial chunk."""
    with Host.open(tmp_path / "db", config=SMALL, id_factory=ids()) as host:
        session = host.session("a")
        drive(session, 30)
        state = session._live_state()
        fields = msgspec.msgpack.decode(state.to_snapshot())
        assert "history" not in fields
        assert "checkpoints" not in fields
        assert fields["checkpoint_count"] == len(state.checkpoints) >= 2
        assert fields["history_length"] == len(state.history) > 40
        assert len(fields["history_tail"]) == len(state.history) % 4


def test_a_different_history_encodes_differently(tmp_path: Path) -> None:
    """The snapshot's digest covers the chunks it leaves out."""
    with Host.open(tmp_path / "db", config=SMALL, id_factory=ids()) as host:
        drive(host.session("a"), 4)
        drive(host.session("b"), 4)
        a, _ = fold_session(host.log, "a", use_snapshots=False)
        b, _ = fold_session(host.log, "b", use_snapshots=False)
        b.session_id = "a"
        assert len(a.history) == len(b.history)
        assert a.to_snapshot() != b.to_snapshot()


def test_fork_reads_inherited_chunks_from_the_parent(tmp_path: Path) -> None:
    """A fork's resumed history reads inherited messages from its parent's log."""
    with Host.open(tmp_path / "db", config=SMALL, id_factory=ids()) as host:
        parent = host.session("p")
        parent_served = drive(parent, 9)
        child = parent.fork("c", at_seq=parent_served[4][0])
        child_served = drive(child, 12, start=100)
        drive(parent, 5, start=200)
        grandchild = child.fork("g", at_seq=child_served[3][0])
        drive(grandchild, 10, start=300)
        for sid in ("c", "g"):
            fast, _ = fold_session(host.log, sid)
            full, _ = fold_session(host.log, sid, use_snapshots=False)
            assert fast.history.loaded_chunks() == 0
            assert list(fast.history) == list(full.history), sid
            assert list(fast.checkpoints) == list(full.checkpoints), sid
            assert fast.to_snapshot() == full.to_snapshot()
        assert [m.seq for m in read_messages(host.log, "g", 5, 30)] == list(range(5, 31))


def test_without_a_reader_old_chunks_are_refused() -> None:
    """from_snapshot without a reader knows the tail only."""
    state = SessionState.new("s", SMALL)
    for seq in range(1, 11):
        state._append(Message.user(f"m{seq}").with_seq(seq))
    restored = SessionState.from_snapshot(state.to_snapshot())
    assert restored.to_snapshot() == state.to_snapshot()
    assert restored.history[9] == state.history[9]
    with pytest.raises(InvalidSeqError):
        restored.history[0]


def test_machine_with_small_chunks() -> None:
    """The session state machine (snapshots every 16 events) with 4-message chunks."""
    run_state_machine_as_test(
        SessionMachine,
        settings=settings(SessionMachine.TestCase.settings, stateful_step_count=40),
    )
