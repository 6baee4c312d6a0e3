"""Every size the compaction policy of a :class:`~ctxledger.config.Config` uses, derived from it.

:func:`policy_sizes` is what :meth:`Config.sizes <ctxledger.config.Config.sizes>` answers: the
marks in tokens and the rooms a summary, a fact block, a tool result and the kept first request
take, from the window, the marks and the schema's :data:`~ctxledger.config.SHARES`. Every public
name is importable from :mod:`ctxledger.config` too (this module is private).
"""

from __future__ import annotations

import functools
from typing import Protocol

import msgspec

from ctxledger._config_schema import PREPARE_SHARE, SHARES, Shares, derived_target

__all__ = [
    "CHARS_PER_TOKEN",
    "CHUNK_CAP",
    "CHUNK_SHARE",
    "DYNAMIC_BASE_RATIO",
    "FACTS_CAP",
    "MIN_SUMMARY_CHARS",
    "MIN_TOOL_RESULT_CHARS",
    "REQUEST_CAP",
    "SIZE_MEANINGS",
    "SUMMARY_CAP",
    "TOOL_RESULT_CAP",
    "TOOL_RESULT_SHARE",
    "PolicySizes",
    "SizedConfig",
    "derived_room",
    "policy_sizes",
    "prepare_point",
]

#: Caps of the derived rooms for large windows (characters).
SUMMARY_CAP, FACTS_CAP, REQUEST_CAP = 24_000, 16_000, 96_000
#: The truncation limit of a tool result, as a share of the *window* (half the default target):
#: the marks must not change a view they never reach, so the limit does not follow them.
TOOL_RESULT_SHARE, TOOL_RESULT_CAP = 0.25, 96_000
CHUNK_SHARE, CHUNK_CAP = 0.5, 300_000
#: Characters per token assumed where a token budget becomes a character budget.
CHARS_PER_TOKEN = 3
#: The least room a derived summary is left by an explicit fact block.
MIN_SUMMARY_CHARS = 300
#: The smallest truncation limit: room for a head, a tail and the marker naming the seq.
MIN_TOOL_RESULT_CHARS = 120
#: The dynamic threshold policy's base share of the window (DESIGN §2 seed idea).
DYNAMIC_BASE_RATIO = 0.3


class SizedConfig(Protocol):
    """The settings of a :class:`~ctxledger.config.Config` its sizes are derived from (typed by
    what is read, so that the Config's module imports this one and never the reverse); a
    frozen value, hashable, so that its sizes are cached by it."""

    def __hash__(self) -> int: ...

    @property
    def context_window(self) -> int: ...
    @property
    def compression_threshold(self) -> float: ...
    @property
    def compaction_target(self) -> float | None: ...
    @property
    def threshold_policy(self) -> str: ...
    @property
    def prepare_threshold(self) -> float | None: ...
    @property
    def fact_index_chars(self) -> int | None: ...
    @property
    def summary_max_chars(self) -> int | None: ...
    @property
    def max_tool_result_chars(self) -> int | None: ...
    @property
    def summary_chunk_chars(self) -> int | None: ...
    @property
    def schema_version(self) -> int: ...
    @property
    def legacy(self) -> bool: ...
    @property
    def threshold_tokens(self) -> int: ...


class PolicySizes(msgspec.Struct, frozen=True, kw_only=True):
    """Every size the compaction policy of one Config uses (:meth:`Config.sizes`).

    Attributes:
        schema_version: The Config's schema (3: the one-mark policy of recorded Configs).
        window_tokens: The context window.
        threshold_tokens: The high mark: an estimate at or above it compacts.
        target_tokens: The low mark: an automatic compaction brings the view to at most this.
        prepare_tokens: A summary starts in the background at this estimate (0: never).
        summary_tokens: Room reserved for a checkpoint's summary (``summary_chars // 3``).
        summary_chars: The same in characters (``SummaryRequest.max_chars``).
        facts_tokens: Room reserved for the fact block after the summary.
        facts_chars: The same in characters (0: no fact block).
        tool_result_tokens: A tool result is shown truncated above this.
        tool_result_chars: The same in characters.
        request_tokens: The kept first request (``keep_first_request``), once the summary covers
            it, is shown truncated above this.
        request_chars: The same in characters.
        chunk_chars: The largest summariser input of one call.
    """

    schema_version: int
    window_tokens: int
    threshold_tokens: int
    target_tokens: int
    prepare_tokens: int
    summary_tokens: int
    summary_chars: int
    facts_tokens: int
    facts_chars: int
    tool_result_tokens: int
    tool_result_chars: int
    request_tokens: int
    request_chars: int
    chunk_chars: int


