"""The ``ctxledger`` command: read-only verbs, verify, whatif, and how errors are reported."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import (
    PNG_SIGNATURE,
    SMALL,
    assert_one_line_error,
    build_log,
    corrupt_first_event,
    run,
)

from ctxledger import Host, replay

VERBS = (
    "demo",
    "ingest",
    "sessions",
    "show",
    "view",
    "compact",
    "audit",
    "why",
    "recall",
    "revert",
    "verify",
    "whatif",
    "export",
    "import",
    "plot",
    "stats",
)


@pytest.fixture(scope="module")
def shared_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log for verbs that only read; tests must not write it."""
    return build_log(tmp_path_factory.mktemp("cli") / "db")


@pytest.fixture
def db(shared_log: Path, tmp_path: Path) -> Path:
    """A private copy of the shared log, for verbs that write."""
    return Path(shutil.copytree(shared_log, tmp_path / "db"))


# --- help -----------------------------------------------------------------------------------------


def test_help_lists_every_verb() -> None:
    """``ctxledger --help`` names every verb."""
    result = run("--help")
    assert result.exit_code == 0
    for verb in VERBS:
        assert f"  {verb} " in result.stdout


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_has_help(verb: str) -> None:
    """``ctxledger VERB --help`` describes the verb and exits 0."""
    result = run(verb, "--help")
    assert result.exit_code == 0
    assert result.stdout.startswith(f"Usage: main {verb} ")
    assert "--help" in result.stdout


def test_unknown_verb_is_one_line_error() -> None:
    """A misspelt verb is reported in one line with a pointer to --help."""
    assert_one_line_error(run("sesions"), "No such command", "--help")


# --- sessions, show, view, stats ------------------------------------------------------------------


def test_sessions_lists_every_session(shared_log: Path) -> None:
    """The table has one row per session with its message count."""
    result = run("sessions", "--db", shared_log)
    assert result.exit_code == 0
    rows = result.stdout.splitlines()
    assert rows[0].split()[:3] == ["SESSION", "MESSAGES", "CHECKPOINTS"]
    history = replay.rebuild(shared_log, "a").history
    assert rows[2].split()[:2] == ["a", str(len(history))]
    assert rows[3].split()[0] == "b"


def test_missing_folder_is_an_error_and_is_not_created(tmp_path: Path) -> None:
    """A read verb on a missing folder fails in one line and creates nothing."""
    missing = tmp_path / "nowhere"
    assert_one_line_error(run("sessions", "--db", missing), "does not exist")
    assert not missing.exists()


def test_folder_without_a_log_is_an_error(tmp_path: Path) -> None:
    """A folder that holds no event log is reported, not turned into one."""
    assert_one_line_error(run("stats", "--db", tmp_path), "no event log")
    assert list(tmp_path.iterdir()) == []


def test_db_can_come_from_the_environment(shared_log: Path) -> None:
    """CTXLEDGER_DB stands in for --db."""
    result = run("sessions", env={"CTXLEDGER_DB": str(shared_log)})
    assert result.exit_code == 0 and "a " in result.stdout


def test_show_lists_messages_with_their_seqs(shared_log: Path) -> None:
    """``show`` prints one line per message, starting with its seq."""
    result = run("show", "a", "--db", shared_log, "--limit", "3")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["#1", "system"],
        ["#2", "user"],
        ["#3", "assistant"],
    ]


def test_show_full_prints_whole_contents(shared_log: Path) -> None:
    """``show --full`` prints a message's content unabridged."""
    first = replay.rebuild(shared_log, "a").history[0]
    result = run("show", "a", "--db", shared_log, "--limit", "1", "--full")
    assert first.content in result.stdout


def test_show_events_lists_event_tags(shared_log: Path) -> None:
    """``show --events`` prints raw events with their tags, from the given event seq."""
    result = run("show", "a", "--db", shared_log, "--events", "--limit", "4")
    assert result.exit_code == 0
    tags = [line.split()[3] for line in result.stdout.splitlines()]
    assert tags == ["session_opened", "message_appended", "message_appended", "view_served"]


