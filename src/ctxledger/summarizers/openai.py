"""A summariser for any OpenAI-compatible chat endpoint: OpenAI, vLLM, llama.cpp, Ollama."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ctxledger.summarizers._http import HttpSummarizer
from ctxledger.summarizers.base import SummaryRequest

__all__ = ["OpenAIChatSummarizer"]


class OpenAIChatSummarizer(HttpSummarizer):
    """Summarise with a model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    The request carries a structured prompt (completed work; current state and in-progress
    task; files and identifiers; open problems; decisions; the focus), the previous summary to
    merge, and the messages rendered compactly with long tool results clipped to head and tail.
    Failures and timeouts are logged and return ``None``. The client is reusable and
    thread-safe; close it with :meth:`close` or use it as a context manager.

    Example:
        >>> summarize = OpenAIChatSummarizer("http://127.0.0.1:8000/v1", "qwen2.5-7b-instruct")
        >>> summarize.url
        'http://127.0.0.1:8000/v1/chat/completions'
        >>> summarize.close()

    Args:
        base_url: The API root, including the version segment (``https://api.openai.com/v1``,
            ``http://127.0.0.1:8000/v1``); ``/chat/completions`` is appended.
        model: The model name.
        api_key: Sent as ``Authorization: Bearer …``; defaults to ``$OPENAI_API_KEY``; no header
            is sent when neither is set (local servers rarely need one).
        timeout: Seconds before a request is abandoned (the call then returns ``None``).
        max_tokens: ``max_tokens`` of the request; omitted when ``None``.
        temperature: Sampling temperature; 0 for the most repeatable summaries.
        extra_headers: More headers for every request (a gateway's routing or auth headers).
        max_input_chars: The most characters of prompt per request; the transcript is clipped
            to fit.
    """

    provider = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        *,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        extra_headers: Mapping[str, str] | None = None,
        max_input_chars: int = 200_000,
    ) -> None:
        api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        headers.update(extra_headers or {})
        super().__init__(
            url=base_url.rstrip("/") + "/chat/completions",
            model=model,
            headers=headers,
            timeout=timeout,
            max_input_chars=max_input_chars,
        )
        self.max_tokens = max_tokens
        self.temperature = temperature

    def payload(self, system: str, user: str, request: SummaryRequest) -> dict[str, Any]:
        """Build a chat-completions body: a system and a user message."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            "temperature": self.temperature,
        }
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        return body

    def answer(self, body: Any) -> str:
        """Read ``choices[0].message.content`` (a string, or a list of text parts)."""
        content = body["choices"][0]["message"]["content"]
        if isinstance(content, list):
            content = "".join(
                part["text"] for part in content if isinstance(part, dict) and "text" in part
            )
        if not isinstance(content, str):
            raise TypeError(f"message content is {type(content).__name__}, not a string")
        return content
