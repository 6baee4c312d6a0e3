"""The ``audit``, ``why``, ``recall`` and ``revert`` verbs, and compaction metadata in ``sessions``
and ``show``; each against a log that a host wrote and closed (a restart in between)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import SMALL, assert_one_line_error, build_log, run

from ctxledger import Host, replay


@pytest.fixture(scope="module")
def shared_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log whose sessions compacted several times (written by a host that is closed)."""
    return build_log(tmp_path_factory.mktemp("cli16") / "db", sessions=("a",), steps=40)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A private log, for the verb that writes."""
    return build_log(tmp_path / "db", sessions=("a",), steps=40)


def test_audit_prints_a_table_per_fact_kind(shared_log: Path) -> None:
    """``audit`` names the checkpoint and counts facts per kind, as replay.audit does."""
    report = replay.audit(shared_log, "a")
    result = run("audit", "a", "--db", shared_log)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"checkpoint {report.checkpoint_id} (")
    rows = {line.split()[0]: line.split()[1:4] for line in lines[4:11]}
    for kind, count in report.counts.items():
        assert rows[kind] == [str(count.facts), str(count.kept), str(count.lost)]


def test_audit_json_is_the_report(shared_log: Path) -> None:
    """``audit --json --checkpoint ID`` prints the report of that checkpoint."""
    first = replay.rebuild(shared_log, "a").checkpoints[0]
    result = run("audit", "a", "--db", shared_log, "--checkpoint", first.id, "--json")
    assert result.exit_code == 0, result.output
    decoded = json.loads(result.stdout)
    report = replay.audit(shared_log, "a", first.id)
    assert decoded["checkpoint_id"] == first.id
    assert len(decoded["lost"]) == len(report.lost) and len(decoded["kept"]) == len(report.kept)


def test_audit_of_an_unknown_checkpoint_is_one_line(shared_log: Path) -> None:
    """A checkpoint id the session does not have is a one-line error."""
    result = run("audit", "a", "--db", shared_log, "--checkpoint", "nope")
    assert_one_line_error(result, "no checkpoint 'nope'")


def test_why_says_where_a_message_is(shared_log: Path) -> None:
    """``why`` prints the placement's sentence; a summarised one names its checkpoint."""
    placement = replay.explain(shared_log, "a", 3)
    result = run("why", "a", "3", "--db", shared_log)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == placement.detail
    assert placement.kind == "summarized"
    assert f"checkpoint {placement.checkpoint_id}: " in result.stdout
    assert_one_line_error(run("why", "a", "100000", "--db", shared_log), "no message with seq")


def test_recall_prints_hits_and_json(shared_log: Path) -> None:
    """``recall`` finds summarised messages by a word; ``--json`` gives the hits."""
    hits = replay.recall(shared_log, "a", "src", limit=3)
    assert hits
    result = run("recall", "a", "src", "--db", shared_log, "--limit", "3")
    assert result.exit_code == 0, result.output
    assert [line.split()[0] for line in result.stdout.splitlines()[1:]] == [
        f"#{hit.seq}" for hit in hits
    ]
    decoded = json.loads(run("recall", "a", "src", "--db", shared_log, "--json").stdout)
    assert decoded[0]["seq"] == hits[0].seq and decoded[0]["placement"] in (
        "summarized",
        "masked",
        "truncated",
        "pinned",
    )


def test_revert_then_revert_again(db: Path) -> None:
    """``revert`` restores the previous checkpoint (seen after a restart); a second is refused."""
    before = replay.rebuild(db, "a").checkpoints
    result = run("revert", "a", "--db", db, "--reason", "lost the task")
    assert result.exit_code == 0, result.output
    assert f"reverted checkpoint {before[-1].id}" in result.stdout
    assert replay.rebuild(db, "a").view.checkpoint_id == before[-2].id
    assert_one_line_error(run("revert", "a", "--db", db), "cannot be reverted in turn")
    with Host.open(db, config=SMALL) as host:
        result_ = host.session("a").compact("keep the paths")
        assert result_.compacted
    shown = run("show", "a", "--db", db, "--events", "--no-pager").stdout
    assert "checkpoint_reverted" in shown and "lost the task" in shown
    assert replay.verify(db).ok


def test_sessions_and_show_report_the_compaction_metadata(shared_log: Path) -> None:
    """``sessions`` names the summariser; ``show --checkpoints`` lists time and sizes."""
    checkpoints = replay.rebuild(shared_log, "a").checkpoints
    rows = run("sessions", "--db", shared_log).stdout.splitlines()
    assert "SUMMARISER" in rows[0] and "ExtractiveSummarizer" in rows[2]
    listed = run("show", "a", "--db", shared_log, "--checkpoints", "--no-pager").stdout
    lines = listed.splitlines()
    assert lines[0].split()[:4] == ["CHECKPOINT", "REASON", "COVERS", "SUMMARISER"]
    assert [line.split()[0] for line in lines[2:]] == [cp.id for cp in checkpoints]
    first = lines[2].split()
    assert first[3] == "ExtractiveSummarizer" and first[6] == f"{checkpoints[0].input_chars:,}"
    assert first[5] == "s"  # the wall time, "0.01 s"
