"""The LLM summariser calls seen by :mod:`ctxledger.integrations.otel`, kept until the log says
which compaction each one served (the session is not known on the thread the summariser runs).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SummaryCall", "SummaryCalls"]

_KEPT_CALLS = 512  # LLM summariser calls waiting to be matched with the compaction they served


@dataclass
class SummaryCall:
    """One LLM summariser call, as seen when it was made."""

    start_ns: int
    provider: str
    model: str
    url: str
    previous: str | None
    end_ns: int = 0
    output: str | None = None
    error: str | None = None
    usage: Any = None
    response: dict[str, Any] = field(default_factory=dict)


class SummaryCalls:
    """Records the LLM summariser calls (any thread) until the log says which compaction each
    served; the session is not known where the summariser runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: OrderedDict[int, SummaryCall] = OrderedDict()
        self._local = threading.local()
        self._number = 0

    def wrap_call(self, wrapped: Callable[..., Any], instance: Any, args: Any, kw: Any) -> Any:
        """Wraps ``HttpSummarizer.__call__``: times the call, keeps its outcome."""
        request = args[0] if args else kw.get("request")
        call = SummaryCall(
            start_ns=time.time_ns(),
            provider=str(getattr(instance, "provider", "")),
            model=str(getattr(instance, "model", "")),
            url=str(getattr(instance, "url", "")),
            previous=getattr(request, "previous_summary", None),
        )
        self._local.call = call
        try:
            result = wrapped(*args, **kw)
        except BaseException as exc:
            call.error = type(exc).__qualname__
            raise
        finally:
            self._local.call = None
            call.end_ns = time.time_ns()
            with self._lock:
                self._number += 1
                self._done[self._number] = call
                while len(self._done) > _KEPT_CALLS:
                    self._done.popitem(last=False)
        call.output = result if isinstance(result, str) else None
        if not result and call.error is None:
            call.error = "summary_unavailable"
        return result

    def wrap_answer(self, wrapped: Callable[..., Any], instance: Any, args: Any, kw: Any) -> Any:
        """Wraps the summarisers' ``answer(body)``: keeps the response's usage and model."""
        call: SummaryCall | None = getattr(self._local, "call", None)
        body = args[0] if args else kw.get("body")
        if call is not None and isinstance(body, dict):
            call.usage = body.get("usage")
            call.response = {key: body.get(key) for key in ("model", "id", "stop_reason")}
            choices = body.get("choices")
            if isinstance(choices, list) and choices and isinstance(choices[0], dict):
                call.response["stop_reason"] = choices[0].get("finish_reason")
        return wrapped(*args, **kw)

    def take_chain(self, summary: str, calls: int) -> list[SummaryCall]:
        """The calls that wrote ``summary``: the last one returned it, each earlier one returned
        the previous summary of the next (chunked summaries), oldest first."""
        chain: list[SummaryCall] = []
        wanted: str | None = summary
        with self._lock:
            while wanted and len(chain) < max(calls, 1):
                found = next((k for k, c in self._done.items() if c.output == wanted), None)
                if found is None:
                    break
                call = self._done.pop(found)
                chain.append(call)
                wanted = call.previous
        return chain[::-1]

    def take_failed(self, start_ns: int, end_ns: int) -> list[SummaryCall]:
        """Failed calls that ended in ``[start_ns, end_ns]``."""
        with self._lock:
            keys = [
                k
                for k, c in self._done.items()
                if c.error and c.output is None and start_ns <= c.end_ns <= end_ns
            ]
            return [self._done.pop(k) for k in keys]
