"""Config defaults, validation and environment parsing."""

from __future__ import annotations

import msgspec
import pytest

from ctxledger import Config, ConfigError


def test_defaults_match_the_design() -> None:
    """The documented defaults are the seed's values."""
    config = Config()
    assert config.context_window == 128_000
    assert config.compression_threshold == 0.8
    assert config.min_retain_rounds == 10
    assert config.summary_timeout == 120.0
    assert config.micro_keep_recent == 3
    assert config.micro_min_chars == 100
    assert config.micro_preserve_tools == ()
    assert config.max_reactive_retries == 3
    assert config.threshold_tokens == 102_400


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"compression_threshold": 0.0}, "compression_threshold"),
        ({"compression_threshold": 1.01}, "compression_threshold"),
        ({"context_window": 0}, "context_window"),
        ({"min_retain_rounds": -1}, "min_retain_rounds"),
        ({"micro_keep_recent": -2}, "micro_keep_recent"),
        ({"summary_timeout": 0}, "summary_timeout"),
        ({"micro_batch": 0}, "micro_batch"),
        ({"threshold_policy": "random"}, "threshold_policy"),
        ({"context_window": 2**64}, "context_window"),  # no log could record it
        ({"snapshot_interval": 2**70}, "snapshot_interval"),
        ({"micro_preserve_tools": ("bash", "\ud800")}, "micro_preserve_tools"),
    ],
)
def test_invalid_values_name_the_field(changes: dict[str, object], field: str) -> None:
    """Each invalid value raises ConfigError naming its field."""
    with pytest.raises(ConfigError) as info:
        Config(**changes)  # type: ignore[arg-type]
    assert info.value.field == field
    assert field in str(info.value)


def test_the_largest_recordable_integer_is_accepted() -> None:
    """2**64 - 1 is the largest integer a log records; a Config holding it encodes and decodes."""
    config = Config(snapshot_interval=2**64 - 1)
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(config), type=Config) == config


def test_threshold_of_one_is_allowed() -> None:
    """The interval is (0, 1]: exactly 1 is valid."""
    assert Config(compression_threshold=1).threshold_tokens == 128_000


def test_from_env_reads_seed_and_prefixed_names() -> None:
    """Seed names are read; CTXLEDGER_* names win and cover every field."""
    env = {
        "CONTEXT_WINDOW": "32000",
        "COMPRESSION_THRESHOLD": "0.5",
        "MIN_RETAIN_ROUNDS": "4",
        "SUMMARY_TIMEOUT": "7.5",
        "CTXLEDGER_MIN_RETAIN_ROUNDS": "6",
        "CTXLEDGER_MICRO_PRESERVE_TOOLS": "read_file, grep",
    }
    config = Config.from_env(env)
    assert config.context_window == 32_000
    assert config.compression_threshold == 0.5
    assert config.min_retain_rounds == 6
    assert config.summary_timeout == 7.5
    assert config.micro_preserve_tools == ("read_file", "grep")


@pytest.mark.parametrize(
    ("env", "field"),
    [
        ({"CONTEXT_WINDOW": "lots"}, "context_window"),
        ({"COMPRESSION_THRESHOLD": "2"}, "compression_threshold"),
        ({"CTXLEDGER_MICRO_BATCH": "0"}, "micro_batch"),
    ],
)
def test_from_env_rejects_bad_values(env: dict[str, str], field: str) -> None:
    """A variable that does not parse or is out of range raises ConfigError for its field."""
    with pytest.raises(ConfigError) as info:
        Config.from_env(env)
    assert info.value.field == field


def test_replace_validates_and_rejects_unknown_fields() -> None:
    """replace() applies the same validation and refuses unknown settings."""
    assert Config().replace(context_window=1000).context_window == 1000
    with pytest.raises(ConfigError):
        Config().replace(compression_threshold=3)
    with pytest.raises(ConfigError) as info:
        Config().replace(window=3)
    assert info.value.field == "window"


def test_a_new_config_has_the_fact_block_on_and_a_recorded_one_without_it_off() -> None:
    """Config() has the fact block (its room derived from the window); a Config recorded before
    the field existed (and before ``schema_version``) is upcast to the block off."""
    import msgspec

    from ctxledger.config import upcast_config

    assert Config().fact_index_chars is None and Config().sizes().facts_chars > 0
    assert Config.from_env({}).sizes().facts_chars == Config().sizes().facts_chars
    recorded = {"context_window": 9000, "compression_threshold": 0.8, "min_retain_rounds": 2}
    for decoded in (
        msgspec.msgpack.decode(msgspec.msgpack.encode(upcast_config(recorded)), type=Config),
        msgspec.json.decode(msgspec.json.encode(upcast_config(recorded)), type=Config),
        msgspec.convert(upcast_config(recorded), Config),
    ):
        assert decoded.fact_index_chars == 0 and decoded.context_window == 9000
        assert decoded.sizes().facts_chars == 0 and decoded.legacy
    assert Config(fact_index_chars=0).sizes().facts_chars == 0
    assert Config().replace(context_window=5000).sizes().facts_chars > 0
    assert Config(fact_index_chars=0).replace(context_window=5000).fact_index_chars == 0


def test_fact_index_chars_must_be_a_non_negative_integer() -> None:
    """A negative block size is refused, naming the field."""
    with pytest.raises(ConfigError) as info:
        Config(fact_index_chars=-1)
    assert info.value.field == "fact_index_chars"
