"""Compatibility re-export: recall moved to :mod:`ctxledger.replay.recall_index` (issue 28).

The recall index is a projection of the log and sits below the actors now; this module only keeps
the old import path working for code outside the project.
"""

from ctxledger.replay.recall_index import (
    DEFAULT_RECALL_LIMIT,
    INDEX_FILE,
    MAX_RECALL_LIMIT,
    RECALL_DESCRIPTION,
    RECALL_PARAMETERS,
    RECALL_TOOL_NAME,
    RecallHit,
    RecallIndex,
    answer_tool_call,
    format_hits,
    fts_query,
    parse_recall_arguments,
    recall,
    shown_raw,
)

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
