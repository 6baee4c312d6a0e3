"""Recall: full-text search over the messages a view no longer shows raw (``Session.recall``).

Ranking is SQLite's FTS5 with BM25 (``bm25()``), snippets are FTS5's ``snippet()``: no
hand-written ranking. The index is a projection of the log, never a second source of truth:

* it holds every message of a session (content, tool-call names, the commands their arguments
  carry), keyed by ``(session key << 32) | seq``, so one session's rows are a rowid range;
* before each search it catches up with the session's history (the messages appended since);
  if the log does not hold what the index says it indexed (fewer messages, or a different
  message at the last indexed seq or at seq 1, as after the folder was replaced), the session's
  rows are dropped and rebuilt from the log;
* which messages are *not* shown raw is decided at query time from the current view (summarised,
  masked or truncated), so a checkpoint, a revert or a pin never makes the index stale.

Where it lives: for an :class:`~ctxledger.storage.LmdbEventLog`, in the file
:data:`INDEX_FILE` inside the log's folder (next to ``data.mdb``; delete it any time, it is
rebuilt on the next recall); for other backends, or a folder that cannot be written, in memory
for the duration of one recall. Writers serialise on SQLite's own lock (``BEGIN IMMEDIATE``), so a
host and a ``ctxledger recall`` in another process may share the file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from ctxledger.domain import extract as ex
from ctxledger.domain.placement import PlacementKind, place_message
from ctxledger.domain.projection import assemble
from ctxledger.domain.state import SessionState
from ctxledger.errors import InvalidQueryError, InvalidToolCallError, StorageError
from ctxledger.messages import Message
from ctxledger.storage import EventLog

__all__ = [
    "DEFAULT_RECALL_LIMIT",
    "INDEX_FILE",
    "MAX_RECALL_LIMIT",
    "RECALL_DESCRIPTION",
    "RECALL_PARAMETERS",
    "RECALL_TOOL_NAME",
    "RecallHit",
    "RecallIndex",
    "answer_tool_call",
    "format_hits",
    "fts_query",
    "parse_recall_arguments",
    "recall",
    "shown_raw",
]

#: The index file inside an LMDB log's folder.
INDEX_FILE = "recall-index.sqlite3"
#: Hits returned when the caller does not say.
DEFAULT_RECALL_LIMIT = 5
#: The most hits one recall returns.
MAX_RECALL_LIMIT = 50

_SCHEMA_VERSION = "1"
_SEQ_BITS = 32
_INSERT_BATCH = 512
_WORD = re.compile(r"\w+")
_SNIPPET_TOKENS = 24


class RecallHit(msgspec.Struct, frozen=True, kw_only=True):
    """One message found by :func:`recall`.

    Attributes:
        seq: The message.
        role: Its role.
        tool_name: The tool of a tool call or result (the first call's, for an assistant message
            with several), else ``None``.
        snippet: The matching passage, matched words in ``[brackets]``.
        score: BM25 relevance (higher is better; FTS5's ``bm25()`` negated).
        placement: How the current view shows it: ``summarized``, ``masked`` or ``truncated``
            (or ``pinned`` when the pinned slot shows it cut).
    """

    seq: int
    role: str
    tool_name: str | None
    snippet: str
    score: float
    placement: PlacementKind


def shown_raw(state: SessionState) -> set[int]:
    """Return the seqs the current view shows verbatim (recall skips them)."""
    view = assemble(state, state.active_checkpoint)
    return {
        message.seq
        for message in view
        if message.seq is not None and message.content == state.history[message.seq - 1].content
    }


def _body(state: SessionState, message: Message) -> tuple[str, str | None]:
    """The searchable text of a message, and its tool name."""
    parts = [message.content]
    tool: str | None = None
    if message.role == "tool":
        tool = state.tool_name(message)
        parts.append(tool)
    for call in message.tool_calls:
        tool = tool or call.name
        command = ex.command_of(call.name, ex.decode_arguments(call.arguments))
        parts.append(f"{call.name} {command if command is not None else call.arguments}")
    return "\n".join(part for part in parts if part), tool


def _digest(message: Message) -> str:
    encoded = msgspec.msgpack.encode((message.role, message.content, message.tool_calls))
    return hashlib.blake2b(encoded, digest_size=12).hexdigest()


def fts_query(text: str) -> str:
    """Turn free text into an FTS5 query: each word (its tokens as a phrase), ORed together.

    Quoting every token keeps FTS5's operators (``AND``, ``NEAR``, ``*``, ``:``) out of the user's
    hands; BM25 ranks messages that match more and rarer words first.
    """
    phrases = []
    for word in text.split():
        tokens = _WORD.findall(word)
        if tokens:
            phrases.append('"' + " ".join(tokens) + '"')
    return " OR ".join(dict.fromkeys(phrases))


class RecallIndex:
    """The SQLite FTS5 index of one log's messages (see the module docstring).

    Args:
        path: The index file, or ``None`` for an index in memory.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        target = str(self.path) if self.path is not None else ":memory:"
        try:
            self._db = sqlite3.connect(target, timeout=30.0, isolation_level=None)
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open the recall index {target!r}: {exc}") from exc
        self._prepare()

    @classmethod
    def for_log(cls, log: EventLog) -> RecallIndex:
        """Open the index of ``log``: its folder's :data:`INDEX_FILE`, else one in memory."""
        folder = getattr(log, "path", None)
        if isinstance(folder, Path) and folder.is_dir():
            try:
                return cls(folder / INDEX_FILE)
            except StorageError:
                pass  # a read-only folder: fall back to memory
        return cls(None)

    def close(self) -> None:
        """Close the index."""
        self._db.close()

    def __enter__(self) -> RecallIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _prepare(self) -> None:
        db = self._db
        try:
            if self.path is not None:
                db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            found = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if found is not None and found[0] != _SCHEMA_VERSION:
                db.execute("DROP TABLE IF EXISTS sessions")
                db.execute("DROP TABLE IF EXISTS messages")
            db.execute(
                "CREATE TABLE IF NOT EXISTS sessions (key INTEGER PRIMARY KEY, "
                "session_id TEXT UNIQUE NOT NULL, indexed_through INTEGER NOT NULL, "
                "first_digest TEXT NOT NULL, last_digest TEXT NOT NULL)"
            )
            db.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS messages USING fts5("
                "body, role UNINDEXED, tool UNINDEXED, tokenize = 'unicode61')"
            )
            db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (_SCHEMA_VERSION,))
        except sqlite3.Error as exc:
            raise StorageError(f"cannot prepare the recall index: {exc}") from exc

    @contextlib.contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def sync(self, state: SessionState) -> int:
        """Bring the session's rows up to date with ``state``'s history; return rows added.

        Raises:
            StorageError: SQLite failed.
        """
        history = state.history
        last = state.last_seq
        try:
            with self._writing() as db:
                row = db.execute(
                    "SELECT key, indexed_through, first_digest, last_digest FROM sessions "
                    "WHERE session_id = ?",
                    (state.session_id,),
                ).fetchone()
                if row is None:
                    key = db.execute(
                        "INSERT INTO sessions (session_id, indexed_through, first_digest, "
                        "last_digest) VALUES (?, 0, '', '') RETURNING key",
                        (state.session_id,),
                    ).fetchone()[0]
                    done = 0
                else:
                    key, done, first, latest = row
                    if done and (
                        done > last
                        or first != _digest(history[0])
                        or latest != _digest(history[done - 1])
                    ):
                        low, high = _rowids(key)
                        db.execute("DELETE FROM messages WHERE rowid BETWEEN ? AND ?", (low, high))
                        done = 0
                if done == last:
                    return 0
                for start in range(done, last, _INSERT_BATCH):
                    batch = history[start : min(start + _INSERT_BATCH, last)]
                    db.executemany(
                        "INSERT INTO messages (rowid, body, role, tool) VALUES (?, ?, ?, ?)",
                        [
                            (
                                (key << _SEQ_BITS) | (message.seq or 0),
                                *_body_row(state, message),
                            )
                            for message in batch
                        ],
                    )
                db.execute(
                    "UPDATE sessions SET indexed_through = ?, first_digest = ?, last_digest = ? "
                    "WHERE key = ?",
                    (last, _digest(history[0]), _digest(history[last - 1]), key),
                )
                return last - done
        except sqlite3.Error as exc:
            raise StorageError(f"the recall index failed: {exc}") from exc

    def search(
        self, session_id: str, query: str, *, exclude: Sequence[int] = (), limit: int
    ) -> list[tuple[int, str, str | None, str, float]]:
        """Return ``(seq, role, tool, snippet, score)`` of the best matches, best first.

        Args:
            session_id: The session (its rows must be synced).
            query: Free text (see :func:`fts_query`).
            exclude: Seqs to leave out.
            limit: The most rows.
        """
        match = fts_query(query)
        if not match:
            return []
        row = self._db.execute(
            "SELECT key FROM sessions WHERE session_id = ?", (session_id,)
        ).fetchone()
        if row is None:
            return []
        low, high = _rowids(row[0])
        try:
            found = self._db.execute(
                "SELECT rowid, role, tool, "
                f"snippet(messages, 0, '[', ']', '…', {_SNIPPET_TOKENS}), bm25(messages) "
                "FROM messages WHERE messages MATCH ? AND rowid BETWEEN ? AND ? "
                "AND rowid - ? NOT IN (SELECT value FROM json_each(?)) "
                "ORDER BY bm25(messages), rowid LIMIT ?",
                (match, low, high, low, json.dumps(sorted(exclude)), limit),
            ).fetchall()
        except sqlite3.Error as exc:
            raise StorageError(f"the recall index failed: {exc}") from exc
        return [
            (rowid - low, role, tool, snippet, -score)
            for rowid, role, tool, snippet, score in found
        ]


