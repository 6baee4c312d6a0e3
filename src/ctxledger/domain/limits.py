"""Automatic sizes derived from a :class:`Config`: truncation, summary room, summariser chunks.

Each ``0`` ("auto") value in :class:`~ctxledger.config.Config` resolves here, from the Config
alone (never from the session's state), so that a view's bytes do not shift as a session evolves
and replay under the same Config reproduces them.
"""

from __future__ import annotations

from ctxledger.config import Config

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

#: Characters per token assumed when a token budget is turned into a character budget.
CHARS_PER_TOKEN = 3
#: The dynamic threshold policy's base share of the window (DESIGN §2 seed idea).
DYNAMIC_BASE_RATIO = 0.3
#: Smallest truncation limit: room for a head, a tail and the marker naming the seq.
MIN_TOOL_RESULT_CHARS = 120


def base_threshold_tokens(config: Config) -> int:
    """The threshold before any state-dependent adjustment.

    ``window * compression_threshold`` for the fixed policy; for the dynamic policy its base,
    ``window * 0.3``, never above the fixed threshold.
    """
    fixed = config.threshold_tokens
    if config.threshold_policy == "dynamic":
        return max(1, min(fixed, int(config.context_window * DYNAMIC_BASE_RATIO)))
    return max(1, fixed)


def min_gain_tokens(config: Config) -> int:
    """The gain rule's tokens in force: ``Config.min_compaction_gain_tokens``, never more than a
    tenth of the base threshold (so that a gain chosen for large windows does not stop
    compaction and masking in small ones); 0 when the rule is off."""
    return min(config.min_compaction_gain_tokens, base_threshold_tokens(config) // 10)


def max_tool_result_chars(config: Config) -> int:
    """Longest tool result shown whole in a view; auto is a quarter of the base threshold."""
    chars = config.max_tool_result_chars or base_threshold_tokens(config) * CHARS_PER_TOKEN // 4
    return max(MIN_TOOL_RESULT_CHARS, chars)


def summary_max_chars(config: Config) -> int:
    """Room reserved for a summary; auto is a tenth of the base threshold, in characters."""
    return max(1, config.summary_max_chars or base_threshold_tokens(config) * CHARS_PER_TOKEN // 10)


def summary_chunk_chars(config: Config) -> int:
    """Largest summariser input in one call; auto is half the window, in characters."""
    return max(1, config.summary_chunk_chars or config.context_window * CHARS_PER_TOKEN // 2)


def fact_index_chars(config: Config) -> int:
    """Room for a checkpoint's fact block: ``Config.fact_index_chars``, capped by the window.

    At most a fifth of the base threshold, in characters (twice the summary's automatic room),
    so that small windows keep most of their room for raw messages; 0 when the block is off.
    """
    return min(config.fact_index_chars, base_threshold_tokens(config) * CHARS_PER_TOKEN // 5)
