"""Usage as providers report it: OpenAI and Anthropic usage objects, and a session's totals.

:func:`parse_usage` reads the usage object of an OpenAI response (``prompt_tokens``,
``completion_tokens``, ``prompt_tokens_details.cached_tokens``; the Responses API's
``input_tokens``, ``output_tokens``, ``input_tokens_details.cached_tokens``) or of an Anthropic
response (``input_tokens``, ``output_tokens``, ``cache_read_input_tokens``,
``cache_creation_input_tokens``), given as a dict or as the SDKs' objects (read by attribute; no
SDK is imported). Both are normalised to :class:`ReportedUsage`, whose ``prompt_tokens`` counts
every input token of the call, cached or not, as the budget estimate needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ctxledger.errors import InvalidUsageError

__all__ = [
    "Accounting",
    "Calibration",
    "ReportedUsage",
    "UsageTotals",
    "parse_usage",
    "usage_from_counts",
]

_MISSING = object()


class ReportedUsage(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One model call's usage, normalised.

    Attributes:
        prompt_tokens: Every input token of the call (cached, written to the cache, or neither).
        completion_tokens: Output tokens.
        cached_tokens: Of ``prompt_tokens``, those read from the prompt cache.
        cache_write_tokens: Of ``prompt_tokens``, those written to the prompt cache.
    """

    prompt_tokens: int
    completion_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class UsageTotals(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A session's cumulative usage, as the provider reported it (:meth:`Session.usage`).

    Attributes:
        input_tokens: Every input token of every call (cached and cache writes included).
        cached_tokens: Of ``input_tokens``, those read from the prompt cache.
        cache_write_tokens: Of ``input_tokens``, those written to the prompt cache.
        output_tokens: Output (completion) tokens.
        calls: Model calls reported (one per ``record_usage``).
    """

    input_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens: what ``Config.max_total_tokens`` caps."""
        return self.input_tokens + self.output_tokens

    @property
    def uncached_input_tokens(self) -> int:
        """Input tokens neither read from nor written to the prompt cache."""
        return self.input_tokens - self.cached_tokens - self.cache_write_tokens

    def add(self, usage: ReportedUsage) -> UsageTotals:
        """Return the totals with one more call's ``usage`` added."""
        return UsageTotals(
            input_tokens=self.input_tokens + usage.prompt_tokens,
            cached_tokens=self.cached_tokens + usage.cached_tokens,
            cache_write_tokens=self.cache_write_tokens + usage.cache_write_tokens,
            output_tokens=self.output_tokens + usage.completion_tokens,
            calls=self.calls + 1,
        )


def _field(source: object, name: str) -> Any:
    if isinstance(source, Mapping):
        return source.get(name, _MISSING)
    return getattr(source, name, _MISSING)


def _count(source: object, name: str, where: str = "") -> int:
    value = _field(source, name)
    if value is _MISSING or value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidUsageError(f"{where}{name} must be a non-negative integer, got {value!r}")
    return value


def _has(source: object, *names: str) -> bool:
    return any(_field(source, name) not in (_MISSING, None) for name in names)


def parse_usage(usage: object) -> ReportedUsage:
    """Normalise a provider's usage object (a dict or an SDK object) to :class:`ReportedUsage`.

    OpenAI counts cached tokens inside ``prompt_tokens``; Anthropic's ``input_tokens`` excludes
    cache reads and writes, so the prompt is their sum.

    Raises:
        InvalidUsageError: A count is negative or not an integer, cached tokens exceed the
            prompt, or the object has none of the fields of either shape.
    """
    if isinstance(usage, ReportedUsage):  # a Struct checks no values: check its counts
        return usage_from_counts(
            usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens,
            usage.cache_write_tokens,
        )  # fmt: skip
    if _has(usage, "prompt_tokens", "completion_tokens"):  # OpenAI chat completions
        prompt = _count(usage, "prompt_tokens")
        details = _field(usage, "prompt_tokens_details")
        cached = 0
        if details not in (_MISSING, None):
            cached = _count(details, "cached_tokens", "prompt_tokens_details.")
        if cached > prompt:
            raise InvalidUsageError(
                f"prompt_tokens_details.cached_tokens ({cached}) exceeds prompt_tokens ({prompt})"
            )
        return ReportedUsage(
            prompt_tokens=prompt,
            completion_tokens=_count(usage, "completion_tokens"),
            cached_tokens=cached,
        )
    if _has(usage, "input_tokens", "output_tokens"):
        details = _field(usage, "input_tokens_details")
        if details not in (_MISSING, None):  # OpenAI Responses API: input includes cached
            prompt = _count(usage, "input_tokens")
            cached = _count(details, "cached_tokens", "input_tokens_details.")
            if cached > prompt:
                raise InvalidUsageError(
                    f"input_tokens_details.cached_tokens ({cached}) exceeds input_tokens ({prompt})"
                )
            return ReportedUsage(
                prompt_tokens=prompt,
                completion_tokens=_count(usage, "output_tokens"),
                cached_tokens=cached,
            )
        read = _count(usage, "cache_read_input_tokens")
        write = _count(usage, "cache_creation_input_tokens")
        return ReportedUsage(
            prompt_tokens=_count(usage, "input_tokens") + read + write,
            completion_tokens=_count(usage, "output_tokens"),
            cached_tokens=read,
            cache_write_tokens=write,
        )
    raise InvalidUsageError(
        f"not a usage report: {type(usage).__name__} has neither prompt_tokens/completion_tokens "
        "(OpenAI) nor input_tokens/output_tokens (Anthropic)"
    )


def usage_from_counts(
    prompt_tokens: object,
    completion_tokens: object = 0,
    cached_tokens: object = 0,
    cache_write_tokens: object = 0,
) -> ReportedUsage:
    """Build a :class:`ReportedUsage` from plain counts, checking them.

    Raises:
        InvalidUsageError: A count is negative or not an integer, or the cached and written
            tokens exceed the prompt.
    """
    counts = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "cached_tokens": cached_tokens,
        "cache_write_tokens": cache_write_tokens,
    }
    checked = {name: _count(counts, name) for name in counts}
    if checked["cached_tokens"] + checked["cache_write_tokens"] > checked["prompt_tokens"]:
        raise InvalidUsageError(
            f"cached_tokens + cache_write_tokens ({checked['cached_tokens']} + "
            f"{checked['cache_write_tokens']}) exceed prompt_tokens ({checked['prompt_tokens']})"
        )
    return ReportedUsage(**checked)


