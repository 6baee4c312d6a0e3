"""is_prompt_too_long: provider errors in every shape, and what it must not match."""

from __future__ import annotations

from typing import Any

import pytest

from ctxledger.domain import is_prompt_too_long


class _Response:
    def __init__(self, status_code: int, text: str = "") -> None:
        self.status_code = status_code
        self.text = text


class _APIError(Exception):
    """Shaped like openai/anthropic SDK errors: message, status_code, body, response."""

    def __init__(self, message: str, *, status_code: int = 400, body: Any = None, code: Any = None):
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.body = body
        self.code = code
        self.response = _Response(status_code)


OPENAI_BODY = {
    "error": {
        "message": "This model's maximum context length is 8192 tokens. However, your messages "
        "resulted in 9001 tokens.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
ANTHROPIC_BODY = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 210000 tokens > 200000 maximum",
    },
}


@pytest.mark.parametrize(
    "error",
    [
        "prompt is too long: 210000 tokens > 200000 maximum",
        "This model's maximum context length is 8192 tokens",
        "Input exceeds the context window of this model",
        "Too many tokens in request",
        "Request too large for model",
        "the request exceeds the available context size, try increasing it",  # llama.cpp
        "Input is too long for requested model.",  # Bedrock
        "context_length_exceeded",
        b"413 Request Entity Too Large",
        413,
        OPENAI_BODY,
        ANTHROPIC_BODY,
        {"status_code": 413},
        {"error": {"code": "context_length_exceeded", "message": "x"}},
        [{"error": {"message": "prompt is too long"}}],
        _APIError("Error code: 400", body=OPENAI_BODY),
        _APIError("bad request", code="context_length_exceeded"),
        _APIError("gateway said no", status_code=413),
        RuntimeError("wrapped", _APIError("prompt is too long")),
    ],
    ids=lambda value: type(value).__name__ + ":" + str(value)[:40],
)
def test_recognised(error: object) -> None:
    """Each shape of a too-long rejection is recognised."""
    assert is_prompt_too_long(error)


def test_recognised_through_exception_cause() -> None:
    """An error raised from a provider error is recognised through __cause__."""
    try:
        try:
            raise _APIError("prompt is too long", status_code=400)
        except _APIError as inner:
            raise RuntimeError("step failed") from inner
    except RuntimeError as outer:
        assert is_prompt_too_long(outer)


def test_recognised_from_an_http_response_attribute() -> None:
    """An error whose .response has status 413 or a matching body is recognised."""

    class HTTPError(Exception):
        def __init__(self, response: _Response) -> None:
            super().__init__("HTTP error")
            self.response = response

    assert is_prompt_too_long(HTTPError(_Response(413)))
    assert is_prompt_too_long(HTTPError(_Response(400, '{"error": "context window exceeded"}')))


@pytest.mark.parametrize(
    "error",
    [
        None,
        "",
        "Rate limit reached for gpt-4 on tokens per min (TPM)",
        "Too many requests",
        429,
        400,
        True,
        {"error": {"type": "authentication_error", "message": "invalid x-api-key"}},
        _APIError("Overloaded", status_code=529),
        ValueError("invalid literal for int()"),
        object(),
    ],
    ids=lambda value: type(value).__name__ + ":" + str(value)[:40],
)
def test_not_recognised(error: object) -> None:
    """Other errors are not mistaken for a too-long prompt."""
    assert not is_prompt_too_long(error)


def test_hostile_objects_do_not_raise() -> None:
    """Attributes and __str__ that raise make the answer False, not an exception."""

    class Hostile:
        @property
        def message(self) -> str:
            raise RuntimeError("no")

        def __str__(self) -> str:
            raise RuntimeError("no")

    assert not is_prompt_too_long(Hostile())


def test_cyclic_errors_terminate() -> None:
    """An exception whose cause chain loops is handled."""
    first, second = RuntimeError("a"), RuntimeError("b")
    first.__cause__, second.__cause__ = second, first
    assert not is_prompt_too_long(first)
