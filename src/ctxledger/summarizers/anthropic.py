"""A summariser for Anthropic's Messages API."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ctxledger.summarizers._http import HttpSummarizer
from ctxledger.summarizers.base import SummaryRequest

__all__ = ["AnthropicSummarizer"]

# Tokens allowed per character of summary when max_tokens is derived from max_chars; English
# prose runs at about four characters per token, code and paths nearer three.
_TOKENS_PER_CHAR = 1 / 3
_MIN_TOKENS, _MAX_TOKENS = 256, 8192


class AnthropicSummarizer(HttpSummarizer):
    """Summarise with a Claude model through Anthropic's ``/v1/messages`` endpoint.

    The prompt is the one :class:`OpenAIChatSummarizer` sends (structured sections, previous
    summary, focus, compact transcript), with the instructions as the top-level ``system`` text.
    Failures and timeouts are logged and return ``None``. The client is reusable and
    thread-safe; close it with :meth:`close` or use it as a context manager.

    Example:
        >>> summarize = AnthropicSummarizer("claude-haiku-4-5", api_key="test")
        >>> summarize.url
        'https://api.anthropic.com/v1/messages'
        >>> summarize.close()

    Args:
        model: The model name.
        api_key: Sent as ``x-api-key``; defaults to ``$ANTHROPIC_API_KEY``.
        base_url: The API root, without the version segment; ``/v1/messages`` is appended.
        timeout: Seconds before a request is abandoned (the call then returns ``None``).
        max_tokens: ``max_tokens`` of the request (the API requires one); ``None`` derives it
            from each request's ``max_chars`` (a third of it, within 256 and 8192).
        anthropic_version: The ``anthropic-version`` header.
        temperature: Sampling temperature; 0 for the most repeatable summaries.
        extra_headers: More headers for every request (``anthropic-beta``, a gateway's headers).
        max_input_chars: The most characters of prompt per request; the transcript is clipped
            to fit.
    """

    provider = "anthropic"

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str = "https://api.anthropic.com",
        timeout: float = 60.0,
        max_tokens: int | None = None,
        anthropic_version: str = "2023-06-01",
        *,
        temperature: float = 0.0,
        extra_headers: Mapping[str, str] | None = None,
        max_input_chars: int = 200_000,
    ) -> None:
        api_key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        headers = {"anthropic-version": anthropic_version}
        if api_key:
            headers["x-api-key"] = api_key
        headers.update(extra_headers or {})
        super().__init__(
            url=base_url.rstrip("/") + "/v1/messages",
            model=model,
            headers=headers,
            timeout=timeout,
            max_input_chars=max_input_chars,
        )
        self.max_tokens = max_tokens
        self.temperature = temperature

    def payload(self, system: str, user: str, request: SummaryRequest) -> dict[str, Any]:
        """Build a Messages body: top-level ``system`` text and one user message."""
        max_tokens = self.max_tokens
        if max_tokens is None:
            derived = int(request.max_chars * _TOKENS_PER_CHAR) + 64
            max_tokens = min(max(derived, _MIN_TOKENS), _MAX_TOKENS)
        return {
            "model": self.model,
            "max_tokens": max_tokens,
            "temperature": self.temperature,
            "system": system,
            "messages": [{"role": "user", "content": user}],
        }

    def answer(self, body: Any) -> str:
        """Join the ``text`` blocks of ``content`` (``content[0].text`` in the common case)."""
        blocks = body["content"]
        texts = [block["text"] for block in blocks if block.get("type", "text") == "text"]
        if not texts or not all(isinstance(text, str) for text in texts):
            raise ValueError("the response has no text content block")
        return "".join(texts)
