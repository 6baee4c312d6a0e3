"""Config schemas 4 and 5: one default per field, the marks, sizes as shares, no silent clamps."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest

from ctxledger import Config, ConfigError
from ctxledger.config import CONFIG_SCHEMA, LEGACY_SCHEMA, SIZE_MEANINGS, upcast_config


def test_one_default_per_field() -> None:
    """Config() equals a Config decoded from {} (no second defaults), in every format."""
    assert Config() == msgspec.convert({}, Config)
    assert Config() == msgspec.json.decode(b"{}", type=Config)
    assert Config() == msgspec.msgpack.decode(msgspec.msgpack.encode({}), type=Config)
    assert Config().schema_version == CONFIG_SCHEMA


def test_a_recorded_config_carries_its_schema_and_round_trips() -> None:
    """Every Config is recorded with its schema version and decodes back equal."""
    config = Config(context_window=16_000, compaction_target=0.45, micro_preserve_tools=("bash",))
    encoded = msgspec.msgpack.encode(config)
    assert msgspec.msgpack.decode(encoded, type=dict)["schema_version"] == CONFIG_SCHEMA
    assert msgspec.msgpack.decode(encoded, type=Config) == config
    assert upcast_config(msgspec.to_builtins(config)) == msgspec.to_builtins(config)


def test_a_config_recorded_before_the_schema_is_upcast_to_one_mark() -> None:
    """A map without schema_version is schema 3: one mark, the rules it was served with."""
    old = {"context_window": 8000, "floor_guard": True, "min_compaction_gain_tokens": 2560}
    config = msgspec.convert(upcast_config(old), Config)
    assert config.schema_version == LEGACY_SCHEMA and config.legacy
    assert config.compaction_target == 0.0 and config.floor_guard
    assert config.prepare_threshold == 0.0 and config.fact_index_chars == 0  # off, as decoded then
    sizes = config.sizes()
    assert sizes.target_tokens == sizes.threshold_tokens == 6400  # one mark


def test_unknown_keys_and_positional_arguments_are_config_errors() -> None:
    """Config(foo=1) names the key (a ConfigError, not a TypeError); so does replace()."""
    with pytest.raises(ConfigError) as info:
        Config(foo=1)  # type: ignore[call-arg]
    assert info.value.field == "foo" and "no such setting" in str(info.value)
    with pytest.raises(ConfigError):
        Config(8000)  # type: ignore[misc]
    with pytest.raises(ConfigError) as info:
        Config().replace(windw=3)
    assert info.value.field == "windw"


@pytest.mark.parametrize("value", ["bash", ["bash"], ("bash", 3)])
def test_tuple_fields_take_tuples_of_str_only(value: Any) -> None:
    """A string, a list or a tuple with a non-str is refused: it would not decode back."""
    with pytest.raises(ConfigError) as info:
        Config(micro_preserve_tools=value)
    assert info.value.field == "micro_preserve_tools"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"compression_threshold": math.nan}, "compression_threshold"),
        ({"summary_timeout": math.inf}, "summary_timeout"),
        ({"compaction_target": math.nan}, "compaction_target"),
        ({"schema_version": 7}, "schema_version"),
        ({"schema_version": 2}, "schema_version"),
        ({"max_tool_result_chars": 0}, "max_tool_result_chars"),
        ({"max_tool_result_chars": 119}, "max_tool_result_chars"),
        ({"summary_max_chars": 0}, "summary_max_chars"),
        ({"summary_chunk_chars": 0}, "summary_chunk_chars"),
        ({"fact_index_chars": -1}, "fact_index_chars"),
    ],
)
def test_values_that_would_not_decode_back_or_mean_nothing_are_refused(
    changes: dict[str, Any], field: str
) -> None:
    """Nothing invalid is ever recorded: each such value is refused at construction."""
    with pytest.raises(ConfigError) as info:
        Config(**changes)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("threshold", "target", "ok"),
    [(0.8, 0.79, True), (0.8, 0.8, False), (0.8, 0.81, False), (0.8, 0.0, False),
     (0.8, -0.1, False), (0.8, 0.001, True), (1.0, 0.99, True)],
)  # fmt: skip
def test_the_target_lies_strictly_between_zero_and_the_threshold(
    threshold: float, target: float, ok: bool
) -> None:
    """0 < target < threshold, else ConfigError naming compaction_target and its range."""
    fields = {"compression_threshold": threshold, "compaction_target": target}
    if ok:
        assert Config(**fields, prepare_threshold=0.0).compaction_target == target
        return
    with pytest.raises(ConfigError) as info:
        Config(**fields)
    assert info.value.field == "compaction_target" and "below compression_threshold" in str(
        info.value
    )


@pytest.mark.parametrize(
    ("threshold", "target"),
    [(1.0, 0.45), (0.9, 0.45), (0.8, 0.45), (0.7, 0.45), (0.6, 0.4), (0.5, 0.3), (0.3, 0.15),
     (0.1, 0.05)],
)  # fmt: skip
def test_the_derived_target_follows_the_threshold(threshold: float, target: float) -> None:
    """None: min(0.45, max(threshold - 0.2, threshold / 2)); any threshold has a valid one."""
    config = Config(compression_threshold=threshold)
    assert config.compaction_target is None
    assert config.sizes().target_tokens == int(128_000 * target)


@pytest.mark.parametrize(
    ("threshold", "target"),
    [(1.0, 0.5), (0.9, 0.5), (0.8, 0.5), (0.7, 0.5), (0.6, 0.4), (0.5, 0.3), (0.3, 0.15),
     (0.1, 0.05)],
)  # fmt: skip
def test_a_schema_4_config_derives_its_target_as_recorded(
    threshold: float, target: float
) -> None:
    """A Config recorded with schema 4 keeps that schema's derived target, min(0.5, ...), and
    its rooms, so the views it served replay unchanged."""
    config = Config(compression_threshold=threshold, schema_version=4)
    assert config.sizes().target_tokens == int(128_000 * target)
    sizes = Config(context_window=16_000, schema_version=4).sizes()
    assert (sizes.target_tokens, sizes.summary_chars, sizes.facts_chars) == (8_000, 3_600, 8_400)
    assert (sizes.request_chars, sizes.prepare_tokens) == (12_000, 9_200)


@pytest.mark.parametrize("schema", [5, 6])
def test_schema_5_sizes_at_16k(schema: int) -> None:
    """The shares chosen on the traces (bench/README_quality.md, "Two marks"): target 0.45 of
    the window, the kept request a tenth of it, summary and block 0.15 and 0.35 of it; the
    prepare point a tenth of the way up to the threshold (bench/README.md, "Background").
    Schema 6 (a Config built now) keeps them: it changed how views are hashed, nothing else."""
    assert Config().schema_version == 6
    sizes = Config(context_window=16_000, schema_version=schema).sizes()
    assert sizes.schema_version == schema
    assert (sizes.target_tokens, sizes.summary_chars, sizes.facts_chars) == (7_200, 3_240, 7_560)
    assert (sizes.request_chars, sizes.prepare_tokens) == (2_160, 7_760)


def test_retired_knobs_are_refused_for_new_configs() -> None:
    """The floor guard and the gain rule exist only in recorded Configs."""
    for field, value in (("floor_guard", True), ("min_compaction_gain_tokens", 100)):
        with pytest.raises(ConfigError) as info:
            Config(**{field: value})
        assert info.value.field == field and "retired" in str(info.value)


@pytest.mark.parametrize(
    ("schema", "prepare", "ok"),
    [(5, 0.0, True), (5, 0.57, True), (5, 0.5625, False), (5, 0.5, False), (5, 1.0, False),
     (5, -0.1, False), (4, 0.63, True), (4, 0.625, False), (4, 0.57, False), (6, 0.57, True),
     (6, 0.5625, False)],
)  # fmt: skip
def test_an_explicit_prepare_point_lies_between_the_marks(
    schema: int, prepare: float, ok: bool
) -> None:
    """Threshold 0.8, target 0.45 (schema 4: 0.5): the prepare point (a share of the
    threshold) must be above 0.5625 (0.625: the target) and below 1, or 0 (off)."""
    if ok:
        config = Config(prepare_threshold=prepare, schema_version=schema)
        assert config.prepare_threshold == prepare
        return
    with pytest.raises(ConfigError) as info:
        Config(prepare_threshold=prepare, schema_version=schema)
    assert info.value.field == "prepare_threshold"


@pytest.mark.parametrize("window", [500, 2_000, 3_000, 16_000, 128_000, 1_000_000, 10_000_000])
def test_sizes_are_shares_with_caps_and_rooms_within_half_the_target(window: int) -> None:
    """At any window: target < prepare < threshold <= window; summary and fact block together
    at most half the target; the caps hold at large windows."""
    sizes = Config(context_window=window).sizes()
    assert 0 < sizes.target_tokens < sizes.prepare_tokens < sizes.threshold_tokens <= window
    assert sizes.summary_chars + sizes.facts_chars <= sizes.target_tokens * 3 // 2
    assert 0 < sizes.summary_chars <= 24_000 and 0 <= sizes.facts_chars <= 16_000
    assert 120 <= sizes.tool_result_chars <= 96_000
    assert sizes.request_chars <= sizes.tool_result_chars
    assert sizes.tool_result_tokens == sizes.tool_result_chars // 3


def test_sizes_hold_every_meaning_they_print() -> None:
    """Every size ctxledger policy prints is a field of PolicySizes."""
    sizes = Config().sizes()
    for name in SIZE_MEANINGS:
        assert isinstance(getattr(sizes, name), int)


def test_explicit_rooms_are_used_as_given_or_refused() -> None:
    """An explicit fact block is used as given; the derived summary takes what is left of half
    the target; both explicit over half the target is refused, naming a field."""
    config = Config(context_window=8_000, fact_index_chars=3_000)
    sizes = config.sizes()
    assert sizes.facts_chars == 3_000
    assert sizes.summary_chars + sizes.facts_chars <= sizes.target_tokens * 3 // 2
    with pytest.raises(ConfigError) as info:
        Config(context_window=8_000, summary_max_chars=4_000, fact_index_chars=3_000)
    assert info.value.field == "fact_index_chars" and "half the target" in str(info.value)
    assert Config(max_tool_result_chars=500).sizes().tool_result_chars == 500  # no clamp


def test_zero_means_off() -> None:
    """0 turns off the background summary, the fact block, the cap, calibration, digests."""
    config = Config(
        prepare_threshold=0.0,
        fact_index_chars=0,
        max_total_tokens=0,
        calibrate_after_reports=0,
        summary_result_chars=0,
    )
    sizes = config.sizes()
    assert sizes.prepare_tokens == 0 and sizes.facts_chars == 0
