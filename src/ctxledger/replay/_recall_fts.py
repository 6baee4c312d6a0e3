"""The SQLite FTS5 index behind recall: one log's messages, kept in step with its history.

It holds every message of a session (content, tool-call names, the commands their arguments
carry), keyed by ``(session key << 32) | seq``, so one session's rows are a rowid range. Before
each search it catches up with the session's history (the messages appended since); if the log
does not hold what the index says it indexed (fewer messages, or a different message at the
last indexed seq or at seq 1, as after the folder was replaced), the session's rows are dropped
and rebuilt from the log. Ranking is FTS5's BM25, snippets FTS5's ``snippet()``. Which messages
a search leaves out (those the view shows raw) is the caller's: see
:mod:`ctxledger.replay.recall_index`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

import msgspec

from ctxledger.domain import extract as ex
from ctxledger.domain.state import SessionState
from ctxledger.errors import StorageError
from ctxledger.messages import Message
from ctxledger.storage import EventLog

__all__ = ["INDEX_FILE", "RecallIndex", "fts_query"]

#: The index file inside an LMDB log's folder.
INDEX_FILE = "recall-index.sqlite3"

_SCHEMA_VERSION = "1"
_SEQ_BITS = 32
_INSERT_BATCH = 512
_WORD = re.compile(r"\w+")
_SNIPPET_TOKENS = 24


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
