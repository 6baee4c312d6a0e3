"""The frozen :class:`Config` of a session, its sizes in tokens, and its recorded versions.

One default per field, declared in the class: ``Config()`` and ``msgspec.convert({}, Config)``
are equal. A recorded Config carries :attr:`Config.schema_version`; one recorded before the
field existed is brought up by :func:`upcast_config` (the event codec calls it), which gives the
fields that did not exist then the values that reproduce how that version served its views
(DESIGN §2, "Config over time").

**What a 0 means.** In this schema a ``0`` is either a plain count (``min_retain_rounds``,
``micro_keep_recent``, ``micro_min_chars``, ``max_reactive_retries``) or *off*
(``prepare_threshold``, ``fact_index_chars``, ``max_total_tokens``,
``calibrate_after_reports``, ``summary_result_chars``); a value derived from the window and the
marks is ``None``, never ``0``.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

import msgspec

from ctxledger.errors import ConfigError

__all__ = [
    "CONFIG_SCHEMA",
    "DEFAULT_CALIBRATE_AFTER_REPORTS",
    "DEFAULT_COMPACTION_TARGET",
    "DEFAULT_SUMMARY_RESULT_CHARS",
    "LEGACY_SCHEMA",
    "MARKS_SCHEMA",
    "PREPARE_SHARE",
    "SHARES",
    "SIZE_MEANINGS",
    "Config",
    "PolicySizes",
    "Shares",
    "upcast_config",
]

#: The schema of a Config built now (the two-mark policy, its shares as of :data:`SHARES` 5).
CONFIG_SCHEMA = 5
#: The first schema of the two marks (its derived shares are kept for Configs recorded with it).
MARKS_SCHEMA = 4
#: What a recorded Config without ``schema_version`` is upcast to: the one-mark policy of every
#: release before the two marks, with its floor guard and gain rule.
LEGACY_SCHEMA = 3
#: ``Config.calibrate_after_reports``'s default.
DEFAULT_CALIBRATE_AFTER_REPORTS = 3
#: ``Config.summary_result_chars``'s default (chosen by ``bench/quality.py``, issue 17).
DEFAULT_SUMMARY_RESULT_CHARS = 1_000
#: The derived low mark stays this share of the window below the threshold (or at half of it).
TARGET_GAP = 0.2


class Shares(NamedTuple):
    """The derived sizes of one two-mark schema, as shares (see :data:`SHARES`).

    Attributes:
        target: The low mark when ``compaction_target`` is derived and the threshold leaves
            room for it, a share of the window.
        prepare: The derived prepare point: this share of the way from the target up to the
            threshold.
        summary: The summary's room, a share of the target.
        facts: The fact block's room, a share of the target.
        request: The kept first request is shown whole up to this share of the target, and
            truncated (head, tail, a marker naming its seq) above it.
        request_last: The fact block lists the kept request's lines after every other fact
            (the view shows its head and tail, the marker names its seq: a recall away), not
            with the other user request lines before the paths.
        group_paths: The fact block lists the paths of one message on one line (a listing's
            paths take the room of their text, not of a line each).
        block_gives_way: A summary prepared ahead is activated with a shorter fact block when
            that lets it absorb the growth, rather than the agent waiting at the threshold for
            a summary made then (the block's facts are in the log, a recall away).
        result_step: A summary prepared ahead is judged to absorb the growth only if it
            also absorbs a step that passes the threshold by a whole tool result at its
            truncation limit (at most the prepare point's distance below the threshold), not
            by a quarter of that distance: one long file read is such a step.
    """

    target: float
    prepare: float
    summary: float
    facts: float
    request: float
    request_last: bool
    group_paths: bool
    block_gives_way: bool
    result_step: bool


#: The derived shares per schema. A recorded Config keeps its schema's, so the views it served
#: replay unchanged. Schema 4 as the two marks were first released; schema 5 chosen by
#: ``bench/quality.py`` and ``bench/bench_background.py`` (bench/README_quality.md, "Two marks"):
#: a lower target, a kept request sized by what it costs the next compaction, and a prepare
#: point and absorb rule that leave room for one long tool result (the zero-wait share).
SHARES: dict[int, Shares] = {
    MARKS_SCHEMA: Shares(
        target=0.5,
        prepare=0.25,
        summary=0.15,
        facts=0.35,
        request=0.5,
        request_last=False,
        group_paths=False,
        block_gives_way=False,
        result_step=False,
    ),
    CONFIG_SCHEMA: Shares(
        target=0.45,
        prepare=0.1,
        summary=0.15,
        facts=0.35,
        request=0.1,
        request_last=True,
        group_paths=True,
        block_gives_way=True,
        result_step=True,
    ),
}
#: The low mark when ``compaction_target`` is derived (this schema's, see :data:`SHARES`).
DEFAULT_COMPACTION_TARGET = SHARES[CONFIG_SCHEMA].target
#: The derived prepare point's share of the way from the target up to the threshold.
PREPARE_SHARE = SHARES[CONFIG_SCHEMA].prepare
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
# Fields the one-mark releases added after 0.1.0, with what a Config recorded without them meant
# (the decoding default of those releases). Fields of this schema map to "one mark".
_LEGACY_MISSING: dict[str, Any] = {
    "prepare_threshold": 0.0,
    "fact_index_chars": 0,
    "max_total_tokens": 0,
    "calibrate_after_reports": 0,
    "min_compaction_gain_tokens": 0,
    "floor_guard": False,
    "summary_result_chars": 0,
    "max_tool_result_chars": 0,
    "summary_max_chars": 0,
    "summary_chunk_chars": 0,
    "compaction_target": 0.0,
}


class _ConfigMeta(msgspec.StructMeta):
    """Turns what the Struct refuses with a ``TypeError`` (an unknown key, a positional
    argument) into a :class:`ConfigError` naming it. It gives no defaults."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if args:
            raise ConfigError(
                "Config", "takes keyword arguments only, e.g. Config(context_window=8000)"
            )
        fields: tuple[str, ...] = cls.__struct_fields__
        unknown = sorted(set(kwargs) - set(fields))
        if unknown:
            raise ConfigError(unknown[0], "no such setting (see help(ctxledger.Config))")
        return super().__call__(**kwargs)


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


class Config(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=False,
    gc=False,
    metaclass=_ConfigMeta,
):
    """How one session budgets, compacts and projects its context.

    Most users set at most four fields: the window, the two marks and the rounds kept raw.
    Every size the policy reserves is derived from them (see :meth:`sizes`, or
    ``ctxledger policy --window N``). A value you set is used as given or refused with
    :class:`~ctxledger.ConfigError` naming the field and its range; nothing is clamped.

    Attributes:
        context_window: The model's context window, in tokens. Set it to your model's.
        compression_threshold: The high mark, a share of the window: a step whose estimate
            reaches it compacts first (equality compacts). Higher uses more of the window per
            call (more cost per call, fewer summaries); lower keeps views smaller and cheaper.
        compaction_target: The low mark, a share of the window with ``0 < target < threshold``:
            an automatic compaction brings the view to at most this, so the next one is the gap
            between the marks away. A wider gap means fewer summaries and cache breaks, a
            shorter raw tail after each. ``None`` (the default) derives it:
            ``min(0.45, max(threshold - 0.2, threshold / 2))`` (schema 4: ``min(0.5, ...)``).
        min_retain_rounds: Rounds (user turns) kept raw after a cut when they fit below the
            target; else the cut moves to a step boundary inside them. Raise it for chatty
            sessions where old turns matter; agent sessions are mostly one long round.
        summary_timeout: Seconds the summariser may take before the compaction is abandoned.
        micro_keep_recent: Tool results newer than this many are never masked.
        micro_min_chars: Tool results at most this long are never masked.
        micro_preserve_tools: Names of tools whose results are never masked (a tuple).
        micro_batch: Re-mask only when this many more results have aged past
            ``micro_keep_recent``: larger keeps the prompt prefix byte-stable (provider caches
            warm) for longer at the price of larger views; 1 is the seed's behaviour.
        max_reactive_retries: Reactive compactions before :class:`ContextOverflowError`.
        snapshot_interval: Events between projection snapshots (recovery reads at most this).
        max_tool_result_chars: A tool result longer than this is shown truncated (head, tail
            and a marker naming its seq); ``None`` derives it: a quarter of the window (half the
            default target; a share of the window, so that the marks never change a view they
            do not reach), at most 96,000. Lower it when agents read huge files.
        summary_max_chars: Room reserved for a summary; ``None``: 15 % of the target, at
            most 24,000. Larger keeps more detail per compaction and less raw tail.
        summary_chunk_chars: Largest summariser input of one call (longer inputs are
            summarised in chunks); ``None``: half the window, at most 300,000 characters.
        threshold_policy: ``"fixed"`` or ``"dynamic"`` (``0.3 * window``, times 0.8 early in a
            session and 1.2 while debugging, never above the fixed threshold; the target scales
            with it; see :class:`ctxledger.domain.DynamicThreshold`).
        keep_first_request: Keep the session's first user message (usually the task) in every
            view: once covered, it is shown in the pinned slot, whole up to a tenth of the
            target and truncated (head, tail, a marker naming its seq) above it, unless pinned;
            the lines the excerpt leaves out come last in the fact block (the whole message is
            in the log and a ``recall`` away). Every view after a cut carries it, so its size
            is what it costs the next compaction (schema 4: up to half the target, at most
            ``max_tool_result_chars``, its lines first in the block). Pin it to keep it whole.
        prepare_threshold: A summary starts in the background once the estimate reaches the
            prepare point, so that the compaction at the threshold finds it ready (it is planned
            deep enough that the view lands at the target then). ``None`` (the default) puts the
            point a tenth of the way from the target up to the threshold (schema 4: a quarter);
            a number sets it to that share of the threshold (it must lie above the target); 0
            turns background compaction off (the agent then waits for each summary). Earlier
            gives a slow summariser more time, at the price of summaries made for sessions that
            stop before the threshold. A summary is not prepared when the session's pace since
            its last checkpoint says it cannot be ready before the threshold; one prepared ahead
            is activated with a shorter fact block when that lets it land within half the gap
            above the target, rather than the agent wait (schema 5), and its delta is prepared
            while it would not absorb a step of one whole tool result at the threshold (schema
            5; schema 4: a quarter of the prepare point's distance below it).
        fact_index_chars: Room for the "facts from compacted history" block after each new
            summary (paths, commands, error lines, names the view no longer shows; the paths of
            one message on one line). ``None``: 35 % of the target, at most 16,000; 0: no
            block. Summary and block together take at most half the target.
        max_total_tokens: Cap on the session's cumulative provider tokens; once reached,
            ``prepare_step`` raises :class:`ctxledger.BudgetExceededError`. 0: no cap.
        calibrate_after_reports: The default tokenizer learns the session's characters per
            token from this many usage reports (never counting fewer tokens than ``chars // 3``);
            0: off. A tokenizer passed to the host is never replaced.
        min_compaction_gain_tokens: Retired in schema 4 (the target does its work): must be 0.
            Recorded Configs of older logs carry it and replay as they were served.
        floor_guard: Retired in schema 4 (the policy itself never compacts when that cannot
            bring the view under the threshold): must be False; recorded Configs carry it.
        summary_result_chars: The summariser sees a tool result longer than this as its head
            and tail plus the facts of the rest (views are not affected); 0 gives it raw.
        schema_version: The schema the Config was written with (5 now; 4 for a Config recorded
            with the two marks' first shares, which keeps them; 3 for one recorded before the two
            marks, which replays with the one-mark policy it was served with).
    """

    context_window: int = 128_000
    compression_threshold: float = 0.8
    compaction_target: float | None = None
    min_retain_rounds: int = 10
    summary_timeout: float = 120.0
    micro_keep_recent: int = 3
    micro_min_chars: int = 100
    micro_preserve_tools: tuple[str, ...] = ()
    micro_batch: int = 4
    max_reactive_retries: int = 3
    snapshot_interval: int = 1000
    max_tool_result_chars: int | None = None
    summary_max_chars: int | None = None
    summary_chunk_chars: int | None = None
    threshold_policy: ThresholdPolicyName = "fixed"
    keep_first_request: bool = True
    prepare_threshold: float | None = None
    fact_index_chars: int | None = None
    max_total_tokens: int = 0
    calibrate_after_reports: int = DEFAULT_CALIBRATE_AFTER_REPORTS
    min_compaction_gain_tokens: int = 0
    floor_guard: bool = False
    summary_result_chars: int = DEFAULT_SUMMARY_RESULT_CHARS
    schema_version: int = CONFIG_SCHEMA

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def legacy(self) -> bool:
        """Whether this Config was recorded before the two marks (schema 3: one mark)."""
        return self.schema_version < MARKS_SCHEMA

    def replace(self, **changes: Any) -> Config:
        """Return a copy with ``changes`` applied (validated like a new Config).

        Raises:
            ConfigError: A changed value is invalid, or no field has that name.
        """
        unknown = sorted(set(changes) - set(self.__struct_fields__))
        if unknown:
            raise ConfigError(unknown[0], "no such setting (see help(ctxledger.Config))")
        return msgspec.structs.replace(self, **changes)

    @property
    def threshold_tokens(self) -> int:
        """The fixed compaction threshold in tokens: ``int(window x compression_threshold)``."""
        return int(self.context_window * self.compression_threshold)

    def sizes(self) -> PolicySizes:
        """Return every size the compaction policy uses, derived from this Config alone.

        Under ``threshold_policy="dynamic"`` the marks are the dynamic policy's base (``0.3 x
        window``, never above the fixed threshold; the target scaled with it).
        """
        return _sizes(self)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Config:
        """Build a Config from environment variables.

        Reads ``CONTEXT_WINDOW``, ``COMPRESSION_THRESHOLD``, ``MIN_RETAIN_ROUNDS`` and
        ``SUMMARY_TIMEOUT`` (the seed's names), and ``CTXLEDGER_<FIELD>`` for every field (which
        wins over the seed name). ``micro_preserve_tools`` is a comma-separated list; a boolean is
        ``true``/``false`` (or ``1``/``0``, ``yes``/``no``, ``on``/``off``); ``none`` (or an
        empty value) asks for the derived value of a field that has one.

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


def upcast_config(raw: dict[str, Any]) -> dict[str, Any]:
    """Bring the raw map of a recorded Config up to the current schema (before decoding).

    A map that carries ``schema_version`` is current. One without it was written by a release
    before the two marks: the fields those releases added after 0.1.0 that it lacks take the
    values their decoding gave them (off), and ``schema_version`` becomes :data:`LEGACY_SCHEMA`
    with ``compaction_target`` 0 (no low mark), so the views it served replay unchanged.
    """
    if "schema_version" in raw:
        return raw
    return {**_LEGACY_MISSING, **raw, "schema_version": LEGACY_SCHEMA}


# --- sizes ----------------------------------------------------------------------------------------


def _base_threshold(config: Config) -> int:
    fixed = config.threshold_tokens
    if config.threshold_policy == "dynamic":
        return max(1, min(fixed, int(config.context_window * DYNAMIC_BASE_RATIO)))
    return max(1, fixed)


def derived_target(threshold: float, schema: int = CONFIG_SCHEMA) -> float:
    """The low mark ``compaction_target=None`` gives for a threshold (a share of the window)
    under a two-mark ``schema``: ``min(target share, max(threshold - 0.2, threshold / 2))``."""
    # Rounded: 0.7 - 0.2 is 0.49999999999999994 in floats, and a mark must not lose a token.
    ceiling = SHARES[schema].target
    return round(min(ceiling, max(threshold - TARGET_GAP, threshold / 2)), 9)


@functools.lru_cache(maxsize=256)
def _sizes(config: Config) -> PolicySizes:
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
            MIN_TOOL_RESULT_CHARS, min(tool, _derived(shares.request, target, REQUEST_CAP))
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


def _derived(share: float, target: int, cap: int) -> int:
    return min(cap, int(target * share * CHARS_PER_TOKEN))


def _rooms(config: Config, target: int, shares: Shares) -> tuple[int, int]:
    """The summary's and the fact block's rooms, in characters: together at most half the
    target; a derived one takes what an explicit one leaves."""
    half = target * CHARS_PER_TOKEN // 2
    summary, facts = config.summary_max_chars, config.fact_index_chars
    if facts is None:
        taken = summary if summary is not None else _derived(shares.summary, target, SUMMARY_CAP)
        facts = max(0, min(_derived(shares.facts, target, FACTS_CAP), half - taken))
    if summary is None:
        summary = min(_derived(shares.summary, target, SUMMARY_CAP), half - facts)
    return max(1, summary), facts


# --- validation -----------------------------------------------------------------------------------


def _validate(config: Config) -> None:
    if config.schema_version not in (LEGACY_SCHEMA, *SHARES):
        raise ConfigError(
            "schema_version",
            f"must be {CONFIG_SCHEMA} ({MARKS_SCHEMA} for a Config recorded with the first "
            f"two-mark shares, {LEGACY_SCHEMA} for one recorded before the two marks), got "
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


def _validate_legacy(config: Config) -> None:
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


def _validate_marks(config: Config, threshold: float) -> None:
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
    sizes = _sizes(config)
    half = sizes.target_tokens * CHARS_PER_TOKEN // 2
    if sizes.summary_chars + sizes.facts_chars > half:
        name = "fact_index_chars" if facts is not None else "summary_max_chars"
        raise ConfigError(
            name,
            f"the summary ({sizes.summary_chars:,}) and the fact block ({sizes.facts_chars:,}) "
            f"together must take at most half the target ({half:,} characters at this window)",
        )
    shares = SHARES[config.schema_version]
    derived_summary = _derived(shares.summary, sizes.target_tokens, SUMMARY_CAP)
    if summary is None and sizes.summary_chars < min(MIN_SUMMARY_CHARS, derived_summary):
        raise ConfigError(
            "fact_index_chars",
            f"leaves the summary {sizes.summary_chars:,} characters of half the target "
            f"({half:,} characters at this window): use a smaller block",
        )


def _require_share(config: Config, name: str) -> float:
    value = getattr(config, name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(name, f"must be a number, got {value!r}")
    return float(value)


def _require_int(config: Config, name: str, *, minimum: int, derived: bool = False) -> None:
    value = getattr(config, name)
    hint = " or None (derived)" if derived else ""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, f"must be an integer{hint}, got {value!r}")
    if value < minimum:
        raise ConfigError(name, f"must be >= {minimum}{hint}, got {value}")


# --- environment ----------------------------------------------------------------------------------


def _field_types() -> dict[str, Any]:
    info = msgspec.inspect.type_info(Config)
    assert isinstance(info, msgspec.inspect.StructType)
    return {field.name: field.type for field in info.fields}


def _parse(name: str, field_type: Any, raw: str) -> Any:
    text = raw.strip()
    if isinstance(field_type, msgspec.inspect.UnionType):
        if text.lower() in ("", "none"):
            return None
        field_type = next(
            t for t in field_type.types if not isinstance(t, msgspec.inspect.NoneType)
        )
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
