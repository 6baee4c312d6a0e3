"""A transcript exported before the Config schema imports with the Config it was written with."""

from __future__ import annotations

import json
from pathlib import Path

import zstandard

from ctxledger.tooling.transcripts import FORMAT_NAME, read_transcript


def _write(path: Path, lines: list[dict[str, object]]) -> None:
    text = "".join(json.dumps(line) + "\n" for line in lines).encode()
    path.write_bytes(zstandard.ZstdCompressor().compress(text))


def test_an_old_transcripts_config_is_upcast_to_one_mark(tmp_path: Path) -> None:
    """The header's Config lacks schema_version and carries the retired floor guard: it is
    read as the one-mark Config it was (schema 3), not refused and not given new defaults."""
    path = tmp_path / "old.jsonl.zst"
    header = {
        "type": "header",
        "format": FORMAT_NAME,
        "version": 1,
        "session_id": "old",
        "config": {"context_window": 9000, "floor_guard": True, "min_compaction_gain_tokens": 900},
        "messages": 1,
        "checkpoints": 0,
    }
    message = {"type": "message", "message": {"role": "user", "content": "hi", "seq": 1}}
    _write(path, [header, message])
    transcript = read_transcript(path)
    config = transcript.config
    assert config.legacy and config.floor_guard and config.min_compaction_gain_tokens == 900
    assert config.prepare_threshold == 0.0 and config.fact_index_chars == 0
    assert config.context_window == 9000
