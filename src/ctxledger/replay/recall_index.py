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

import json
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from ctxledger.domain import extract as ex
from ctxledger.domain.placement import PlacementKind, place_message
from ctxledger.domain.projection import assemble
from ctxledger.domain.state import SessionState
from ctxledger.errors import InvalidQueryError, InvalidToolCallError
from ctxledger.replay._recall_fts import INDEX_FILE, RecallIndex, fts_query
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
    "check_recall_arguments",
    "format_hits",
    "fts_query",
    "parse_recall_arguments",
    "recall",
    "shown_raw",
]

#: Hits returned when the caller does not say.
DEFAULT_RECALL_LIMIT = 5
#: The most hits one recall returns.
MAX_RECALL_LIMIT = 50


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
    check_recall_arguments(query, limit)
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


def check_recall_arguments(query: object, limit: object) -> None:
    """Check a recall's ``query`` and ``limit`` (before anything is read).

    Raises:
        InvalidQueryError: ``query`` is not a string of valid UTF-8, or ``limit`` is not an
            integer from 1 to :data:`MAX_RECALL_LIMIT`.
    """
    if not isinstance(query, str):
        raise InvalidQueryError(f"query must be a string, got {type(query).__name__}")
    if not _utf8(query):
        raise InvalidQueryError("query is not valid UTF-8 (it holds a lone surrogate)")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RECALL_LIMIT:
        raise InvalidQueryError(
            f"limit must be an integer from 1 to {MAX_RECALL_LIMIT}, got {limit!r}"
        )


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
