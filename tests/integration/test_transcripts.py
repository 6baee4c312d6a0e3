"""Transcripts: export, import and rotation in the library (``ctxledger.tooling.transcripts``)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import msgspec
import pytest
import zstandard

from ctxledger import Config, Host, Message, SessionExistsError, ToolCall, TraceFormatError
from ctxledger.events import ToolResultSynthesized, TranscriptExported
from ctxledger.replay import rebuild
from ctxledger.storage import EventLog, MemoryEventLog
from ctxledger.tooling.transcripts import (
    FORMAT_VERSION,
    export_transcript,
    import_transcript,
    read_transcript,
    rotate_transcripts,
)
from ctxledger.tooling.workload import iter_agent_steps

SMALL = Config(context_window=3000, compression_threshold=0.8, min_retain_rounds=1)


def drive(host: Host, session_id: str, steps: int, seed: int = 0) -> None:
    session = host.session(session_id)
    for step in iter_agent_steps(seed, steps=steps):
        session.append_many(step)
        session.prepare_step()


@pytest.fixture
def log() -> EventLog:
    """A memory log holding session ``a`` (20 steps, with checkpoints)."""
    memory = MemoryEventLog()
    host = Host(memory, config=SMALL, owns_log=False)
    drive(host, "a", 20)
    host.close()
    return memory


def _rewrite(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(zstandard.ZstdCompressor().compress(b"\n".join(lines) + b"\n"))


def _lines(path: Path) -> list[bytes]:
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(path.read_bytes()))
    return reader.read().splitlines()


def test_round_trip_gives_identical_history(log: EventLog, tmp_path: Path) -> None:
    """Import of an export yields the same messages, seqs, checkpoints and Config."""
    result = export_transcript(log, "a", tmp_path / "a.jsonl.zst")
    new_id = import_transcript(log, result.path)
    original, copy = rebuild(log, "a"), rebuild(log, new_id)
    assert new_id == "a-imported"
    assert copy.history == original.history and copy.checkpoints == original.checkpoints
    assert copy.config == original.config and copy.view.view_hash == original.view.view_hash


def test_export_records_the_file_checksum(log: EventLog, tmp_path: Path) -> None:
    """The TranscriptExported event names the file and the SHA-256 of its bytes."""
    import hashlib

    result = export_transcript(log, "a", tmp_path / "a.jsonl.zst")
    event = log.read("a", log.last_seq("a"))[0].event
    assert isinstance(event, TranscriptExported)
    assert event.sha256 == hashlib.sha256(result.path.read_bytes()).hexdigest()
    assert (event.messages, event.checkpoints) == (result.messages, result.checkpoints)


def test_export_without_record_leaves_the_log_alone(log: EventLog, tmp_path: Path) -> None:
    """record=False writes the file only."""
    before = log.last_seq("a")
    export_transcript(log, "a", tmp_path / "a.jsonl.zst", record=False)
    assert log.last_seq("a") == before


def test_transcript_keeps_original_tool_outputs(log: EventLog, tmp_path: Path) -> None:
    """Tool results are written whole, never masked or truncated as in a view."""
    result = export_transcript(log, "a", tmp_path / "a.jsonl.zst")
    written = read_transcript(result.path).messages
    assert list(written) == rebuild(log, "a").history
    assert not any(m.content.startswith("[Previous: used") for m in written)


def test_header_names_session_and_config(log: EventLog, tmp_path: Path) -> None:
    """Line 1 is a header with the session id, the Config and the format version."""
    result = export_transcript(log, "a", tmp_path / "a.jsonl.zst")
    header = msgspec.json.decode(_lines(result.path)[0])
    assert header["type"] == "header" and header["session_id"] == "a"
    assert header["version"] == FORMAT_VERSION
    assert header["config"]["context_window"] == SMALL.context_window


def test_export_into_a_folder_names_the_file(log: EventLog, tmp_path: Path) -> None:
    """Given a folder, export writes ``<session>-<time>.jsonl.zst`` inside it."""
    result = export_transcript(log, "a", tmp_path)
    assert result.path.parent == tmp_path
    assert result.path.name.startswith("a-") and result.path.name.endswith(".jsonl.zst")


def test_fork_transcript_includes_inherited_history(tmp_path: Path) -> None:
    """A fork's transcript holds its parent's prefix, so the import is self-contained."""
    memory = MemoryEventLog()
    with Host(memory, config=SMALL, owns_log=False) as host:
        drive(host, "a", 12)
        host.session("a").fork("f", at_seq=10)
    result = export_transcript(memory, "f", tmp_path / "f.jsonl.zst")
    new_id = import_transcript(memory, result.path, "f2")
    assert rebuild(memory, new_id).history == rebuild(memory, "f").history
    assert len(rebuild(memory, new_id).history) == 10


def test_interrupted_results_are_imported_as_synthesized(tmp_path: Path) -> None:
    """A result recovery synthesised stays a ToolResultSynthesized event after import."""
    memory = MemoryEventLog()
    with Host(memory, config=SMALL, owns_log=False) as host:
        session = host.session("a")
        session.append_many([Message.user("go"), Message.assistant("", [ToolCall("c1", "bash")])])
    with Host(memory, config=SMALL, owns_log=False) as host:
        assert host.session("a").history()[-1].metadata == {"synthetic": "interrupted"}
    result = export_transcript(memory, "a", tmp_path / "a.jsonl.zst")
    new_id = import_transcript(memory, result.path)
    assert any(isinstance(r.event, ToolResultSynthesized) for r in memory.read(new_id))


def test_import_refuses_an_existing_session(log: EventLog, tmp_path: Path) -> None:
    """Importing under a taken id raises SessionExistsError and writes nothing."""
    result = export_transcript(log, "a", tmp_path / "a.jsonl.zst")
    before = log.last_seq("a")
    with pytest.raises(SessionExistsError):
        import_transcript(log, result.path, "a")
    assert log.last_seq("a") == before


def test_default_import_id_is_numbered_when_taken(log: EventLog, tmp_path: Path) -> None:
    """A second default import gets ``<id>-imported-2``."""
    result = export_transcript(log, "a", tmp_path / "a.jsonl.zst")
    import_transcript(log, result.path)
    assert import_transcript(log, result.path) == "a-imported-2"


def test_truncated_transcript_is_rejected(log: EventLog, tmp_path: Path) -> None:
    """A transcript missing its last lines does not match its header."""
    result = export_transcript(log, "a", tmp_path / "a.jsonl.zst")
    lines = _lines(result.path)
    _rewrite(result.path, lines[:-3])
    with pytest.raises(TraceFormatError, match="truncated"):
        read_transcript(result.path)


def test_seq_gap_names_the_line(log: EventLog, tmp_path: Path) -> None:
    """A missing message line is reported at the line where the seq jumps."""
    result = export_transcript(log, "a", tmp_path / "a.jsonl.zst")
    lines = _lines(result.path)
    del lines[3]  # the message with seq 3
    _rewrite(result.path, lines)
    with pytest.raises(TraceFormatError) as caught:
        read_transcript(result.path)
    assert caught.value.line == 4 and "expected 3" in caught.value.reason


def test_newer_format_version_is_rejected(log: EventLog, tmp_path: Path) -> None:
    """A transcript from a newer ctxledger is refused on line 1."""
    result = export_transcript(log, "a", tmp_path / "a.jsonl.zst")
    lines = _lines(result.path)
    header = msgspec.json.decode(lines[0])
    header["version"] = FORMAT_VERSION + 1
    _rewrite(result.path, [msgspec.json.encode(header), *lines[1:]])
    with pytest.raises(TraceFormatError, match="newer") as caught:
        read_transcript(result.path)
    assert caught.value.line == 1


def test_file_that_is_not_zstd_is_rejected(tmp_path: Path) -> None:
    """Plain text is not a transcript."""
    plain = tmp_path / "plain.jsonl.zst"
    plain.write_text('{"role": "user", "content": "hi"}\n', encoding="utf-8")
    with pytest.raises(TraceFormatError, match="zstd"):
        read_transcript(plain)


def test_rotation_keeps_the_newest_and_ignores_other_files(tmp_path: Path) -> None:
    """Only ``*.jsonl.zst`` files count; the oldest beyond ``keep`` are deleted."""
    for age, name in enumerate(["d", "c", "b", "a"]):
        path = tmp_path / f"{name}.jsonl.zst"
        path.write_bytes(b"x")
        os.utime(path, ns=(10**9 * (100 - age), 10**9 * (100 - age)))
    (tmp_path / "notes.txt").write_text("keep me", encoding="utf-8")
    removed = rotate_transcripts(tmp_path, 2)
    assert sorted(p.name for p in removed) == ["a.jsonl.zst", "b.jsonl.zst"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl.zst", "d.jsonl.zst", "notes.txt"]


def test_export_rotates_its_folder(log: EventLog, tmp_path: Path) -> None:
    """Each export keeps only the newest ``keep`` transcripts beside it."""
    for _ in range(3):
        last = export_transcript(log, "a", tmp_path, keep=1)
    assert list(tmp_path.iterdir()) == [last.path]