def test_show_unknown_session_is_one_line_error(shared_log: Path) -> None:
    """An unknown session is named in one line, with how to list the real ones."""
    assert_one_line_error(
        run("show", "zzz", "--db", shared_log), "unknown session 'zzz'", "sessions"
    )


def test_view_text_matches_the_rebuilt_view(shared_log: Path) -> None:
    """``view`` prints the current view with the hash replay derives."""
    expected = replay.rebuild(shared_log, "a").view
    result = run("view", "a", "--db", shared_log)
    assert result.exit_code == 0
    assert expected.view_hash in result.stdout.splitlines()[1]


def test_view_openai_format_is_chat_messages(shared_log: Path) -> None:
    """``view --format openai`` prints the view as an OpenAI messages list."""
    result = run("view", "a", "--db", shared_log, "--format", "openai")
    messages = json.loads(result.stdout)
    assert messages == replay.rebuild(shared_log, "a").view.to_openai()


def test_view_anthropic_format_has_top_level_system(shared_log: Path) -> None:
    """``view --format anthropic`` prints a body with the system text at the top level."""
    body = json.loads(run("view", "a", "--db", shared_log, "--format", "anthropic").stdout)
    assert set(body) >= {"system", "messages"}


def test_view_at_is_the_view_served_then(shared_log: Path) -> None:
    """``view --at SEQ`` prints the view served while SEQ was the newest message."""
    expected = replay.view_at(shared_log, "a", 20)
    result = run("view", "a", "--db", shared_log, "--at", "20")
    assert result.exit_code == 0
    assert expected.view_hash in result.stdout


def test_view_at_unknown_seq_is_one_line_error(shared_log: Path) -> None:
    """A seq past the end of history is reported in one line."""
    assert_one_line_error(run("view", "a", "--db", shared_log, "--at", "99999"), "99999")


def test_stats_reports_storage_and_events(shared_log: Path) -> None:
    """``stats`` shows the compression ratio, map usage and events per session."""
    result = run("stats", "--db", shared_log)
    assert result.exit_code == 0
    for label in ("compression ratio", "map used", "file size"):
        assert label in result.stdout
    assert any(line.split()[0] == "a" for line in result.stdout.splitlines()[-3:])


def test_corrupt_record_is_one_line_error(db: Path) -> None:
    """A damaged record is reported by session, event seq and message seq, without a
    traceback, after what can be read of the session."""
    corrupt_first_event(db)
    result = run("show", "a", "--db", db)
    assert_one_line_error(result, "corrupt record", "'a'", "event seq 2", "(after message 0)")
    shown = result.stdout.splitlines()
    assert shown[0].startswith("#1 ") and "lost" in shown[0]  # the damaged record held message 1
    assert len(shown) > 40 and shown[-1].startswith("#")  # the rest reads on


def test_debug_shows_the_traceback(shared_log: Path) -> None:
    """--debug prints the traceback before the error line."""
    result = run("--debug", "show", "zzz", "--db", shared_log)
    assert result.exit_code == 1
    assert "Traceback" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("error: unknown session")


# --- plot -----------------------------------------------------------------------------------------


def test_plot_writes_a_png(shared_log: Path, tmp_path: Path) -> None:
    """``plot`` writes a PNG of the session's token series and says where."""
    target = tmp_path / "a.png"
    result = run("plot", "a", "b", "--db", shared_log, "-o", target)
    assert result.exit_code == 0 and str(target) in result.stdout
    assert target.read_bytes()[:8] == PNG_SIGNATURE


def test_plot_of_a_session_without_views_is_an_error(tmp_path: Path) -> None:
    """A session that never served a view has nothing to plot."""
    with Host.open(tmp_path / "db") as host:
        host.session("quiet")
    result = run("plot", "quiet", "--db", tmp_path / "db", "-o", tmp_path / "q.png")
    assert_one_line_error(result, "nothing to plot")


# --- verify and whatif ----------------------------------------------------------------------------


