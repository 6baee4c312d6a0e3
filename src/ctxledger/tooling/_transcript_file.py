"""The transcript file: a session as zstd-compressed JSONL, written and read back.

Line 1 is the header (the session id, the Config in force, how many messages and checkpoints
follow, the pins); then one line per message and per checkpoint in log order (a checkpoint
follows the newest message at the time it was made). Reading checks the whole file: seqs run
1, 2, 3 …, each checkpoint follows its message, and the header's counts match (a truncated
file is refused). What a transcript is for, and exporting and importing one through a log, is
:mod:`ctxledger.tooling.transcripts`.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

import msgspec
import zstandard

from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config, upcast_config
from ctxledger.domain import SessionState
from ctxledger.errors import TraceFormatError
from ctxledger.messages import Message

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "SUFFIX",
    "Header",
    "Transcript",
    "encode_transcript",
    "read_transcript",
    "write_atomically",
]

#: The ``format`` field of every transcript header.
FORMAT_NAME = "ctxledger-transcript"
#: The current transcript format version.
FORMAT_VERSION = 1
#: File names of transcripts end with this (rotation only ever deletes such files).
SUFFIX = ".jsonl.zst"
_ZSTD_LEVEL = 10  # archives are written once and kept long: favour ratio over speed


class Header(msgspec.Struct, kw_only=True, tag="header", tag_field="type"):
    """Line 1 of a transcript: what the file holds and the Config in force."""

    format: str
    version: int
    session_id: str
    config: Config
    messages: int
    checkpoints: int
    pins: list[int] = []
    forked_from: str | None = None
    exported_at: float = 0.0
    ctxledger: str = ""


class _MessageLine(msgspec.Struct, kw_only=True, tag="message", tag_field="type"):
    message: Message


class _CheckpointLine(msgspec.Struct, kw_only=True, tag="checkpoint", tag_field="type"):
    after_seq: int
    checkpoint: Checkpoint


_Line: TypeAlias = Header | _MessageLine | _CheckpointLine
_encoder = msgspec.json.Encoder(order="deterministic")
_decoder = msgspec.json.Decoder(_Line)


def _header_line(raw: bytes) -> _Line:
    """The first line, its Config upcast when written before ``Config.schema_version``."""
    value = msgspec.json.decode(raw)
    if isinstance(value, dict) and isinstance(value.get("config"), dict):
        value["config"] = upcast_config(value["config"])
    line: _Line = msgspec.convert(value, _Line)
    return line


@dataclass(frozen=True)
class Transcript:
    """A transcript read back from a file.

    Attributes:
        path: The file it was read from.
        session_id: The exported session's id.
        config: The Config in force when it was exported.
        messages: Every message, with its seq.
        checkpoints: ``(after_seq, checkpoint)`` pairs, oldest first.
        pins: Pinned seqs.
        exported_at: Unix time of the export.
    """

    path: Path
    session_id: str
    config: Config
    messages: tuple[Message, ...]
    checkpoints: tuple[tuple[int, Checkpoint], ...]
    pins: tuple[int, ...]
    exported_at: float


def read_transcript(path: str | os.PathLike[str]) -> Transcript:
    """Read and check a transcript file.

    Raises:
        TraceFormatError: The file is not a transcript, or a line is malformed (it names the
            1-based line); seqs must run 1, 2, 3 … and checkpoints must follow their message.
        OSError: The file cannot be read.
    """
    source = Path(path)
    header: Header | None = None
    messages: list[Message] = []
    checkpoints: list[tuple[int, Checkpoint]] = []
    number = 0
    for number, raw in _decompressed_lines(source):
        try:
            line = _decoder.decode(raw) if number > 1 else _header_line(raw)
        except msgspec.DecodeError as exc:
            raise TraceFormatError(source, number, f"not a transcript line: {exc}") from None
        if number == 1:
            if not isinstance(line, Header) or line.format != FORMAT_NAME:
                raise TraceFormatError(source, 1, "the first line is not a transcript header")
            if line.version > FORMAT_VERSION:
                raise TraceFormatError(
                    source, 1, f"format version {line.version} is newer than this ctxledger reads"
                )
            header = line
        elif isinstance(line, _MessageLine):
            if line.message.seq != len(messages) + 1:
                raise TraceFormatError(
                    source, number, f"message seq {line.message.seq}, expected {len(messages) + 1}"
                )
            messages.append(line.message)
        elif isinstance(line, _CheckpointLine):
            if line.after_seq != len(messages):
                raise TraceFormatError(
                    source, number, f"checkpoint after seq {line.after_seq} is out of place"
                )
            checkpoints.append((line.after_seq, line.checkpoint))
        else:
            raise TraceFormatError(source, number, "a second header")
    if header is None:
        raise TraceFormatError(source, max(number, 1), "empty transcript")
    if (header.messages, header.checkpoints) != (len(messages), len(checkpoints)):
        raise TraceFormatError(
            source,
            number,
            f"the header promises {header.messages} messages and {header.checkpoints} "
            f"checkpoints, the file holds {len(messages)} and {len(checkpoints)} (truncated?)",
        )
    return Transcript(
        path=source,
        session_id=header.session_id,
        config=header.config,
        messages=tuple(messages),
        checkpoints=tuple(checkpoints),
        pins=tuple(header.pins),
        exported_at=header.exported_at,
    )


def encode_transcript(header: Header, state: SessionState, positions: list[int]) -> bytes:
    """The transcript file's bytes: ``header``, then ``state``'s messages and checkpoints (each
    checkpoint after the message ``positions`` names), compressed."""
    return _compress(_lines(header, state, positions))


def _lines(header: Header, state: SessionState, positions: list[int]) -> Iterator[bytes]:
    yield _encoder.encode(header)
    pending = list(zip(positions, state.checkpoints, strict=True))
    index = 0
    for after, checkpoint in pending:
        while index < after:
            yield _encoder.encode(_MessageLine(message=state.history[index]))
            index += 1
        yield _encoder.encode(_CheckpointLine(after_seq=after, checkpoint=checkpoint))
    for message in state.history[index:]:
        yield _encoder.encode(_MessageLine(message=message))


def _compress(lines: Iterator[bytes]) -> bytes:
    buffer = io.BytesIO()
    compressor = zstandard.ZstdCompressor(level=_ZSTD_LEVEL)
    with compressor.stream_writer(buffer, closefd=False) as writer:
        for line in lines:
            writer.write(line)
            writer.write(b"\n")
    return buffer.getvalue()


def _decompressed_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    number = 0
    try:
        with path.open("rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as reader:
            for number, line in enumerate(io.BufferedReader(reader), start=1):
                if line.strip():
                    yield number, line
    except zstandard.ZstdError as exc:
        raise TraceFormatError(
            path, number + 1, f"not a zstd-compressed transcript: {exc}"
        ) from None


def write_atomically(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target``: synced aside, then renamed into place (or nothing left)."""
    temporary = target.with_name(f".{target.name}.tmp")
    try:
        with temporary.open("wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
