"""A log written by ctxledger 0.1.0 (before the fact block existed) opens, verifies, serves the same
view hashes and goes on without a fact block (tests/data/make_old_log.py wrote it)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import zstandard

from ctxledger import Host, Message, replay
from ctxledger.events import CheckpointCreated, SessionOpened, ViewServed

DATA = Path(__file__).resolve().parents[1] / "data"
LISTING = json.loads((DATA / "old_log_0_1_0.json").read_text(encoding="utf-8"))


@pytest.fixture
def old_db(tmp_path: Path) -> Path:
    """A copy of the old log in a fresh folder (the test may write to it)."""
    folder = tmp_path / "old"
    folder.mkdir()
    packed = (DATA / "old_log_0_1_0.mdb.zst").read_bytes()
    (folder / "data.mdb").write_bytes(zstandard.ZstdDecompressor().decompress(packed))
    return folder


def test_the_old_log_verifies_and_rebuilds_the_served_view_hashes(old_db: Path) -> None:
    """verify re-derives every served view; the last one's hash is the recorded one."""
    report = replay.verify(old_db)
    assert report.ok, report.mismatches
    assert report.sessions == 2 and report.views_checked == sum(
        entry["views_served"] for entry in LISTING.values()
    )
    for session_id, entry in LISTING.items():
        state = replay.rebuild(old_db, session_id)
        assert len(state.history) == entry["messages"]
        assert (
            replay.view_at(old_db, session_id, entry["last_view_through_seq"]).view_hash
            == (entry["last_view_hash"])
        )


def test_old_configs_and_checkpoints_decode_with_the_new_features_off(old_db: Path) -> None:
    """The recorded Config decodes with fact_index_chars 0; old checkpoints have no block."""
    with Host.open(old_db) as host:
        opened = host.log.read("old", 1, 1)[0].event
        assert isinstance(opened, SessionOpened) and opened.config.fact_index_chars == 0
        session = host.session("old")
        assert session.config.fact_index_chars == 0
        assert all(cp.facts == "" and cp.summarizer == "" for cp in session.checkpoints())


def test_the_old_session_goes_on_as_it_was_configured(old_db: Path) -> None:
    """New steps on the old session compact without a fact block; the log still verifies."""
    with Host.open(old_db) as host:
        session = host.session("old")
        before = len(session.checkpoints())
        for n in range(12):
            session.append(Message.user(f"more work {n}: see src/late_{n}.py " + "w" * 400))
            session.prepare_step()
            session.append(Message.assistant("done " + "d" * 400))
        made = session.checkpoints()[before:]
        assert made and all(cp.facts == "" for cp in made)
        assert all(cp.summarizer == "ExtractiveSummarizer" and cp.input_chars for cp in made)
        audit = session.audit()
        assert audit.checkpoint_id == made[-1].id
    assert replay.verify(old_db).ok


def test_a_copy_of_the_old_log_serves_the_same_views_live(old_db: Path, tmp_path: Path) -> None:
    """Opened by a host, each session's view equals the last one the old version served."""
    copy = tmp_path / "copy"
    shutil.copytree(old_db, copy)
    with Host.open(copy) as host:
        for session_id, entry in LISTING.items():
            served = [
                record.event
                for record in host.log.read(session_id)
                if isinstance(record.event, ViewServed)
            ]
            assert served[-1].view_hash == entry["last_view_hash"]
            view = host.session(session_id).build_model_view()
            assert view.view_hash == entry["last_view_hash"]
        checkpoints = [
            record.event
            for record in host.log.read("old")
            if isinstance(record.event, CheckpointCreated)
        ]
        assert len(checkpoints) == LISTING["old"]["checkpoints"]