def _rowids(key: int) -> tuple[int, int]:
    low = key << _SEQ_BITS
    return low, low + (1 << _SEQ_BITS) - 1


def _body_row(state: SessionState, message: Message) -> tuple[str, str, str | None]:
    body, tool = _body(state, message)
    return body, message.role, tool


def recall(
    log: EventLog, state: SessionState, query: str, *, limit: int = DEFAULT_RECALL_LIMIT
) -> list[RecallHit]:
    """Search the session's messages that its current view does not show raw.

    Args:
        log: The session's log (where the index file lives; see the module docstring).
        state: The session's current state (its history and view).
        query: Free text: words, paths, commands, error text.
        limit: The most hits, 1 to :data:`MAX_RECALL_LIMIT`.

    Returns:
        The hits, best first (BM25).

    Raises:
        InvalidQueryError: ``query`` is not a string, or ``limit`` is out of range.
        StorageError: The index failed.
    """
    if not isinstance(query, str):
        raise InvalidQueryError(f"query must be a string, got {type(query).__name__}")
    if not _utf8(query):
        raise InvalidQueryError("query is not valid UTF-8 (it holds a lone surrogate)")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RECALL_LIMIT:
        raise InvalidQueryError(
            f"limit must be an integer from 1 to {MAX_RECALL_LIMIT}, got {limit!r}"
        )
    if not fts_query(query) or not state.last_seq:
        return []
    with RecallIndex.for_log(log) as index:
        index.sync(state)
        rows = index.search(state.session_id, query, exclude=sorted(shown_raw(state)), limit=limit)
    return [
        RecallHit(
            seq=seq,
            role=role,
            tool_name=tool,
            snippet=snippet,
            score=round(score, 6),
            placement=place_message(state, seq).kind,
        )
        for seq, role, tool, snippet, score in rows
    ]


