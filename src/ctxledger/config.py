"""The frozen :class:`Config` of a session, and its construction from the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Literal

import msgspec

from ctxledger.errors import ConfigError

__all__ = [
    "DEFAULT_CALIBRATE_AFTER_REPORTS",
    "DEFAULT_FACT_INDEX_CHARS",
    "DEFAULT_MIN_COMPACTION_GAIN_TOKENS",
    "DEFAULT_PREPARE_THRESHOLD",
    "DEFAULT_SUMMARY_RESULT_CHARS",
    "Config",
]

#: ``Config.prepare_threshold`` of a Config built now (recorded Configs without it decode to 0).
DEFAULT_PREPARE_THRESHOLD = 0.85

#: ``Config.fact_index_chars`` of a Config built now (recorded Configs without it decode to 0).
#: Chosen by ``bench/quality.py`` on the real traces (see bench/README_quality.md).
DEFAULT_FACT_INDEX_CHARS = 16_000

#: ``Config.calibrate_after_reports`` of a Config built now (recorded Configs decode to 0: off).
DEFAULT_CALIBRATE_AFTER_REPORTS = 3

#: ``Config.summary_result_chars`` of a Config built now (recorded Configs decode to 0: raw).
DEFAULT_SUMMARY_RESULT_CHARS = 1_000

#: ``Config.min_compaction_gain_tokens`` of a Config built now (recorded Configs without it decode
#: to 0: off). Chosen by ``bench/quality.py`` on the real traces: at 32k (where a tenth of the
#: threshold is exactly this) it lowers the Anthropic-style billed cost by 10.5 % against the
#: defaults before the rule (4.3 points more than the rule off); no value tried lowered it more.
DEFAULT_MIN_COMPACTION_GAIN_TOKENS = 2_560

ThresholdPolicyName = Literal["fixed", "dynamic"]

# Seed names first (the articles' environment variables), then the CTXLEDGER_* name of each field.
_SEED_ENV_NAMES = {
    "context_window": "CONTEXT_WINDOW",
    "compression_threshold": "COMPRESSION_THRESHOLD",
    "min_retain_rounds": "MIN_RETAIN_ROUNDS",
    "summary_timeout": "SUMMARY_TIMEOUT",
}
# Spellings of a boolean in an environment variable.
_BOOLS = {
    **dict.fromkeys(("1", "true", "yes", "on"), True),
    **dict.fromkeys(("0", "false", "no", "off"), False),
}


class _ConfigMeta(msgspec.StructMeta):
    """Gives a Config that code builds the current defaults of :attr:`Config.NEW_DEFAULTS`.

    A msgspec Struct has one default per field, used both when code omits the field and when
    decoding data that lacks it. For a field added in a later version those must differ: a
    Config recorded by an older version lacks the field, and must decode to the value that
    reproduces the old behaviour (the field's declared default, "off"), while a Config built now
    gets the field's new default. Decoding (msgpack, JSON, ``msgspec.convert``) never calls the
    class, so only construction (``Config(...)``, ``Config.from_env``) passes through here;
    :meth:`Config.replace` keeps the values it copies.
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        for name, value in cls.NEW_DEFAULTS.items():  # type: ignore[attr-defined]
            kwargs.setdefault(name, value)
        return super().__call__(*args, **kwargs)


class Config(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=False,
    gc=False,
    metaclass=_ConfigMeta,
):
    """How one session budgets, compacts and projects its context.

    A session's Config is recorded in its log when the session is created and whenever it changes,
    so replay always uses the settings that were in force. New fields always get defaults. A field
    added after a release declares the default that reproduces the older behaviour (what a
    recorded Config that lacks the field decodes to) and lists its default for new Configs in
    :attr:`NEW_DEFAULTS` (DESIGN §2, "Config over time").

    Attributes:
        context_window: The model's context window, in tokens.
        compression_threshold: Compact when the estimate reaches this share of the window.
        min_retain_rounds: Rounds (user turns) kept verbatim after the cut.
        summary_timeout: Seconds the summariser may take before the compaction is abandoned.
        micro_keep_recent: Tool results newer than this many are never masked.
        micro_min_chars: Tool results at most this long are never masked.
        micro_preserve_tools: Tools whose results are never masked.
        micro_batch: Re-mask only when this many more results have aged past
            ``micro_keep_recent`` (1 reproduces the seed behaviour; larger keeps the prompt prefix
            byte-stable between re-maskings, which keeps provider prompt caches warm). The default,
            4, was chosen by ``bench/quality.py`` on the real traces: median prefix stability
            between compactions 94.6 % (1: 90.5 %, 8: 96.0 %) with fewer compactions and less
            summariser input than 8 (14 vs 17 compactions at a 32k window).
        max_reactive_retries: Reactive compactions before :class:`ContextOverflowError`.
        snapshot_interval: Events between projection snapshots.
        max_tool_result_chars: A tool result longer than this is shown truncated (head, tail and a
            marker naming its seq); 0 means a quarter of the base threshold, in characters
            (``base_threshold_tokens * 3 // 4``); never below 120.
        summary_max_chars: Room reserved for the summary when a cut is planned; 0 means a tenth
            of the base threshold, in characters (``base_threshold_tokens * 3 // 10``).
        summary_chunk_chars: Largest summariser input in one call; longer inputs are summarised
            in chunks. 0 means half the window, in characters (``context_window * 3 // 2``).
        threshold_policy: ``"fixed"`` (``window * compression_threshold``) or ``"dynamic"``
            (``0.3 * window``, times 0.8 early in a session and 1.2 while debugging, never above the
            fixed threshold; see :class:`ctxledger.domain.DynamicThreshold`). The *base
            threshold* that the automatic sizes derive from is the fixed threshold, or
            ``0.3 * window`` (capped by it) under the dynamic policy.
        keep_first_request: Keep the session's first user message (usually the task statement)
            in every view: once a checkpoint covers it, it is shown in the pinned slot, before the
            summary, cut to ``max_tool_result_chars`` (head, tail and a marker naming its seq)
            unless it is pinned explicitly. It is still summarised, like a pinned message. Most
            real sessions are one long round, so the first step-level cut would otherwise leave
            only the summary's head and tail of the task.
        prepare_threshold: Share of the compaction threshold at which a summary starts in the
            background (DESIGN §2 "Background compaction"), so that the compaction at the
            threshold finds it ready instead of making the agent wait for the summariser. ``0``
            turns background compaction off (every compaction then runs when it is due, as
            before). New Configs get :data:`DEFAULT_PREPARE_THRESHOLD` (0.85); a Config recorded
            before this field existed decodes to 0, so old logs replay as they were served.
        fact_index_chars: Room, in characters, for the "facts from compacted history" block that
            follows each new checkpoint's summary: the file paths, commands, error lines, test and
            function names and user request lines of the covered messages that the summary and
            the rest of the view do not already show, newest first (see
            :mod:`ctxledger.domain.facts`). The planner reserves the room next to the summary's,
            so the view still fits; never more than a fifth of the base threshold, in characters
            (:func:`ctxledger.domain.fact_index_chars`). 0 turns the block off. New Configs get
            :data:`DEFAULT_FACT_INDEX_CHARS` (16,000, chosen by ``bench/quality.py``); a Config
            recorded before the field existed decodes to 0, so old logs replay as written.
        max_total_tokens: A cap on the session's cumulative tokens (every input and output
            token the provider reported, :meth:`ctxledger.Session.usage`): once they reach it,
            ``prepare_step`` raises :class:`ctxledger.BudgetExceededError` and records
            ``BudgetExhausted`` (once per cap); a new Config with a higher cap lets the session go
            on. 0 (the default) means no cap.
        calibrate_after_reports: The default tokenizer (``chars // 3``) learns the session's
            characters per token from the provider's usage reports, each paired with the view it
            measured (``TokenizerCalibrated`` events, so replay is exact), and uses the learnt,
            conservative ratio once this many reports were paired (never more than 3 characters
            per token: calibration counts dense text as more tokens, never sparse text as
            fewer). 0 turns calibration off; new Configs get
            :data:`DEFAULT_CALIBRATE_AFTER_REPORTS` (3), recorded Configs without the field
            decode to 0. A tokenizer passed to the host is never replaced.
        min_compaction_gain_tokens: A compaction at the threshold that would shrink the view by
            fewer estimated tokens than this is skipped with reason ``gain_too_small`` (it would
            break the provider's cached prompt prefix for little), unless the view would not fit
            the window without it; likewise, old tool results are re-masked only when the
            results newly masked save at least this many tokens (compaction still guards the
            window). Never more than a tenth of the base threshold is applied
            (:func:`ctxledger.domain.min_gain_tokens`). 0 turns the rule off. New Configs get
            :data:`DEFAULT_MIN_COMPACTION_GAIN_TOKENS` (2,560, chosen by ``bench/quality.py``);
            recorded Configs without the field decode to 0, so old logs replay as served.
        floor_guard: Do not compact when the part of the view no compaction can shrink (system
            messages, pins, the summary reserve and the newest step) is above the threshold
            (reason ``floor_above_threshold``): such a compaction cannot bring the view under the
            threshold, so it would run at every step. It runs again only once the view would
            not fit the window, and then makes room below the window (giving the summary and
            the fact block what room is left when their full rooms do not fit; a new checkpoint
            whose texts count more tokens than their room, by a tokenizer that counts words, is
            shortened, fact block first, until the view fits). When the floor
            exceeds the window even with an empty summary, ``prepare_step`` raises
            :class:`ctxledger.ContextOverflowError` naming the floor and the window instead of
            serving a view the provider will reject. New Configs get ``True``; recorded
            Configs without the field decode to ``False``.
        summary_result_chars: What the summariser is given of a tool result longer than this:
            its head and tail (this many characters in all) and the facts extracted from the
            rest; and a message that repeats one given earlier in the same compaction is given
            as a reference to it (:mod:`ctxledger.domain.digest`). Views and history are not
            affected. 0 gives every covered message raw; new Configs get
            :data:`DEFAULT_SUMMARY_RESULT_CHARS`, recorded Configs without the field decode to 0.
    """

    #: Fields added after 0.1.0, with their default for a Config built now. A recorded Config
    #: that lacks one decodes to the field's declared default instead (the older behaviour).
    NEW_DEFAULTS: ClassVar[Mapping[str, Any]] = MappingProxyType(
        {
            "prepare_threshold": DEFAULT_PREPARE_THRESHOLD,
            "fact_index_chars": DEFAULT_FACT_INDEX_CHARS,
            "max_total_tokens": 0,
            "calibrate_after_reports": DEFAULT_CALIBRATE_AFTER_REPORTS,
            "min_compaction_gain_tokens": DEFAULT_MIN_COMPACTION_GAIN_TOKENS,
            "floor_guard": True,
            "summary_result_chars": DEFAULT_SUMMARY_RESULT_CHARS,
        }
    )

    context_window: int = 128_000
    compression_threshold: float = 0.8
    min_retain_rounds: int = 10
    summary_timeout: float = 120.0
    micro_keep_recent: int = 3
    micro_min_chars: int = 100
    micro_preserve_tools: tuple[str, ...] = ()
    micro_batch: int = 4
    max_reactive_retries: int = 3
    snapshot_interval: int = 1000
    max_tool_result_chars: int = 0
    summary_max_chars: int = 0
    summary_chunk_chars: int = 0
    threshold_policy: ThresholdPolicyName = "fixed"
    keep_first_request: bool = True
    prepare_threshold: float = 0.0
    fact_index_chars: int = 0
    max_total_tokens: int = 0
    calibrate_after_reports: int = 0
    min_compaction_gain_tokens: int = 0
    floor_guard: bool = False
    summary_result_chars: int = 0

    def __post_init__(self) -> None:
        _require_int(self, "context_window", minimum=1)
        threshold = self.compression_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, int | float):
            raise ConfigError("compression_threshold", f"must be a number, got {threshold!r}")
        if not 0 < threshold <= 1:
            raise ConfigError("compression_threshold", f"must be in (0, 1], got {threshold!r}")
        for name in (
            "min_retain_rounds",
            "micro_keep_recent",
            "micro_min_chars",
            "max_reactive_retries",
            "max_tool_result_chars",
            "summary_max_chars",
            "summary_chunk_chars",
            "fact_index_chars",
            "max_total_tokens",
            "calibrate_after_reports",
            "min_compaction_gain_tokens",
            "summary_result_chars",
        ):
            _require_int(self, name, minimum=0)
        _require_int(self, "micro_batch", minimum=1)
        _require_int(self, "snapshot_interval", minimum=1)
        timeout = self.summary_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ConfigError("summary_timeout", f"must be a positive number, got {timeout!r}")
        if not all(isinstance(tool, str) for tool in self.micro_preserve_tools):
            raise ConfigError("micro_preserve_tools", "must be a sequence of tool names")
        if not isinstance(self.keep_first_request, bool):
            raise ConfigError(
                "keep_first_request", f"must be True or False, got {self.keep_first_request!r}"
            )
        if not isinstance(self.floor_guard, bool):
            raise ConfigError("floor_guard", f"must be True or False, got {self.floor_guard!r}")
        prepare = self.prepare_threshold
        if isinstance(prepare, bool) or not isinstance(prepare, int | float):
            raise ConfigError("prepare_threshold", f"must be a number, got {prepare!r}")
        if not 0 <= prepare < 1:
            raise ConfigError("prepare_threshold", f"must be 0 (off) or in (0, 1), got {prepare!r}")
        if self.threshold_policy not in ("fixed", "dynamic"):
            raise ConfigError(
                "threshold_policy", f"must be 'fixed' or 'dynamic', got {self.threshold_policy!r}"
            )

    def replace(self, **changes: Any) -> Config:
        """Return a copy with ``changes`` applied (validated like a new Config).

        Raises:
            ConfigError: A changed value is invalid.
        """
        unknown = set(changes) - set(self.__struct_fields__)
        if unknown:
            name = sorted(unknown)[0]
            raise ConfigError(name, "no such setting")
        return msgspec.structs.replace(self, **changes)

    @property
    def threshold_tokens(self) -> int:
        """The fixed compaction threshold in tokens: ``int(window x compression_threshold)``."""
        return int(self.context_window * self.compression_threshold)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Config:
        """Build a Config from environment variables.

        Reads ``CONTEXT_WINDOW``, ``COMPRESSION_THRESHOLD``, ``MIN_RETAIN_ROUNDS`` and
        ``SUMMARY_TIMEOUT`` (the seed's names), and ``CTXLEDGER_<FIELD>`` for every field (which
        wins over the seed name). ``micro_preserve_tools`` is a comma-separated list; a boolean is
        ``true``/``false`` (or ``1``/``0``, ``yes``/``no``, ``on``/``off``).

        Args:
            environ: The variables to read; ``os.environ`` by default.
            **overrides: Values that win over the environment.

        Raises:
            ConfigError: A variable does not parse or its value is invalid.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name, field_type in _field_types().items():
            raw = env.get(f"CTXLEDGER_{name.upper()}")
            if raw is None and name in _SEED_ENV_NAMES:
                raw = env.get(_SEED_ENV_NAMES[name])
            if raw is not None:
                values[name] = _parse(name, field_type, raw)
        values.update(overrides)
        return cls(**values)


def _field_types() -> dict[str, Any]:
    info = msgspec.inspect.type_info(Config)
    assert isinstance(info, msgspec.inspect.StructType)
    return {field.name: field.type for field in info.fields}


def _parse(name: str, field_type: Any, raw: str) -> Any:
    text = raw.strip()
    try:
        if isinstance(field_type, msgspec.inspect.BoolType):
            return _BOOLS[text.lower()]
        if isinstance(field_type, msgspec.inspect.IntType):
            return int(text)
        if isinstance(field_type, msgspec.inspect.FloatType):
            return float(text)
        if isinstance(field_type, msgspec.inspect.VarTupleType):
            return tuple(part.strip() for part in text.split(",") if part.strip())
    except (KeyError, ValueError):
        raise ConfigError(name, f"cannot parse {raw!r}") from None
    return text


def _require_int(config: Config, name: str, *, minimum: int) -> None:
    value = getattr(config, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, f"must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(name, f"must be >= {minimum}, got {value}")
