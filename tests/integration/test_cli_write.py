"""The ``ctxledger`` verbs that write: ingest, compact, export and import."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_helpers import (
    SMALL,
    assert_one_line_error,
    build_log,
    run,
)

from ctxledger import replay
from ctxledger.events import CheckpointCreated, TranscriptExported
from ctxledger.storage import LmdbEventLog
from ctxledger.tooling.traces import write_trace
from ctxledger.tooling.workload import generate_conversation


@pytest.fixture(scope="module")
def shared_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_log(tmp_path_factory.mktemp("cli-write") / "db", sessions=("a",))


@pytest.fixture
def db(shared_log: Path, tmp_path: Path) -> Path:
    """A private copy of a log with one session, ``a``, that has compacted."""
    return Path(shutil.copytree(shared_log, tmp_path / "db"))


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    """A valid trace file of 40 agent steps (made by the workload generator)."""
    return write_trace(tmp_path / "agent.jsonl", generate_conversation(7, steps=40))


def last_event(db: Path, session_id: str) -> object:
    with LmdbEventLog.open(db, readonly=True) as log:
        return log.read(session_id, log.last_seq(session_id))[0].event


# --- ingest ---------------------------------------------------------------------------------------


def test_ingest_appends_the_trace_as_a_session(trace: Path, tmp_path: Path) -> None:
    """Every line becomes a message of a new session named after the file."""
    db = tmp_path / "new-db"
    result = run("ingest", trace, "--db", db, "--window", "8000")
    assert result.exit_code == 0, result.output
    history = replay.rebuild(db, "agent").history
    assert len(history) == len(generate_conversation(7, steps=40))
    assert f"ingested {len(history)} messages into session 'agent'" in result.stdout


def test_ingest_serves_views_so_compaction_runs(trace: Path, tmp_path: Path) -> None:
    """A view is served before each assistant message, so a small window compacts."""
    db = tmp_path / "new-db"
    run(
        "ingest",
        trace,
        "--db",
        db,
        "--session",
        "s",
        "--window",
        "6000",
        "--min-retain-rounds",
        "1",
    )
    state = replay.rebuild(db, "s")
    assert state.checkpoints and state.config.context_window == 6000
    assert replay.verify(db).ok


def test_ingest_append_only_serves_no_view(trace: Path, tmp_path: Path) -> None:
    """--append-only appends without views or compaction."""
    db = tmp_path / "new-db"
    result = run("ingest", trace, "--db", db, "--append-only", "--window", "6000")
    assert "0 views served, 0 checkpoints" in result.stdout


def test_ingest_shows_progress(trace: Path, tmp_path: Path) -> None:
    """Progress goes to stderr, labelled with the session."""
    result = run("ingest", trace, "--db", tmp_path / "new-db")
    assert "ingest agent" in result.stderr


def test_ingest_reports_every_bad_line_and_writes_nothing(trace: Path, tmp_path: Path) -> None:
    """Bad lines are listed with their numbers; the folder is not even created."""
    lines = trace.read_text("utf-8").splitlines()
    lines.insert(2, "{not json")  # between two steps, so the tool-call pairing stays intact
    lines.append(json.dumps({"role": "robot", "content": "x"}))
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    db = tmp_path / "new-db"
    result = run("ingest", bad, "--db", db)
    assert result.exit_code == 1
    reported = result.stderr.splitlines()
    assert reported[0].startswith(f"{bad}:3: ")
    assert reported[1].startswith(f"{bad}:{len(lines)}: ")
    assert reported[-1] == f"error: 2 bad line(s) in '{bad}'; nothing was written"
    assert not db.exists()


def test_ingest_into_an_existing_session_is_refused(trace: Path, tmp_path: Path) -> None:
    """Ingesting twice under one session id fails and leaves the session as it was."""
    db = tmp_path / "new-db"
    run("ingest", trace, "--db", db)
    before = replay.rebuild(db, "agent").history
    assert_one_line_error(run("ingest", trace, "--db", db), "already exists")
    assert replay.rebuild(db, "agent").history == before


def test_ingest_bad_config_value_is_one_line_error(trace: Path, tmp_path: Path) -> None:
    """An invalid setting is reported before anything is written."""
    db = tmp_path / "new-db"
    assert_one_line_error(run("ingest", trace, "--db", db, "--window", "0"), "context_window")
    assert not db.exists()


def test_ingest_missing_file_is_one_line_error(tmp_path: Path) -> None:
    """A trace file that does not exist is a usage error."""
    assert_one_line_error(
        run("ingest", tmp_path / "none.jsonl", "--db", tmp_path / "db"), "none.jsonl"
    )


# --- compact --------------------------------------------------------------------------------------


def test_compact_with_focus_records_a_manual_checkpoint(trace: Path, tmp_path: Path) -> None:
    """``compact --focus`` makes a manual checkpoint carrying the focus."""
    db = tmp_path / "new-db"
    run("ingest", trace, "--db", db, "--append-only", "--min-retain-rounds", "1")
    result = run("compact", "agent", "--db", db, "--focus", "the failing tests")
    assert result.exit_code == 0, result.output
    checkpoint = replay.rebuild(db, "agent").checkpoints[-1]
    assert (checkpoint.reason, checkpoint.focus) == ("manual", "the failing tests")
    assert f"checkpoint {checkpoint.id}" in result.stdout


def test_compact_with_nothing_to_do_says_why(db: Path) -> None:
    """When no cut makes progress the verb says so and exits 0."""
    run("compact", "a", "--db", db)
    result = run("compact", "a", "--db", db)
    assert result.exit_code == 0
    assert result.stdout.startswith("nothing to compact in 'a': ")


def test_compact_unknown_session_is_one_line_error(db: Path) -> None:
    """Compacting a session that does not exist creates nothing."""
    assert_one_line_error(run("compact", "zzz", "--db", db), "unknown session 'zzz'")
    assert "zzz" not in LmdbEventLog.open(db, readonly=True).sessions()


def test_compact_missing_folder_is_not_created(tmp_path: Path) -> None:
    """``compact`` on a missing folder fails without creating it."""
    assert_one_line_error(run("compact", "a", "--db", tmp_path / "missing"), "does not exist")
    assert not (tmp_path / "missing").exists()


def test_llm_summarizer_needs_a_model(db: Path) -> None:
    """--summarizer openai without --model is a usage error."""
    assert_one_line_error(run("compact", "a", "--db", db, "--summarizer", "openai"), "--model")


# --- export and import ----------------------------------------------------------------------------


def test_export_writes_a_transcript_and_records_it(db: Path, tmp_path: Path) -> None:
    """``export`` writes the file and records TranscriptExported with its checksum."""
    target = tmp_path / "a.jsonl.zst"
    result = run("export", "a", "--db", db, "-o", target)
    assert result.exit_code == 0, result.output
    assert target.read_bytes()[:4] == b"\x28\xb5\x2f\xfd"  # the zstd frame magic
    event = last_event(db, "a")
    assert isinstance(event, TranscriptExported)
    assert event.path == str(target.resolve()) and event.sha256[:16] in result.stdout


def test_export_import_round_trip_is_identical(db: Path, tmp_path: Path) -> None:
    """An imported transcript gives a new session with the same messages, seqs and checkpoints."""
    target = tmp_path / "a.jsonl.zst"
    run("export", "a", "--db", db, "-o", target)
    result = run("import", target, "--db", db, "--session", "a2")
    assert result.exit_code == 0, result.output
    original, imported = replay.rebuild(db, "a"), replay.rebuild(db, "a2")
    assert imported.history == original.history
    assert imported.checkpoints == original.checkpoints
    assert imported.config == original.config


def test_import_names_the_new_session_after_the_old_one(db: Path, tmp_path: Path) -> None:
    """Without --session the new session is ``<id>-imported``."""
    target = tmp_path / "a.jsonl.zst"
    run("export", "a", "--db", db, "-o", target)
    assert "'a-imported'" in run("import", target, "--db", db).stdout


def test_import_into_a_fresh_folder_creates_it(db: Path, tmp_path: Path) -> None:
    """A transcript can seed a new log elsewhere."""
    target = tmp_path / "a.jsonl.zst"
    run("export", "a", "--db", db, "-o", target)
    run("import", target, "--db", tmp_path / "other", "--session", "a")
    assert replay.rebuild(tmp_path / "other", "a").history == replay.rebuild(db, "a").history


def test_import_into_an_existing_session_is_refused(db: Path, tmp_path: Path) -> None:
    """Import never writes into a session that exists."""
    target = tmp_path / "a.jsonl.zst"
    run("export", "a", "--db", db, "-o", target)
    assert_one_line_error(run("import", target, "--db", db, "--session", "a"), "already exists")


def test_import_of_a_damaged_transcript_names_the_line(db: Path, tmp_path: Path) -> None:
    """A transcript that is not zstd is reported with its path and line, and nothing is created."""
    bogus = tmp_path / "bogus.jsonl.zst"
    bogus.write_text('{"type": "header"}\n', encoding="utf-8")
    assert_one_line_error(run("import", bogus, "--db", tmp_path / "new"), f"{bogus}:1:")
    assert not (tmp_path / "new").exists()


def test_export_rotation_keeps_the_newest(db: Path, tmp_path: Path) -> None:
    """Exporting into a folder with --keep 2 leaves the two newest transcripts."""
    folder = tmp_path / "transcripts"
    folder.mkdir()
    written = []
    for _ in range(4):
        result = run("export", "a", "--db", db, "-o", folder, "--keep", "2")
        written.append(Path(result.stdout.split(" → ")[1].split(" (")[0]))
    assert sorted(folder.iterdir()) == sorted(written[-2:])
    assert "removed 1 older transcript" in result.stdout


def test_export_into_a_missing_folder_is_one_line_error(db: Path, tmp_path: Path) -> None:
    """The output folder must exist."""
    result = run("export", "a", "--db", db, "-o", tmp_path / "no" / "a.jsonl.zst")
    assert_one_line_error(result, "does not exist")


def test_export_keeps_checkpoints_in_log_order(db: Path, tmp_path: Path) -> None:
    """Each checkpoint follows the message that was newest when it was made."""
    target = tmp_path / "a.jsonl.zst"
    run("export", "a", "--db", db, "-o", target)
    with LmdbEventLog.open(db, readonly=True) as log:
        made_after = []
        last_seq = 0
        for record in log.iter_events("a"):
            event = record.event
            message = getattr(event, "message", None)
            if message is not None:
                last_seq = message.seq
            if isinstance(event, CheckpointCreated):
                made_after.append(last_seq)
    from ctxledger.tooling.transcripts import read_transcript

    assert [after for after, _ in read_transcript(target).checkpoints] == made_after
    assert made_after and SMALL.context_window == 4000