# --- the recall tool (schemas in ctxledger.tools) ---------------------------------------------

#: The tool's name, as the model calls it.
RECALL_TOOL_NAME = "recall"
#: What the model is told the tool does.
RECALL_DESCRIPTION = (
    "Search this conversation's earlier messages that are no longer shown in full (summarised "
    "by a compaction, or old tool output masked or truncated). Use it to get back an exact "
    "command, file path, error message or output that the summary does not show. Returns the "
    "best matches with their message number (#seq) and a snippet."
)
#: The JSON schema of the tool's arguments.
RECALL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": "Words to look for: a command, a file name, error text, a topic.",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_RECALL_LIMIT,
            "description": f"How many messages to return (default {DEFAULT_RECALL_LIMIT}).",
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}


def parse_recall_arguments(arguments: str | dict[str, Any]) -> tuple[str, int]:
    """Read ``(query, limit)`` from a recall call's arguments (a JSON object or its text).

    Raises:
        InvalidToolCallError: The arguments are not a JSON object with a non-empty string
            ``query`` and an optional integer ``limit`` in range, and nothing else.
    """
    if isinstance(arguments, str):
        try:
            decoded = json.loads(arguments or "{}")
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
            raise InvalidToolCallError(f"recall arguments are not JSON: {exc}") from None
    else:
        decoded = arguments
    if not isinstance(decoded, dict):
        raise InvalidToolCallError("recall arguments must be a JSON object")
    known = RECALL_PARAMETERS["properties"]
    unknown = [key for key in decoded if key not in known]
    if unknown:
        raise InvalidToolCallError(f"recall takes no argument {unknown[0]!r} (only query, limit)")
    query = decoded.get("query")
    if not isinstance(query, str) or not query.strip() or not _utf8(query):
        raise InvalidToolCallError("recall needs a non-empty string 'query' of valid UTF-8")
    limit = decoded.get("limit", DEFAULT_RECALL_LIMIT)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RECALL_LIMIT:
        raise InvalidToolCallError(
            f"recall 'limit' must be an integer from 1 to {MAX_RECALL_LIMIT}, got {limit!r}"
        )
    return query, limit


def format_hits(query: str, hits: Sequence[RecallHit]) -> str:
    """Render hits as the text answer of a recall call (what the model reads)."""
    if not hits:
        return f"No earlier message that the view does not show in full matches {query!r}."
    lines = [f"{len(hits)} earlier message(s) matching {query!r}, best first:"]
    for hit in hits:
        who = hit.role if hit.tool_name is None else f"{hit.role} ({hit.tool_name})"
        snippet = ex.one_line(hit.snippet)
        lines.append(f"#{hit.seq} {who}, {hit.placement}: {snippet}")
    return "\n".join(lines)


def answer_tool_call(
    recall_fn: Callable[..., list[RecallHit]], name: str, arguments: str | dict[str, Any]
) -> str:
    """Answer a model's call of a ctxledger tool; return the text to append as its result.

    Args:
        recall_fn: Runs a recall for the session (``query``, ``limit=``).
        name: The tool the model called.
        arguments: Its arguments (JSON text, as providers deliver them, or a decoded object).

    Raises:
        InvalidToolCallError: ``name`` is not a ctxledger tool, or the arguments are invalid.
    """
    if name != RECALL_TOOL_NAME:
        raise InvalidToolCallError(
            f"no ctxledger tool is named {name!r} (tools: {RECALL_TOOL_NAME!r})"
        )
    query, limit = parse_recall_arguments(arguments)
    return format_hits(query, recall_fn(query, limit=limit))


def _utf8(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
