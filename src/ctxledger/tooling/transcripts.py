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
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import ctxledger
from ctxledger.checkpoints import Checkpoint
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
from ctxledger.storage import EventLog
from ctxledger.tooling._transcript_file import (
    FORMAT_NAME,
    FORMAT_VERSION,
    SUFFIX,
    Header,
    Transcript,
    encode_transcript,
    read_transcript,
    write_atomically,
)
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

#: How many transcripts rotation keeps in a folder by default.
DEFAULT_KEEP = 100


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
    header = Header(
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
    data = encode_transcript(header, state_, positions)
    write_atomically(target, data)
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
