"""Provider adapters: render a view's messages for the OpenAI and Anthropic chat APIs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ctxledger.messages import Message

__all__ = ["to_anthropic", "to_openai"]

# Anthropic's first turn must be a user turn; used only when a view starts with an assistant.
_CONTINUATION = "[conversation continues]"


def to_openai(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Render view messages in OpenAI chat format.

    The summary becomes a system message; assistant tool calls take the
    ``{"id", "type": "function", "function": {"name", "arguments"}}`` shape and tool results
    ``{"role": "tool", "tool_call_id", "content"}``.
    """
    rendered: list[dict[str, Any]] = []
    for message in messages:
        role = message.role
        if role in ("system", "summary"):
            rendered.append({"role": "system", "content": message.content})
        elif role == "user":
            rendered.append({"role": "user", "content": message.content})
        elif role == "assistant":
            item: dict[str, Any] = {"role": "assistant", "content": message.content}
            if message.tool_calls:
                if not message.content:
                    item["content"] = None  # the API's spelling of "only tool calls"
                item["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for call in message.tool_calls
                ]
            rendered.append(item)
        else:
            rendered.append(
                {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
            )
    return rendered


def to_anthropic(messages: Sequence[Message]) -> dict[str, Any]:
    """Render view messages for the Anthropic messages API.

    Leading system messages become the top-level ``system`` text; the summary is the first
    user-side block (that API rejects mid-conversation system messages); later system messages
    become user-side text. Tool calls are ``tool_use`` blocks, results ``tool_result`` blocks,
    and consecutive turns of one role are merged, since the API requires alternation.

    Returns:
        ``{"system": str, "messages": [{"role": ..., "content": [blocks]}, ...]}``.
    """
    system: list[str] = []
    summary: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    leading = True
    for message in messages:
        role = message.role
        if role == "system" and leading:
            system.append(message.content)
            continue
        if role == "summary":
            summary.append(_text(message.content or "(empty summary)"))
            continue
        leading = False
        if role == "assistant":
            blocks = [_text(message.content)] if message.content else []
            blocks.extend(
                {
                    "type": "tool_use",
                    "id": call.id,
                    "name": call.name,
                    "input": json.loads(call.arguments),
                }
                for call in message.tool_calls
            )
            _add(turns, "assistant", blocks)
        elif role == "tool":
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
            if message.content:  # an empty result is sent without content, not as ""
                block["content"] = message.content
            _add(turns, "user", [block])
        else:  # user, or a system message after the conversation started
            _add(turns, "user", [_text(message.content)] if message.content else [])
    if summary:
        if turns and turns[0]["role"] == "user":
            turns[0]["content"][:0] = summary
        else:
            turns.insert(0, {"role": "user", "content": summary})
    elif turns and turns[0]["role"] == "assistant":
        turns.insert(0, {"role": "user", "content": [_text(_CONTINUATION)]})
    return {"system": "\n\n".join(system), "messages": turns}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _add(turns: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    # Empty text blocks are rejected by the API: a message without blocks adds nothing.
    if not blocks:
        return
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"].extend(blocks)
    else:
        turns.append({"role": role, "content": blocks})
