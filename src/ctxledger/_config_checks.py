"""How a :class:`~ctxledger.config.Config` is checked when it is built, decoded or replaced.

A value a user set is used as given or refused with a :class:`~ctxledger.errors.ConfigError`
naming the field and its range; nothing is clamped. A schema-3 Config (recorded before the two
marks) is checked as the one-mark releases checked it.
"""

from __future__ import annotations

import math
from typing import Protocol

from ctxledger._config_schema import (
    CONFIG_SCHEMA,
    LEGACY_SCHEMA,
    MARKS_SCHEMA,
    SHARES,
    derived_target,
)
from ctxledger._config_sizes import (
    CHARS_PER_TOKEN,
    MIN_SUMMARY_CHARS,
    MIN_TOOL_RESULT_CHARS,
    SUMMARY_CAP,
    SizedConfig,
    derived_room,
    policy_sizes,
)
from ctxledger.errors import ConfigError

__all__ = ["MAX_INT", "CheckedConfig", "validate"]

#: The largest integer setting: a log records integers in 64 bits (msgpack's unsigned range,
#: so that any Config a log could hold decodes).
MAX_INT = 2**64 - 1


class CheckedConfig(SizedConfig, Protocol):
    """The settings :func:`validate` reads by name besides those of :class:`SizedConfig` (the
    counts it checks are read with ``getattr``)."""

    @property
    def summary_timeout(self) -> float: ...
    @property
    def micro_preserve_tools(self) -> tuple[str, ...]: ...


def validate(config: CheckedConfig) -> None:
    """Check every field of ``config`` (its ``__post_init__``).

    Raises:
        ConfigError: A field is invalid: the error names it and its range.
    """
    if config.schema_version not in (LEGACY_SCHEMA, *SHARES):
        raise ConfigError(
            "schema_version",
            f"must be {CONFIG_SCHEMA} (5 for a Config recorded before views were hashed with "
            f"version 2, {MARKS_SCHEMA} for one recorded with the first two-mark shares, "
            f"{LEGACY_SCHEMA} for one recorded before the two marks), got "
            f"{config.schema_version!r}",
        )
    _require_int(config, "context_window", minimum=1)
    threshold = _require_share(config, "compression_threshold")
    if not 0 < threshold <= 1:
        raise ConfigError("compression_threshold", f"must be in (0, 1], got {threshold!r}")
    for name in (
        "min_retain_rounds",
        "micro_keep_recent",
        "micro_min_chars",
        "max_reactive_retries",
        "max_total_tokens",
        "calibrate_after_reports",
        "min_compaction_gain_tokens",
        "summary_result_chars",
    ):
        _require_int(config, name, minimum=0)
    _require_int(config, "micro_batch", minimum=1)
    _require_int(config, "snapshot_interval", minimum=1)
    timeout = config.summary_timeout
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ConfigError("summary_timeout", f"must be a positive number, got {timeout!r}")
    if not math.isfinite(timeout):
        raise ConfigError("summary_timeout", f"must be finite, got {timeout!r}")
    tools = config.micro_preserve_tools
    if not isinstance(tools, tuple) or not all(isinstance(tool, str) for tool in tools):
        raise ConfigError(
            "micro_preserve_tools", f"must be a tuple of tool names, e.g. ('bash',), got {tools!r}"
        )
    for tool in tools:
        if not _utf8(tool):
            raise ConfigError(
                "micro_preserve_tools", f"tool name {tool!r} is not valid UTF-8 (a lone surrogate)"
            )
    for name in ("keep_first_request", "floor_guard"):
        if not isinstance(getattr(config, name), bool):
            raise ConfigError(name, f"must be True or False, got {getattr(config, name)!r}")
    if config.threshold_policy not in ("fixed", "dynamic"):
        raise ConfigError(
            "threshold_policy", f"must be 'fixed' or 'dynamic', got {config.threshold_policy!r}"
        )
    if config.legacy:
        _validate_legacy(config)
    else:
        _validate_marks(config, threshold)


