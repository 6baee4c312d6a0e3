"""Tools an agent can call on its own context: the ``recall`` tool, for OpenAI and Anthropic.

Give the model the schema, and answer its calls with :meth:`ctxledger.Session.call_tool`; the
answer is appended as the tool result, like any other::

    from ctxledger.tools import recall_tool

    tools = [recall_tool().openai]            # or recall_tool().anthropic
    ...                                        # the model answers with a tool call
    answer = session.call_tool(call.name, call.arguments)
    session.append(Message.tool(answer, call.id, call.name))

The tool searches the session's messages that the view no longer shows in full (summarised,
masked or truncated), ranked by SQLite FTS5's BM25 (see :mod:`ctxledger.replay.recall_index`).
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec

from ctxledger.replay.recall_index import (
    RECALL_DESCRIPTION,
    RECALL_PARAMETERS,
    RECALL_TOOL_NAME,
    answer_tool_call,
)

__all__ = ["TOOL_NAMES", "ToolSchemas", "answer_tool_call", "recall_tool"]

#: The names of the tools :meth:`ctxledger.Session.call_tool` answers.
TOOL_NAMES: tuple[str, ...] = (RECALL_TOOL_NAME,)


class ToolSchemas(msgspec.Struct, frozen=True, kw_only=True):
    """One tool's definition in each provider's format.

    Attributes:
        name: The tool's name.
        openai: For OpenAI-compatible chat APIs' ``tools`` list
            (``{"type": "function", "function": {...}}``).
        anthropic: For the Anthropic messages API's ``tools`` list
            (``{"name", "description", "input_schema"}``).
    """

    name: str
    openai: dict[str, Any]
    anthropic: dict[str, Any]


def recall_tool() -> ToolSchemas:
    """Return the ``recall`` tool's schemas (fresh dicts: callers may change them).

    Example:
        >>> from ctxledger.tools import recall_tool
        >>> recall_tool().openai["function"]["name"]
        'recall'
        >>> sorted(recall_tool().anthropic)
        ['description', 'input_schema', 'name']
    """
    parameters = copy.deepcopy(RECALL_PARAMETERS)
    return ToolSchemas(
        name=RECALL_TOOL_NAME,
        openai={
            "type": "function",
            "function": {
                "name": RECALL_TOOL_NAME,
                "description": RECALL_DESCRIPTION,
                "parameters": parameters,
            },
        },
        anthropic={
            "name": RECALL_TOOL_NAME,
            "description": RECALL_DESCRIPTION,
            "input_schema": copy.deepcopy(parameters),
        },
    )