def test_verify_ok_exits_zero(shared_log: Path) -> None:
    """``verify`` on a clean log reports ok and exits 0."""
    result = run("verify", "--db", shared_log)
    assert result.exit_code == 0
    assert result.stdout.startswith("verify ok: 2 sessions")


def test_verify_one_session(shared_log: Path) -> None:
    """``verify --db D SESSION`` checks just that session."""
    result = run("verify", "--db", shared_log, "b")
    assert result.exit_code == 0 and "session 'b'" in result.stdout


def test_verify_reports_a_corrupt_record_and_exits_one(db: Path) -> None:
    """A damaged record makes verify print a report and exit 1."""
    corrupt_first_event(db)
    result = run("verify", "--db", db)
    assert result.exit_code == 1
    assert "corrupt" in result.stdout
    assert result.stderr.startswith("verify FAILED")


def test_verify_unknown_session_is_one_line_error(shared_log: Path) -> None:
    """Verifying a session that does not exist is an error, not an empty success."""
    assert_one_line_error(run("verify", "--db", shared_log, "zzz"), "unknown session")


def test_whatif_prints_recorded_and_whatif_columns(shared_log: Path) -> None:
    """``whatif --threshold`` prints the recorded figures beside the re-projected ones."""
    report = replay.what_if(shared_log, "a", SMALL.replace(compression_threshold=0.5))
    result = run("whatif", "a", "--db", shared_log, "--threshold", "0.5")
    assert result.exit_code == 0
    rows = {line[:20].strip(): line[20:].split() for line in result.stdout.splitlines()[3:]}
    assert rows["compactions"] == [str(report.original_compactions), str(report.compactions)]
    assert rows["threshold"] == ["0.8", "(3,200", "tok)", "0.5", "(2,000", "tok)"]


def test_whatif_accepts_any_setting(shared_log: Path) -> None:
    """--set KEY=VALUE changes any Config field."""
    result = run("whatif", "a", "--db", shared_log, "--set", "micro_batch=1")
    assert result.exit_code == 0 and "micro batch" in result.stdout


def test_whatif_bad_config_value_is_one_line_error(shared_log: Path) -> None:
    """An invalid value names the setting in one line."""
    result = run("whatif", "a", "--db", shared_log, "--threshold", "1.5")
    assert_one_line_error(result, "compression_threshold")


def test_whatif_unknown_setting_is_one_line_error(shared_log: Path) -> None:
    """--set with a name that is no Config field is rejected."""
    result = run("whatif", "a", "--db", shared_log, "--set", "colour=blue")
    assert_one_line_error(result, "'colour'", "no such setting")


def test_whatif_needs_a_setting(shared_log: Path) -> None:
    """Without a setting to change there is nothing to compare."""
    assert_one_line_error(run("whatif", "a", "--db", shared_log), "--threshold")


def test_option_of_the_wrong_type_is_one_line_error(shared_log: Path) -> None:
    """A non-number for --window is a one-line usage error (status 2)."""
    result = run("whatif", "a", "--db", shared_log, "--window", "big")
    assert_one_line_error(result, "--window")
    assert result.exit_code == 2


# --- the real console script ----------------------------------------------------------------------


def _console_script() -> str:
    script = Path(sys.executable).with_name("ctxledger")
    if not script.exists():
        pytest.skip("the ctxledger console script is not installed (pip install -e .)")
    return str(script)


def test_console_script_lists_sessions(shared_log: Path) -> None:
    """The installed ``ctxledger`` script runs a verb in a real process."""
    done = subprocess.run(
        [_console_script(), "sessions", "--db", str(shared_log)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[2].split()[0] == "a"


def test_console_script_error_is_one_line_on_stderr(tmp_path: Path) -> None:
    """In a real process an error is one stderr line and exit status 1, nothing on stdout."""
    done = subprocess.run(
        [_console_script(), "verify", "--db", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: no event log")


def test_python_dash_m_runs_the_command() -> None:
    """``python -m ctxledger`` is the same command."""
    done = subprocess.run(
        [sys.executable, "-m", "ctxledger", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.startswith("ctxledger, version")
