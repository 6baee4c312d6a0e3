"""Sizes derived from a :class:`Config`: truncation, summary and fact-block rooms, chunks.

Every size comes from :meth:`Config.sizes` (the one place that derives them), from the Config
alone (never from the session's state), so that a view's bytes do not shift as a session evolves
and replay under the same Config reproduces them. These functions name one size each.
"""

from __future__ import annotations

from ctxledger.config import CHARS_PER_TOKEN, DYNAMIC_BASE_RATIO, MIN_TOOL_RESULT_CHARS, Config

__all__ = [
    "CHARS_PER_TOKEN",
    "DYNAMIC_BASE_RATIO",
    "MIN_TOOL_RESULT_CHARS",
    "base_threshold_tokens",
    "fact_index_chars",
    "max_tool_result_chars",
    "min_gain_tokens",
    "summary_chunk_chars",
    "summary_max_chars",
]


def base_threshold_tokens(config: Config) -> int:
    """The threshold before any state-dependent adjustment.

    ``window * compression_threshold`` for the fixed policy; for the dynamic policy its base,
    ``window * 0.3``, never above the fixed threshold.
    """
    return config.sizes().threshold_tokens


def min_gain_tokens(config: Config) -> int:
    """The gain rule in force for a Config recorded before the two marks (schema 3):
    ``min_compaction_gain_tokens``, never more than a tenth of the base threshold; 0 for a
    Config of this schema (the rule is retired: masking depends on masking settings alone)."""
    if not config.legacy:
        return 0
    return min(config.min_compaction_gain_tokens, base_threshold_tokens(config) // 10)


def max_tool_result_chars(config: Config) -> int:
    """Longest tool result shown whole in a view (``PolicySizes.tool_result_chars``)."""
    return config.sizes().tool_result_chars


def summary_max_chars(config: Config) -> int:
    """Room reserved for a summary, in characters (``PolicySizes.summary_chars``)."""
    return config.sizes().summary_chars


def summary_chunk_chars(config: Config) -> int:
    """Largest summariser input in one call (``PolicySizes.chunk_chars``)."""
    return config.sizes().chunk_chars


def fact_index_chars(config: Config) -> int:
    """Room for a checkpoint's fact block, in characters; 0 when the block is off
    (``PolicySizes.facts_chars``)."""
    return config.sizes().facts_chars