def _validate_legacy(config: CheckedConfig) -> None:
    """A schema-3 Config is checked as the one-mark releases checked it (0 meant derived)."""
    for name in ("max_tool_result_chars", "summary_max_chars", "summary_chunk_chars"):
        _require_int(config, name, minimum=0)
    _require_int(config, "fact_index_chars", minimum=0)
    prepare = _require_share(config, "prepare_threshold")
    if not 0 <= prepare < 1:
        raise ConfigError("prepare_threshold", f"must be 0 (off) or in (0, 1), got {prepare!r}")
    if config.compaction_target not in (0, 0.0):
        raise ConfigError(
            "compaction_target", "a schema-3 Config has one mark: it must be 0 (no low mark)"
        )


def _validate_marks(config: CheckedConfig, threshold: float) -> None:
    target = config.compaction_target
    if target is not None:
        target = _require_share(config, "compaction_target")
        if not 0 < target < threshold:
            raise ConfigError(
                "compaction_target",
                f"must be above 0 and below compression_threshold ({threshold}), got {target!r}",
            )
    share = target if target is not None else derived_target(threshold, config.schema_version)
    for name in ("floor_guard", "min_compaction_gain_tokens"):
        if getattr(config, name):
            raise ConfigError(
                name,
                "retired in Config schema 4 (the compaction target does its work); only Configs "
                "recorded before it carry one",
            )
    for name, minimum in (
        ("max_tool_result_chars", MIN_TOOL_RESULT_CHARS),
        ("summary_max_chars", 1),
        ("summary_chunk_chars", 1),
        ("fact_index_chars", 0),
    ):
        if getattr(config, name) is not None:
            _require_int(config, name, minimum=minimum, derived=True)
    if config.prepare_threshold is not None:
        prepare = _require_share(config, "prepare_threshold")
        if prepare != 0 and not share / threshold < prepare < 1:
            raise ConfigError(
                "prepare_threshold",
                f"must be None (derived), 0 (off) or in ({share / threshold:.4g}, 1): the "
                f"prepare point (this share of the threshold) must lie between the target "
                f"({share:.4g} of the window) and the threshold, got {prepare!r}",
            )
    summary, facts = config.summary_max_chars, config.fact_index_chars
    sizes = policy_sizes(config)
    half = sizes.target_tokens * CHARS_PER_TOKEN // 2
    if sizes.summary_chars + sizes.facts_chars > half:
        name = "fact_index_chars" if facts is not None else "summary_max_chars"
        raise ConfigError(
            name,
            f"the summary ({sizes.summary_chars:,}) and the fact block ({sizes.facts_chars:,}) "
            f"together must take at most half the target ({half:,} characters at this window)",
        )
    shares = SHARES[config.schema_version]
    derived_summary = derived_room(shares.summary, sizes.target_tokens, SUMMARY_CAP)
    if summary is None and sizes.summary_chars < min(MIN_SUMMARY_CHARS, derived_summary):
        raise ConfigError(
            "fact_index_chars",
            f"leaves the summary {sizes.summary_chars:,} characters of half the target "
            f"({half:,} characters at this window): use a smaller block",
        )


def _require_share(config: CheckedConfig, name: str) -> float:
    value = getattr(config, name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(name, f"must be a number, got {value!r}")
    return float(value)


def _require_int(config: CheckedConfig, name: str, *, minimum: int, derived: bool = False) -> None:
    value = getattr(config, name)
    hint = " or None (derived)" if derived else ""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, f"must be an integer{hint}, got {value!r}")
    if value < minimum:
        raise ConfigError(name, f"must be >= {minimum}{hint}, got {value}")
    if value > MAX_INT:
        raise ConfigError(
            name, f"must be at most 2**64 - 1 (a log records 64-bit integers), got {value}"
        )


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
