"""What tokens cost: :class:`Pricing` per million tokens, a session's bill, a compaction's or a
re-mask's effect.

Prompt caching changes a bill more than compaction does: a cached input token costs a tenth to
a half of an uncached one, and writing the cache may cost more than plain input (Anthropic). A
compaction replaces the view after its head, so the next call writes that part to the cache
anew; it pays for itself only when the tokens it saves on later calls outweigh that.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

import msgspec

from ctxledger.checkpoints import Checkpoint, Remask
from ctxledger.domain.usage import UsageTotals
from ctxledger.errors import ConfigError

__all__ = ["PRICING_PRESETS", "Pricing"]


class Pricing(msgspec.Struct, frozen=True, gc=False):
    """Prices in US dollars per million tokens: ``Pricing(input, cached_input, cache_write,
    output)``.

    Use your provider's current prices; :data:`PRICING_PRESETS` holds a few published ones as
    examples (``Pricing.preset("anthropic-sonnet")``). For a provider without a cache-write
    surcharge (OpenAI), ``cache_write`` equals ``input``.

    Attributes:
        input: An input token neither read from nor written to the prompt cache.
        cached_input: An input token read from the prompt cache.
        cache_write: An input token written to the prompt cache.
        output: An output token.
    """

    input: float
    cached_input: float
    cache_write: float
    output: float

    def __post_init__(self) -> None:
        for name in ("input", "cached_input", "cache_write", "output"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0 <= value < math.inf
            ):
                raise ConfigError(
                    f"Pricing.{name}", f"must be a finite non-negative number, got {value!r}"
                )

    @classmethod
    def preset(cls, name: str) -> Pricing:
        """Return the preset ``name`` of :data:`PRICING_PRESETS`.

        Raises:
            ConfigError: No preset has that name.
        """
        try:
            return PRICING_PRESETS[name]
        except KeyError:
            known = ", ".join(sorted(PRICING_PRESETS))
            raise ConfigError("Pricing", f"no preset {name!r}; known: {known}") from None

    def cost(self, usage: UsageTotals) -> float:
        """Return what ``usage`` costs, in dollars (cached and written tokens at their prices)."""
        return (
            usage.uncached_input_tokens * self.input
            + usage.cached_tokens * self.cached_input
            + usage.cache_write_tokens * self.cache_write
            + usage.output_tokens * self.output
        ) / 1_000_000

    def uncached(self) -> Pricing:
        """The same prices without a prompt cache: every input token at ``input``."""
        return Pricing(self.input, self.input, self.input, self.output)

    def prompt_cost(self, prompt_tokens: int, cached_tokens: int, *, caching: bool = True) -> float:
        """Cost of prompts of ``prompt_tokens`` of which ``cached_tokens`` were a prefix shared
        with the call before: read from the cache, the rest written to it (as a provider with
        caching bills a growing conversation); without ``caching``, all at ``input``."""
        if not caching:
            return prompt_tokens * self.input / 1_000_000
        written = prompt_tokens - cached_tokens
        return (cached_tokens * self.cached_input + written * self.cache_write) / 1_000_000

    def compaction_effect(self, checkpoint: Checkpoint | Remask, calls: int = 1) -> float:
        """Estimated change of the next ``calls`` calls' input cost due to ``checkpoint``, or
        to a re-mask (``ViewServed.remask``, a :class:`~ctxledger.checkpoints.Remask`).

        Without it, each call would send ``tokens_before`` tokens, read from the cache. With it,
        the first call reads the kept prefix (``prefix_kept_tokens``) and writes the rest of
        the smaller view; later calls read the smaller view. Negative: it saves.
        """
        if calls < 1:
            return 0.0
        before = checkpoint.tokens_before
        after = checkpoint.tokens_after
        kept = min(checkpoint.prefix_kept_tokens, after)
        without = calls * before * self.cached_input
        first = kept * self.cached_input + (after - kept) * self.cache_write
        with_it = first + (calls - 1) * after * self.cached_input
        return (with_it - without) / 1_000_000


#: Published prices (US dollars per million tokens) of a few models, as examples only: check your
#: provider's current prices. Anthropic's cache writes are the 5-minute cache's.
PRICING_PRESETS: Mapping[str, Pricing] = MappingProxyType(
    {
        "anthropic-sonnet": Pricing(3.00, 0.30, 3.75, 15.00),
        "anthropic-haiku": Pricing(0.80, 0.08, 1.00, 4.00),
        "openai-gpt-4.1": Pricing(2.00, 0.50, 2.00, 8.00),
        "openai-gpt-4o": Pricing(2.50, 1.25, 2.50, 10.00),
        "openai-gpt-4o-mini": Pricing(0.15, 0.075, 0.15, 0.60),
    }
)
