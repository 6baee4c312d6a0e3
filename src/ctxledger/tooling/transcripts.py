"""Transcripts: a session exported as one zstd-compressed JSONL file, imported back, rotated.

A transcript is the archive form of a session: every message of its history exactly as it was
appended (original tool outputs included, never masked or truncated), every checkpoint, and a
header with the session id and the Config in force. Line 1 is the header; then one line per
message and per checkpoint in log order (a checkpoint follows the newest message at the time it
was made)::

    {"type":"header","format":"ctxledger-transcript","version":1,"session_id":"agent-7",...}
    {"type":"message","message":{"role":"user","content":"...","seq":1,...}}
    {"type":"checkpoint","after_seq":42,"checkpoint":{"id":"...","summary":"...",...}}

Exporting records a ``TranscriptExported`` event in the session's log. Importing reads a
transcript into a new session whose history is identical: same messages, same seqs. These
functions work on an :class:`~ctxledger.storage.EventLog` directly, without a host: do not point
them at a session that a running :class:`~ctxledger.Host` in the same process is writing.
"""

from __future__ import annotations

import hashlib
import io
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

import msgspec
import zstandard

import ctxledger
from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config, upcast_config
from ctxledger.domain import Adopt, CharTokenizer, SessionState, decide
from ctxledger.errors import InvalidMessageError, SessionExistsError, TraceFormatError
from ctxledger.events import (
    CheckpointReverted,
    Event,
    MessageAppended,
    MessagePinned,
    SessionOpened,
    ToolResultSynthesized,
    TranscriptExported,
)
from ctxledger.messages import Message
from ctxledger.storage import EventLog
from ctxledger.tooling.timeline import walk_session

__all__ = [
    "DEFAULT_KEEP",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "SUFFIX",
    "ExportResult",
    "Transcript",
    "export_transcript",
    "import_transcript",
    "read_transcript",
    "rotate_transcripts",
]

#: The ``format`` field of every transcript header.
FORMAT_NAME = "ctxledger-transcript"
#: The current transcript format version.
FORMAT_VERSION = 1
#: File names of transcripts end with this (rotation only ever deletes such files).
SUFFIX = ".jsonl.zst"
#: How many transcripts rotation keeps in a folder by default.
DEFAULT_KEEP = 100
_ZSTD_LEVEL = 10  # archives are written once and kept long: favour ratio over speed


class _Header(msgspec.Struct, kw_only=True, tag="header", tag_field="type"):
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


