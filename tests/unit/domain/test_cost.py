"""Pricing: presets, a session's bill with and without caching, a compaction's effect."""

from __future__ import annotations

import pytest

from ctxledger import Checkpoint, ConfigError, Pricing, UsageTotals
from ctxledger.domain import PRICING_PRESETS


def test_cost_prices_each_kind_of_token() -> None:
    """Uncached input, cache reads, cache writes and output each at their price per million."""
    pricing = Pricing(3.0, 0.3, 3.75, 15.0)
    usage = UsageTotals(
        input_tokens=1_000_000,
        cached_tokens=600_000,
        cache_write_tokens=100_000,
        output_tokens=10_000,
        calls=5,
    )
    expected = (300_000 * 3.0 + 600_000 * 0.3 + 100_000 * 3.75 + 10_000 * 15.0) / 1_000_000
    assert pricing.cost(usage) == pytest.approx(expected)
    assert pricing.uncached().cost(usage) == pytest.approx((1_000_000 * 3.0 + 150_000) / 1e6)


def test_presets_are_examples_with_cache_discounts() -> None:
    """Every preset reads cached tokens cheaper than uncached ones; unknown names are refused."""
    assert Pricing.preset("anthropic-sonnet") == Pricing(3.0, 0.3, 3.75, 15.0)
    for name, pricing in PRICING_PRESETS.items():
        assert pricing.cached_input < pricing.input <= pricing.cache_write, name
    with pytest.raises(ConfigError, match="no preset 'gpt-9'"):
        Pricing.preset("gpt-9")


@pytest.mark.parametrize("bad", [-1.0, "3", True, float("nan"), float("inf")])
def test_bad_prices_are_refused(bad: object) -> None:
    """A negative or non-numeric price raises ConfigError naming the field."""
    with pytest.raises(ConfigError, match=r"Pricing\.cached_input"):
        Pricing(3.0, bad, 3.75, 15.0)  # type: ignore[arg-type]


def test_compaction_effect_weighs_the_cache_rewrite_against_the_savings() -> None:
    """A small saving does not pay for rewriting the cache on the next call; a large one does."""
    pricing = Pricing.preset("anthropic-sonnet")

    def checkpoint(before: int, after: int, kept: int) -> Checkpoint:
        return Checkpoint(
            id="c",
            summary="s",
            retain_from_seq=5,
            covers_through_seq=4,
            reason="threshold_exceeded",
            tokens_before=before,
            tokens_after=after,
            prefix_kept_tokens=kept,
        )

    small = checkpoint(100_000, 97_000, 10_000)
    large = checkpoint(100_000, 30_000, 10_000)
    assert small.tokens_saved == 3_000
    assert pricing.compaction_effect(small, calls=10) > 0  # costs more than it saves
    assert pricing.compaction_effect(large, calls=10) < 0
    assert pricing.compaction_effect(large, calls=0) == 0.0
    # One call: the whole new view past the prefix is written at the cache-write price.
    one = pricing.compaction_effect(large, calls=1)
    assert one == pytest.approx((10_000 * 0.3 + 20_000 * 3.75 - 100_000 * 0.3) / 1e6)
