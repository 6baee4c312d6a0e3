"""Usage as OpenAI and Anthropic report it: dicts and SDK-like objects, normalised."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ctxledger import InvalidUsageError
from ctxledger.domain import ReportedUsage, UsageTotals, parse_usage, usage_from_counts


@dataclass
class PromptTokensDetails:
    """Shaped like ``openai.types.CompletionUsage.prompt_tokens_details``."""

    cached_tokens: int | None = None
    audio_tokens: int | None = None


@dataclass
class CompletionUsage:
    """Shaped like ``openai.types.CompletionUsage`` (attributes, optional fields None)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


@dataclass
class AnthropicUsage:
    """Shaped like ``anthropic.types.Usage``."""

    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None


def test_openai_dict_counts_cached_inside_the_prompt() -> None:
    """OpenAI's prompt_tokens already include the cached tokens."""
    usage = {
        "prompt_tokens": 2006,
        "completion_tokens": 300,
        "total_tokens": 2306,
        "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
    }
    assert parse_usage(usage) == ReportedUsage(
        prompt_tokens=2006, completion_tokens=300, cached_tokens=1920
    )


def test_openai_object_with_and_without_details() -> None:
    """An SDK-like object is read by attribute; missing or None details count 0."""
    with_details = CompletionUsage(1000, 20, 1020, PromptTokensDetails(cached_tokens=768))
    assert parse_usage(with_details) == ReportedUsage(
        prompt_tokens=1000, completion_tokens=20, cached_tokens=768
    )
    assert parse_usage(CompletionUsage(1000, 20, 1020)) == ReportedUsage(
        prompt_tokens=1000, completion_tokens=20
    )
    assert parse_usage(CompletionUsage(10, 2, 12, PromptTokensDetails())).cached_tokens == 0


def test_anthropic_dict_adds_cache_reads_and_writes_to_the_prompt() -> None:
    """Anthropic's input_tokens exclude the cache: the prompt is the sum of the three."""
    usage = {
        "input_tokens": 50,
        "output_tokens": 503,
        "cache_read_input_tokens": 100_000,
        "cache_creation_input_tokens": 2_048,
    }
    assert parse_usage(usage) == ReportedUsage(
        prompt_tokens=102_098, completion_tokens=503, cached_tokens=100_000, cache_write_tokens=2048
    )


def test_anthropic_object_with_none_cache_fields() -> None:
    """None cache fields (no caching on that call) count 0."""
    assert parse_usage(AnthropicUsage(1200, 80)) == ReportedUsage(
        prompt_tokens=1200, completion_tokens=80
    )
    assert parse_usage(AnthropicUsage(3, 80, 5000, None)) == ReportedUsage(
        prompt_tokens=5003, completion_tokens=80, cached_tokens=5000
    )


def test_openai_responses_api_shape() -> None:
    """The Responses API's input_tokens include input_tokens_details.cached_tokens."""
    usage = {
        "input_tokens": 900,
        "output_tokens": 30,
        "input_tokens_details": {"cached_tokens": 512},
        "output_tokens_details": {"reasoning_tokens": 0},
    }
    assert parse_usage(usage) == ReportedUsage(
        prompt_tokens=900, completion_tokens=30, cached_tokens=512
    )


@pytest.mark.parametrize(
    ("usage", "named"),
    [
        ({"prompt_tokens": -1, "completion_tokens": 3}, "prompt_tokens"),
        ({"prompt_tokens": 10, "completion_tokens": "3"}, "completion_tokens"),
        ({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 11}}, "cached_tokens"),
        ({"input_tokens": 5, "cache_read_input_tokens": 2.5}, "cache_read_input_tokens"),
        ({"input_tokens": True}, "input_tokens"),
        ({"tokens": 10}, "not a usage report"),
        (None, "not a usage report"),
        (42.0, "not a usage report"),
    ],
)
def test_bad_usage_is_refused_naming_what_is_wrong(usage: object, named: str) -> None:
    """A bad count or an object of neither shape raises InvalidUsageError (a ValueError)."""
    with pytest.raises(InvalidUsageError, match=named):
        parse_usage(usage)
    assert issubclass(InvalidUsageError, ValueError)


def test_counts_are_checked() -> None:
    """Plain counts: negative, non-integer, or cache figures beyond the prompt are refused."""
    assert usage_from_counts(10, 2, 4, 3) == ReportedUsage(
        prompt_tokens=10, completion_tokens=2, cached_tokens=4, cache_write_tokens=3
    )
    for bad in [(-1, 0, 0, 0), (10, 1.5, 0, 0), (10, 0, 8, 3), (True, 0, 0, 0)]:
        with pytest.raises(InvalidUsageError):
            usage_from_counts(*bad)


def test_totals_add_up() -> None:
    """Totals sum each figure and count the calls."""
    totals = UsageTotals().add(ReportedUsage(prompt_tokens=100, completion_tokens=10))
    totals = totals.add(
        ReportedUsage(
            prompt_tokens=200, completion_tokens=5, cached_tokens=90, cache_write_tokens=7
        )
    )
    assert totals == UsageTotals(
        input_tokens=300, cached_tokens=90, cache_write_tokens=7, output_tokens=15, calls=2
    )
    assert totals.total_tokens == 315
    assert totals.uncached_input_tokens == 203
