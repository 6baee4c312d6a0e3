"""What the HTTP summarisers share: one ``httpx.Client``, the call, and failure handling.

A summariser must never break a compaction: any failure (connection refused, timeout, an HTTP
error status, a body that is not JSON or lacks the text) is logged and becomes ``None``, which
the compaction records as ``summary_unavailable`` while the previous checkpoint stays active.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self

import httpx

from ctxledger._logging import get_logger
from ctxledger.summarizers._prompt import build_prompt, fit
from ctxledger.summarizers.base import SummaryRequest

__all__ = ["HttpSummarizer"]

# Response bodies quoted in logs are cut to this many characters.
_log = get_logger(__name__)
_LOGGED_BODY_CHARS = 500


class HttpSummarizer:
    """Base of the HTTP summarisers; subclasses build the payload and read the answer.

    Args:
        provider: The name logged with every event (``openai``, ``anthropic``).
        url: The endpoint that is POSTed to.
        model: The model name sent with each request.
        headers: Headers sent with every request (authentication, API version).
        timeout: Seconds for the whole request (connect, write, read) before giving up.
        max_input_chars: The most characters of prompt sent per request.
    """

    provider = "http"

    def __init__(
        self,
        *,
        url: str,
        model: str,
        headers: Mapping[str, str],
        timeout: float,
        max_input_chars: int,
    ) -> None:
        self.url = url
        self.model = model
        self.timeout = timeout
        self.max_input_chars = max_input_chars
        self._client = httpx.Client(timeout=timeout, headers=dict(headers))

    def __repr__(self) -> str:
        # Never the headers: they hold the API key.
        return f"{type(self).__name__}(url={self.url!r}, model={self.model!r})"

    def payload(self, system: str, user: str, request: SummaryRequest) -> dict[str, Any]:
        """Build the JSON body of one request (implemented by each provider)."""
        raise NotImplementedError

    def answer(self, body: Any) -> str:
        """Read the summary text out of a response body (implemented by each provider).

        Raises:
            AttributeError, KeyError, IndexError, TypeError, ValueError: The body lacks the
                expected fields.
        """
        raise NotImplementedError

    def __call__(self, request: SummaryRequest, /) -> str | None:
        """Ask the model for a summary of ``request``.

        Args:
            request: The messages, previous summary, focus and size limit.

        Returns:
            The model's summary cut to ``request.max_chars`` (at a line break when one is near),
            ``""`` when ``max_chars`` leaves no room, or ``None`` when the call failed; every
            failure is logged as a warning.
        """
        if request.max_chars <= 0:
            return ""
        log = _log.bind(
            summarizer=self.provider, model=self.model, url=self.url
        )
        if self._client.is_closed:
            log.warning("summarizer_closed")
            return None
        system, user = build_prompt(request, self.max_input_chars)
        try:
            response = self._client.post(self.url, json=self.payload(system, user, request))
        except httpx.TimeoutException as exc:
            log.warning("summarizer_timeout", timeout=self.timeout, error=type(exc).__name__)
            return None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            log.warning("summarizer_request_failed", error=f"{type(exc).__name__}: {exc}")
            return None
        if not response.is_success:
            log.warning(
                "summarizer_http_error",
                status=response.status_code,
                body=response.text[:_LOGGED_BODY_CHARS],
            )
            return None
        try:
            text = self.answer(response.json())
        except (AttributeError, KeyError, IndexError, TypeError, ValueError) as exc:
            log.warning(
                "summarizer_bad_response",
                error=f"{type(exc).__name__}: {exc}",
                body=response.text[:_LOGGED_BODY_CHARS],
            )
            return None
        if not text.strip():
            log.warning("summarizer_empty_answer")
            return None
        return fit(text, request.max_chars)

    def close(self) -> None:
        """Close the HTTP client and its connections; later calls return ``None``."""
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