class Calibration(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A session's learnt characters per token (the figures of its last ``TokenizerCalibrated``).

    Attributes:
        samples: Usage reports paired with the view they measured.
        mean_chars: Running mean of the views' characters.
        mean_tokens: Running mean of the reported prompt tokens.
        m2_chars: Running sum of squared deviations of the characters.
        m2_tokens: Running sum of squared deviations of the tokens.
        co_moment: Running sum of the products of both deviations.
        chars_per_token: The conservative ratio in use; 0.0 while undetermined.
    """

    samples: int = 0
    mean_chars: float = 0.0
    mean_tokens: float = 0.0
    m2_chars: float = 0.0
    m2_tokens: float = 0.0
    co_moment: float = 0.0
    chars_per_token: float = 0.0


class Accounting(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What a session's fold keeps about tokens spent: totals, the cap, the calibration.

    Attributes:
        totals: Cumulative usage reported.
        exhausted_cap: The cap at which ``BudgetExhausted`` was last recorded (0: never).
        calibration: The learnt ratio, once a report was paired with a view.
        view_seq: ``through_seq`` of the last served view that recorded its characters.
        view_chars: Its characters (0: unknown, as in views recorded before the field existed).
        paired_seq: ``through_seq`` of the last usage report paired with a view (a view is
            paired once).
    """

    totals: UsageTotals = UsageTotals()
    exhausted_cap: int = 0
    calibration: Calibration | None = None
    view_seq: int = 0
    view_chars: int = 0
    paired_seq: int = 0