_Line: TypeAlias = _Header | _MessageLine | _CheckpointLine
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


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_transcript` wrote.

    Attributes:
        path: The transcript file.
        messages: Messages written.
        checkpoints: Checkpoints written.
        sha256: SHA-256 (hex) of the file's bytes, as recorded in ``TranscriptExported``.
        size: The file's size in bytes.
        removed: Older transcripts deleted by rotation.
    """

    path: Path
    messages: int
    checkpoints: int
    sha256: str
    size: int
    removed: tuple[Path, ...] = ()


def export_transcript(
    log: EventLog,
    session_id: str,
    path: str | os.PathLike[str],
    *,
    keep: int | None = DEFAULT_KEEP,
    record: bool = True,
    clock: Callable[[], float] = time.time,
) -> ExportResult:
    """Write ``session_id`` as a transcript and record the export in its log.

    The file appears atomically (written aside, then renamed). If ``path`` is an existing folder
    the file is named ``<session>-<UTC time>.jsonl.zst`` inside it.

    Args:
        log: The event log; it must be writable when ``record`` is true.
        session_id: The session to export.
        path: The file (conventionally ``*.jsonl.zst``) or folder to write.
        keep: Then keep only the newest ``keep`` transcripts in the file's folder; ``None``
            keeps all.
        record: Record a ``TranscriptExported`` event.
        clock: Returns the current unix time.

    Raises:
        UnknownSessionError: The session has no events.
        StorageError: The event cannot be recorded.
        OSError: The file cannot be written.
    """
    state_, positions = _fold_with_positions(log, session_id)
    exported_at = clock()
    target = Path(path)
    if target.is_dir():
        target = _fresh_name(target, session_id, exported_at)
    header = _Header(
        format=FORMAT_NAME,
        version=FORMAT_VERSION,
        session_id=session_id,
        config=state_.config,
        messages=len(state_.history),
        checkpoints=len(state_.checkpoints),
        pins=sorted(state_.pins),
        forked_from=state_.forked_from,
        exported_at=exported_at,
        ctxledger=ctxledger.__version__,
    )
    data = _compress(_lines(header, state_, positions))
    _write_atomically(target, data)
    digest = hashlib.sha256(data).hexdigest()
    if record:
        exported = TranscriptExported(
            path=str(target.resolve()),
            messages=header.messages,
            checkpoints=header.checkpoints,
            sha256=digest,
        )
        log.append(session_id, [exported], expected_seq=log.last_seq(session_id))
    removed = rotate_transcripts(target.parent, keep) if keep is not None else []
    return ExportResult(
        path=target,
        messages=header.messages,
        checkpoints=header.checkpoints,
        sha256=digest,
        size=len(data),
        removed=tuple(removed),
    )


def read_transcript(path: str | os.PathLike[str]) -> Transcript:
    """Read and check a transcript file.

    Raises:
        TraceFormatError: The file is not a transcript, or a line is malformed (it names the
            1-based line); seqs must run 1, 2, 3 … and checkpoints must follow their message.
        OSError: The file cannot be read.
    """
    source = Path(path)
    header: _Header | None = None
    messages: list[Message] = []
    checkpoints: list[tuple[int, Checkpoint]] = []
    number = 0
    for number, raw in _decompressed_lines(source):
        try:
            line = _decoder.decode(raw) if number > 1 else _header_line(raw)
        except msgspec.DecodeError as exc:
            raise TraceFormatError(source, number, f"not a transcript line: {exc}") from None
        if number == 1:
            if not isinstance(line, _Header) or line.format != FORMAT_NAME:
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


def import_transcript(
    log: EventLog,
    source: str | os.PathLike[str] | Transcript,
    session_id: str | None = None,
    *,
    clock: Callable[[], float] = time.time,
) -> str:
    """Read a transcript into a new session with the identical history; return its id.

    The whole session is written in one atomic batch: it appears complete, or not at all.

    Args:
        log: The (writable) event log.
        source: The transcript file, or a transcript already read with :func:`read_transcript`.
        session_id: The new session's id; by default ``<exported id>-imported`` (with a number
            appended while that is taken).
        clock: Returns the current unix time.

    Raises:
        TraceFormatError: The file is not a valid transcript (it names the line).
        SessionExistsError: ``session_id`` is taken.
        StorageError: The log cannot be written.
    """
    if isinstance(source, Transcript):
        transcript, path = source, Path(source.path)
    else:
        transcript, path = read_transcript(source), Path(source)
    if session_id is None:
        session_id = _free_id(log, f"{transcript.session_id}-imported")
    elif log.last_seq(session_id) != 0:
        raise SessionExistsError(f"session {session_id!r} already exists")
    events = _import_events(transcript, session_id, clock(), path)
    log.append(session_id, events, expected_seq=0)
    return session_id


def rotate_transcripts(folder: str | os.PathLike[str], keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` transcripts (``*.jsonl.zst``) in ``folder``.

    Newest means latest modification time (the name breaks ties). Other files are left alone.

    Returns:
        The deleted files.

    Raises:
        ValueError: ``keep`` is negative.
    """
    if keep < 0:
        raise ValueError(f"keep must be >= 0, got {keep}")
    files = [p for p in Path(folder).iterdir() if p.name.endswith(SUFFIX) and p.is_file()]
    files.sort(key=lambda p: (p.stat().st_mtime_ns, p.name), reverse=True)
    removed = files[keep:]
    for stale in removed:
        stale.unlink(missing_ok=True)
    return removed


# --- helpers --------------------------------------------------------------------------------------


def _fold_with_positions(log: EventLog, session_id: str) -> tuple[SessionState, list[int]]:
    """Fold the session; also return, per checkpoint, the newest message seq when it was made.

    A fork's inherited checkpoints are placed at the fork point.
    """
    state: SessionState | None = None
    positions: list[int] = []
    for _, state in walk_session(log, session_id):
        while len(positions) < len(state.checkpoints):
            positions.append(state.last_seq)
    assert state is not None  # walk_session raises on an unknown session
    return state, positions


def _lines(header: _Header, state: SessionState, positions: list[int]) -> Iterator[bytes]:
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


def _write_atomically(target: Path, data: bytes) -> None:
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


def _import_events(transcript: Transcript, session_id: str, now: float, path: Path) -> list[Event]:
    """Turn a transcript into the events of a new session, checking it as appends would."""
    state = SessionState.new(session_id, transcript.config)
    events: list[Event] = [
        SessionOpened(session_id=session_id, config=transcript.config, created_at=now)
    ]
    checkpoints = iter(transcript.checkpoints)
    upcoming = next(checkpoints, None)
    for message in transcript.messages:
        while upcoming is not None and upcoming[0] < (message.seq or 0):
            events.extend(_checkpoint_events(state, upcoming[1]))
            upcoming = next(checkpoints, None)
        try:
            (checked,) = state.check_append([message])
        except InvalidMessageError as exc:
            raise TraceFormatError(path, (message.seq or 0) + 1, str(exc)) from None
        event: Event = (
            ToolResultSynthesized(message=checked)
            if checked.metadata.get("synthetic") == "interrupted"
            else MessageAppended(message=checked)
        )
        state.apply(event)
        events.append(event)
    while upcoming is not None:
        events.extend(_checkpoint_events(state, upcoming[1]))
        upcoming = next(checkpoints, None)
    events.extend(MessagePinned(seq=seq) for seq in transcript.pins if 1 <= seq <= state.last_seq)
    return events


def _checkpoint_events(state: SessionState, checkpoint: Checkpoint) -> tuple[Event, ...]:
    events: tuple[Event, ...]
    active = state.active_checkpoint
    if active is not None and any(made.id == checkpoint.id for made in state.checkpoints):
        # Listed again: the active checkpoint was reverted and this one restored.
        events = (CheckpointReverted(checkpoint_id=active.id, restored=checkpoint),)
    else:
        request = Adopt(checkpoint=checkpoint, compaction_id=f"import-{checkpoint.id}")
        events = decide(
            state, request, tokenizer=CharTokenizer(), new_id=_no_id, now=_no_time
        ).events
    for event in events:
        state.apply(event)
    return events


def _no_id() -> str:
    raise AssertionError("adopting a checkpoint makes no new id")


def _no_time() -> float:
    raise AssertionError("adopting a checkpoint reads no clock")


def _free_id(log: EventLog, base: str) -> str:
    candidate, number = base, 1
    while log.last_seq(candidate) != 0:
        number += 1
        candidate = f"{base}-{number}"
    return candidate


def _fresh_name(folder: Path, session_id: str, when: float) -> Path:
    """``<session>-<UTC time to the millisecond>.jsonl.zst``, numbered if that is taken."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in session_id) or "session"
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(when)) + f"{int(when * 1000) % 1000:03d}Z"
    target, number = folder / f"{safe}-{stamp}{SUFFIX}", 1
    while target.exists():
        number += 1
        target = folder / f"{safe}-{stamp}-{number}{SUFFIX}"
    return target
