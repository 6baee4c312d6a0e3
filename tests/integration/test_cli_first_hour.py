"""The command's papercuts a new user meets: one name per concept, formats that follow the
file suffix (or a clear refusal), marked checkpoints, the trace format in ``ingest --help``,
and no copy of a log into itself."""

from __future__ import annotations

from pathlib import Path

import pytest
import zstandard
from cli_helpers import PNG_SIGNATURE, assert_one_line_error, build_log, run

from ctxledger import replay


@pytest.fixture(scope="module")
def shared_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log with compactions, read by the tests (never written)."""
    return build_log(tmp_path_factory.mktemp("first-hour") / "db", sessions=("a",), steps=40)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A private log, for verbs that write."""
    return build_log(tmp_path / "db", sessions=("a",), steps=40)


# --- one name per concept -------------------------------------------------------------------------


def test_explain_is_the_verb_and_why_its_alias(shared_log: Path) -> None:
    """``explain`` (as Session.explain) and ``why`` print the same; help names both."""
    explained = run("explain", "a", "4", "--db", shared_log)
    assert explained.exit_code == 0, explained.output
    assert explained.stdout == run("why", "a", "4", "--db", shared_log).stdout
    assert explained.stdout.splitlines()[0] == replay.explain(shared_log, "a", 4).detail
    listing = run("--help").stdout
    assert "  explain " in listing and "The same as 'explain'." in listing


def test_what_if_is_the_verb_and_whatif_its_alias(shared_log: Path) -> None:
    """``what-if`` (as replay.what_if) and ``whatif`` print the same table."""
    spelled = run("what-if", "a", "--db", shared_log, "--threshold", "0.5")
    assert spelled.exit_code == 0, spelled.output
    assert spelled.stdout == run("whatif", "a", "--db", shared_log, "--threshold", "0.5").stdout
    assert "The same as 'what-if'." in run("--help").stdout


# --- formats follow the suffix --------------------------------------------------------------------


def test_export_refuses_a_name_its_bytes_would_belie(db: Path, tmp_path: Path) -> None:
    """``-o x.jsonl`` is refused before anything is written; ``x.jsonl.zst`` is zstd."""
    plain = tmp_path / "a.jsonl"
    result = run("export", "a", "--db", db, "-o", plain)
    assert_one_line_error(result, "zstd-compressed JSONL", "*.jsonl.zst", "a.jsonl")
    assert not plain.exists()
    packed = tmp_path / "a.jsonl.zst"
    assert run("export", "a", "--db", db, "-o", packed).exit_code == 0
    with packed.open("rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as reader:
        first = reader.read(1)
    assert packed.read_bytes()[:4] == b"\x28\xb5\x2f\xfd" and first == b"{"


@pytest.mark.parametrize(
    ("name", "head"), [("t.png", PNG_SIGNATURE), ("t.svg", b"<?xml"), ("t.pdf", b"%PDF")]
)
def test_plot_writes_the_format_its_suffix_names(
    shared_log: Path, tmp_path: Path, name: str, head: bytes
) -> None:
    """``plot -o`` writes PNG, SVG or PDF as the suffix says."""
    target = tmp_path / name
    result = run("plot", "a", "--db", shared_log, "-o", target)
    assert result.exit_code == 0, result.output
    assert target.read_bytes().startswith(head)


def test_plot_refuses_a_format_it_cannot_write(shared_log: Path, tmp_path: Path) -> None:
    """Any other suffix is a one-line error and no file."""
    target = tmp_path / "t.jpg"
    assert_one_line_error(run("plot", "a", "--db", shared_log, "-o", target), ".png", "t.jpg")
    assert not target.exists()


# --- show --checkpoints ---------------------------------------------------------------------------


def test_show_checkpoints_marks_the_active_and_the_reverted(db: Path) -> None:
    """After a revert, the reverted checkpoint and the active one (restored) are marked."""
    before = replay.rebuild(db, "a").checkpoints
    assert len({c.id for c in before}) >= 2
    assert run("revert", "a", "--db", db).exit_code == 0
    state = replay.rebuild(db, "a")
    rows = {
        line.split()[0]: line.split()[-1]
        for line in run("show", "a", "--db", db, "--checkpoints").stdout.splitlines()[2:]
    }
    assert rows[before[-1].id] == "reverted"
    assert rows[state.view.checkpoint_id] == "active"  # type: ignore[index]
    marks = list(rows.values())
    assert marks.count("active") == marks.count("reverted") == 1
    assert set(marks) <= {"active", "reverted", "-"}


# --- ingest documents its format ------------------------------------------------------------------


def test_the_example_in_ingest_help_is_a_trace_ingest_reads(tmp_path: Path) -> None:
    """The trace lines ``ingest --help`` shows are ingested as they are."""
    shown = [line.strip() for line in run("ingest", "--help").stdout.splitlines()]
    example = [line for line in shown if line.startswith('{"role"')]
    assert [line.split('"')[3] for line in example] == ["user", "assistant", "tool"]
    trace = tmp_path / "example.jsonl"
    trace.write_text("\n".join(example) + "\n", encoding="utf-8")
    result = run("ingest", trace, "--db", tmp_path / "db")
    assert result.exit_code == 0, result.output
    history = replay.rebuild(tmp_path / "db", "example").history
    assert [m.role for m in history] == ["user", "assistant", "tool"]
    assert history[1].tool_calls[0].name == "ls"
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text("utf-8")
    assert "\n".join(example) in readme  # the README documents the same format


# --- copy -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["same", "dot"])
def test_copy_into_its_own_source_is_refused(db: Path, spelling: str) -> None:
    """--to naming --from's folder (however spelt) is one clear error, the log untouched."""
    target = db if spelling == "same" else db / "."
    events = replay.rebuild(db, "a").event_seq
    result = run("copy", "--from", db, "--to", target)
    assert_one_line_error(result, "copied into itself")
    assert replay.rebuild(db, "a").event_seq == events
