"""``Host.open("postgresql://...")``, every CLI verb's ``--db postgresql://...``, and ``copy``."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import SMALL, assert_one_line_error, build_log, run

from ctxledger import Config, Host
from ctxledger.events.codec import encode_payload
from ctxledger.messages import Message, ToolCall
from ctxledger.replay import verify
from ctxledger.storage import LmdbEventLog, PostgresEventLog, open_log

pytestmark = pytest.mark.postgres

SNAPSHOTTED = SMALL.replace(snapshot_interval=16)


def test_host_opens_a_postgres_database_and_recovers_the_same_view(pg_database: str) -> None:
    """A host on a URI runs sessions in PostgreSQL; a new host recovers the same view."""
    build_log(pg_database, sessions=("a",), steps=12)  # type: ignore[arg-type]
    with Host.open(pg_database, config=SMALL) as host:
        assert isinstance(host.log, PostgresEventLog)
        session = host.session("a")
        served = session.prepare_step()
        history = session.history()
    with Host.open(pg_database, config=SMALL) as host:
        again = host.session("a")
        assert again.history() == history
        assert again.build_model_view().view_hash == served.view_hash
    assert verify(pg_database).ok


def test_read_verbs_work_on_a_postgres_uri(pg_database: str, tmp_path: Path) -> None:
    """sessions, show, view, stats, verify and whatif accept --db postgresql://..."""
    build_log(pg_database, sessions=("a", "b"), steps=20)  # type: ignore[arg-type]
    listed = run("sessions", "--db", pg_database)
    assert listed.exit_code == 0 and {"a", "b"} <= set(listed.output.split())
    assert run("show", "a", "--db", pg_database, "--no-pager").exit_code == 0
    assert "# view of a" in run("view", "a", "--db", pg_database).output
    stats = run("stats", "--db", pg_database)
    assert stats.exit_code == 0 and "schema ctxledger" in stats.output
    assert "map used" not in stats.output
    assert run("verify", "--db", pg_database).exit_code == 0
    assert run("whatif", "a", "--db", pg_database, "--threshold", "0.5").exit_code == 0


def test_write_verbs_work_on_a_postgres_uri(pg_database: str, tmp_path: Path) -> None:
    """compact, export and import accept --db postgresql://..."""
    build_log(pg_database, sessions=("a",), steps=20)  # type: ignore[arg-type]
    assert run("compact", "a", "--db", pg_database, "--focus", "files").exit_code == 0
    exported = run("export", "a", "--db", pg_database, "-o", tmp_path)
    assert exported.exit_code == 0
    (transcript,) = tmp_path.glob("*.jsonl.zst")
    assert run("import", transcript, "--db", pg_database, "--session", "a2").exit_code == 0
    with open_log(pg_database, readonly=True) as log:
        assert log.sessions() == ["a", "a2"]


def test_read_verb_on_a_database_without_a_log_is_one_line_error(pg_database: str) -> None:
    """A URI whose database holds no log is refused with one line, and nothing is created."""
    assert_one_line_error(run("sessions", "--db", pg_database), "no ctxledger event log")
    with pytest.raises(Exception, match="no ctxledger event log"):
        open_log(pg_database, readonly=True)


def test_password_is_not_shown_in_messages(pg_database: str) -> None:
    """An unknown session names the database without the URI's password."""
    build_log(pg_database, sessions=("a",), steps=2)  # type: ignore[arg-type]
    with_password = pg_database.replace("postgresql://postgres@", "postgresql://postgres:sesame@")
    result = run("show", "nobody", "--db", with_password)
    assert_one_line_error(result, "unknown session 'nobody'")
    assert "sesame" not in result.stderr


def _same_logs(one: str | Path, other: str | Path) -> None:
    """Both logs hold the same sessions, seqs, positions, commit times and event bytes."""
    with open_log(one, readonly=True) as a, open_log(other, readonly=True) as b:
        assert a.sessions() == b.sessions()
        left, right = a.read_all(), b.read_all()
        assert [(r.session_id, r.seq, r.position, r.timestamp) for r in left] == [
            (r.session_id, r.seq, r.position, r.timestamp) for r in right
        ]
        assert [encode_payload(r.event) for r in left] == [encode_payload(r.event) for r in right]
        for session_id in a.sessions():
            assert a.load_snapshot(session_id) == b.load_snapshot(session_id)


def test_copy_lmdb_to_postgres_and_back_is_verified(pg_database: str, tmp_path: Path) -> None:
    """copy moves a whole log LMDB -> PostgreSQL -> LMDB; each copy equals the source and
    verifies, snapshots included; progress goes to stderr."""
    source = tmp_path / "source"
    with Host.open(source, config=SNAPSHOTTED) as host:
        for session_id in ("a", "b", "c"):
            session = host.session(session_id)
            for index in range(25):
                session.append_many(_step(session_id, index))
                session.prepare_step()
    with LmdbEventLog.open(source, readonly=True) as log:
        assert log.load_snapshot("a") is not None  # the copy has snapshots to carry
    there = run("copy", "--from", source, "--to", pg_database)
    assert there.exit_code == 0, there.output
    assert "verify: ok" in there.output and "copy" in there.stderr
    _same_logs(source, pg_database)
    back = run("copy", "--from", pg_database, "--to", tmp_path / "back")
    assert back.exit_code == 0, back.output
    _same_logs(source, tmp_path / "back")
    assert verify(tmp_path / "back").ok


def test_copy_into_a_log_that_holds_sessions_is_refused(pg_database: str, tmp_path: Path) -> None:
    """A target that already holds sessions is refused; it is left as it was."""
    build_log(tmp_path / "source", sessions=("a",), steps=3)
    build_log(pg_database, sessions=("x",), steps=3)  # type: ignore[arg-type]
    with open_log(pg_database, readonly=True) as log:
        before = log.last_position()
    assert_one_line_error(
        run("copy", "--from", tmp_path / "source", "--to", pg_database), "already holds 1 sessions"
    )
    with open_log(pg_database, readonly=True) as log:
        assert log.sessions() == ["x"] and log.last_position() == before


def test_copy_from_a_missing_folder_is_one_line_error(tmp_path: Path) -> None:
    """The source must exist; nothing is created."""
    result = run("copy", "--from", tmp_path / "nothing", "--to", tmp_path / "to")
    assert_one_line_error(result, "does not exist")
    assert not (tmp_path / "to").exists()


def _step(session_id: str, index: int) -> list[Message]:
    """One agent step: a user request, a tool call, its result, the answer."""
    call = ToolCall(f"{session_id}-{index}", "bash", '{"command": "ls"}')
    return [
        Message.user(f"step {index} of {session_id}: list the files"),
        Message.assistant("", [call]),
        Message.tool("a.txt\nb.txt\n" * (index + 1), call.id, "bash"),
        Message.assistant(f"done {index}"),
    ]


def test_config_is_kept_by_the_copy(pg_database: str, tmp_path: Path) -> None:
    """A session's recorded Config comes back from the copy (the events are the same)."""
    config = Config(context_window=9000)
    with Host.open(tmp_path / "source", config=config) as host:
        host.session("a").append_many(_step("a", 0))
    assert run("copy", "--from", tmp_path / "source", "--to", pg_database).exit_code == 0
    with Host.open(pg_database) as host:
        assert host.session("a").config.context_window == 9000