#: What each size of :class:`PolicySizes` means, in the order ``ctxledger policy`` prints them.
SIZE_MEANINGS: dict[str, str] = {
    "window_tokens": "the model's context window",
    "threshold_tokens": "high mark: an estimate at or above it compacts",
    "target_tokens": "low mark: an automatic compaction brings the view to at most this",
    "prepare_tokens": "a summary starts in the background here (0: background off)",
    "summary_tokens": "room for a checkpoint's summary",
    "facts_tokens": "room for the facts block after the summary (0: off)",
    "tool_result_tokens": "a tool result longer than this is shown truncated (head, tail, marker)",
    "request_tokens": "the first request, once summarised, is kept in view up to this",
    "chunk_chars": "largest summariser input per call, in characters",
}


def _base_threshold(config: SizedConfig) -> int:
    fixed = config.threshold_tokens
    if config.threshold_policy == "dynamic":
        return max(1, min(fixed, int(config.context_window * DYNAMIC_BASE_RATIO)))
    return max(1, fixed)


@functools.lru_cache(maxsize=256)
def policy_sizes(config: SizedConfig) -> PolicySizes:
    """Return every size the compaction policy of ``config`` uses (:meth:`Config.sizes
    <ctxledger.config.Config.sizes>`); cached, a Config being a frozen value."""
    window = config.context_window
    threshold = _base_threshold(config)
    if config.legacy:
        target = threshold
        prepare = int(threshold * (config.prepare_threshold or 0.0))
        summary = max(1, config.summary_max_chars or threshold * CHARS_PER_TOKEN // 10)
        facts = min(config.fact_index_chars or 0, threshold * CHARS_PER_TOKEN // 5)
        tool = max(MIN_TOOL_RESULT_CHARS, config.max_tool_result_chars or threshold * 3 // 4)
        chunk = max(1, config.summary_chunk_chars or window * CHARS_PER_TOKEN // 2)
        request = tool
    else:
        shares = SHARES[config.schema_version]
        share = config.compaction_target or derived_target(
            config.compression_threshold, config.schema_version
        )
        target = max(1, int(threshold * share / config.compression_threshold))
        if config.threshold_policy == "fixed":
            target = max(1, int(window * share))
        prepare = prepare_point(config.prepare_threshold, threshold, target, shares.prepare)
        summary, facts = _rooms(config, target, shares)
        tool = config.max_tool_result_chars or max(
            MIN_TOOL_RESULT_CHARS, min(TOOL_RESULT_CAP, int(window * TOOL_RESULT_SHARE * 3))
        )
        request = max(
            MIN_TOOL_RESULT_CHARS, min(tool, derived_room(shares.request, target, REQUEST_CAP))
        )
        chunk = config.summary_chunk_chars or min(CHUNK_CAP, int(window * CHUNK_SHARE * 3))
    return PolicySizes(
        schema_version=config.schema_version,
        window_tokens=window,
        threshold_tokens=threshold,
        target_tokens=target,
        prepare_tokens=prepare,
        summary_tokens=summary // CHARS_PER_TOKEN,
        summary_chars=summary,
        facts_tokens=facts // CHARS_PER_TOKEN,
        facts_chars=facts,
        tool_result_tokens=tool // CHARS_PER_TOKEN,
        tool_result_chars=tool,
        request_tokens=request // CHARS_PER_TOKEN,
        request_chars=request,
        chunk_chars=max(1, chunk),
    )


def prepare_point(
    prepare_threshold: float | None, threshold: int, target: int, share: float = PREPARE_SHARE
) -> int:
    """The prepare point in tokens for marks in tokens (0: background compaction off); a
    derived one lies ``share`` of the way from the target up to the threshold."""
    if prepare_threshold is None:
        return target + int((threshold - target) * share)
    return int(threshold * prepare_threshold)


def derived_room(share: float, target: int, cap: int) -> int:
    """A derived room in characters: ``share`` of the ``target`` (tokens), at most ``cap``."""
    return min(cap, int(target * share * CHARS_PER_TOKEN))


def _rooms(config: SizedConfig, target: int, shares: Shares) -> tuple[int, int]:
    """The summary's and the fact block's rooms, in characters: together at most half the
    target; a derived one takes what an explicit one leaves."""
    half = target * CHARS_PER_TOKEN // 2
    summary, facts = config.summary_max_chars, config.fact_index_chars
    if facts is None:
        taken = (
            summary if summary is not None else derived_room(shares.summary, target, SUMMARY_CAP)
        )
        facts = max(0, min(derived_room(shares.facts, target, FACTS_CAP), half - taken))
    if summary is None:
        summary = min(derived_room(shares.summary, target, SUMMARY_CAP), half - facts)
    return max(1, summary), facts
