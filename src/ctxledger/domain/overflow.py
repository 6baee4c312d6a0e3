"""Recognising a provider's "prompt too long" rejection, whatever shape the error takes."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["is_prompt_too_long"]

# Phrases providers and gateways use for an oversized prompt (OpenAI, Azure, Anthropic, Bedrock,
# Vertex/Gemini, Mistral, vLLM, llama.cpp, Ollama, LiteLLM, OpenRouter), matched case-insensitively.
_TEXT = re.compile(
    r"prompt is too long|prompt too long|prompt_too_long|maximum context length"
    r"|context[ _]length[ _]exceeded|context window|context[_ ]size|too many tokens"
    r"|request too large|request_too_large|request entity too large|payload too large"
    r"|input is too long|input too long|exceeds? the (?:model's )?(?:maximum|max) (?:number of )?"
    r"(?:context|input|prompt)?\s*(?:length|tokens)|maximum number of tokens"
    r"|exceeds? (?:the )?(?:available )?context|string_above_max_length|reduce the length"
    r"|too long for (?:the )?(?:model|context)",
    re.IGNORECASE,
)
# Machine-readable codes and error types that mean the same.
_CODES = frozenset(
    {
        "context_length_exceeded",
        "prompt_too_long",
        "request_too_large",
        "string_above_max_length",
        "model_context_window_exceeded",
        "exceed_context_size_error",
        "context_window_exceeded",
        "input_too_long",
    }
)
_STATUS_FIELDS = ("status_code", "status", "http_status", "statusCode")
_CODE_FIELDS = ("code", "type", "error_code", "reason")
_TEXT_FIELDS = ("message", "detail", "error", "body", "text", "content", "msg", "description")
_MAX_DEPTH = 6


def is_prompt_too_long(error_or_text: object) -> bool:
    """Whether a provider error means the prompt exceeded the model's context.

    Understands HTTP 413, codes such as ``context_length_exceeded``, and texts such as
    "prompt is too long", "maximum context length", "context window", "too many tokens" and
    "request too large", found in strings, bytes, dicts and lists (error bodies), and objects
    with ``status_code`` / ``status`` / ``code`` / ``type`` / ``body`` / ``message`` /
    ``response`` attributes (OpenAI, Anthropic and httpx errors), following ``__cause__`` too.

    Args:
        error_or_text: An exception, a response body, a status code or a message.
    """
    return _check(error_or_text, 0, set())


def _check(value: Any, depth: int, seen: set[int]) -> bool:
    if value is None or depth > _MAX_DEPTH or id(value) in seen:
        return False
    seen.add(id(value))
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value == 413
    if isinstance(value, bytes | bytearray):
        return _text_matches(bytes(value).decode("utf-8", "replace"))
    if isinstance(value, str):
        return _text_matches(value)
    if isinstance(value, Mapping):
        return _check_mapping(value, depth, seen)
    if isinstance(value, list | tuple):
        return any(_check(item, depth + 1, seen) for item in value[:32])
    return _check_object(value, depth, seen)


def _text_matches(text: str) -> bool:
    text = text[:20000]
    return text.strip().lower() in _CODES or _TEXT.search(text) is not None


def _check_mapping(value: Mapping[Any, Any], depth: int, seen: set[int]) -> bool:
    for key in _STATUS_FIELDS:
        if _is_413(value.get(key)):
            return True
    for key in _CODE_FIELDS:
        code = value.get(key)
        if isinstance(code, str) and code.lower() in _CODES:
            return True
    return any(_check(item, depth + 1, seen) for item in list(value.values())[:32])


def _check_object(value: Any, depth: int, seen: set[int]) -> bool:
    for name in _STATUS_FIELDS:
        if _is_413(_attribute(value, name)):
            return True
    for name in _CODE_FIELDS:
        code = _attribute(value, name)
        if isinstance(code, str) and code.lower() in _CODES:
            return True
    for name in _TEXT_FIELDS:
        if _check(_attribute(value, name), depth + 1, seen):
            return True
    response = _attribute(value, "response")
    if response is not None and _check_response(response, depth, seen):
        return True
    if isinstance(value, BaseException):
        if any(_check(arg, depth + 1, seen) for arg in value.args[:8]):
            return True
        if _check(value.__cause__, depth + 1, seen) or _check(value.__context__, depth + 1, seen):
            return True
    try:
        return _text_matches(str(value))
    except Exception:  # a hostile __str__ must not turn a check into a crash
        return False


def _check_response(response: Any, depth: int, seen: set[int]) -> bool:
    # httpx/requests responses: status code, then the body text.
    for name in _STATUS_FIELDS:
        if _is_413(_attribute(response, name)):
            return True
    return _check(_attribute(response, "text"), depth + 1, seen)


def _attribute(value: Any, name: str) -> Any:
    try:
        found = getattr(value, name, None)
    except Exception:  # properties of error objects may raise (e.g. an unread stream)
        return None
    return None if callable(found) else found


def _is_413(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value == 413
    return isinstance(value, str) and value.strip() == "413"
