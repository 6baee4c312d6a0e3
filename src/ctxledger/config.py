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

The versions and their shares (``_config_schema``), the sizes (``_config_sizes``) and the checks
(``_config_checks``) are private modules; every public name of theirs is importable from here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from ctxledger._config_checks import validate
from ctxledger._config_schema import (
    CONFIG_SCHEMA,
    DEFAULT_CALIBRATE_AFTER_REPORTS,
    DEFAULT_COMPACTION_TARGET,
    DEFAULT_SUMMARY_RESULT_CHARS,
    LEGACY_SCHEMA,
    MARKS_SCHEMA,
    PREPARE_SHARE,
    SHARES,
    TARGET_GAP,
    VIEW_HASH_SCHEMA,
    Shares,
    derived_target,
    upcast_config,
)
from ctxledger._config_sizes import (
    CHARS_PER_TOKEN,
    CHUNK_CAP,
    CHUNK_SHARE,
    DYNAMIC_BASE_RATIO,
    FACTS_CAP,
    MIN_SUMMARY_CHARS,
    MIN_TOOL_RESULT_CHARS,
    REQUEST_CAP,
    SIZE_MEANINGS,
    SUMMARY_CAP,
    TOOL_RESULT_CAP,
    TOOL_RESULT_SHARE,
    PolicySizes,
    policy_sizes,
    prepare_point,
)
from ctxledger.errors import ConfigError

# The schema, sizes and checks live in private modules; every public name stays importable here.
__all__ = [
    "CHARS_PER_TOKEN",
    "CHUNK_CAP",
    "CHUNK_SHARE",
    "CONFIG_SCHEMA",
    "DEFAULT_CALIBRATE_AFTER_REPORTS",
    "DEFAULT_COMPACTION_TARGET",
    "DEFAULT_SUMMARY_RESULT_CHARS",
    "DYNAMIC_BASE_RATIO",
    "FACTS_CAP",
    "LEGACY_SCHEMA",
    "MARKS_SCHEMA",
    "MIN_SUMMARY_CHARS",
    "MIN_TOOL_RESULT_CHARS",
    "PREPARE_SHARE",
    "REQUEST_CAP",
    "SHARES",
    "SIZE_MEANINGS",
    "SUMMARY_CAP",
    "TARGET_GAP",
    "TOOL_RESULT_CAP",
    "TOOL_RESULT_SHARE",
    "VIEW_HASH_SCHEMA",
    "Config",
    "PolicySizes",
    "Shares",
    "ThresholdPolicyName",
    "derived_target",
    "prepare_point",
    "upcast_config",
]

#: How the threshold is chosen (``Config.threshold_policy``): a fixed share of the window, or
#: one that moves with the session's phase (:class:`ctxledger.domain.DynamicThreshold`).
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


class KeywordsMeta(msgspec.StructMeta):
    """The metaclass of a settings Struct (:class:`Config`, ``HostOptions``): turns what the
    Struct refuses with a bare ``TypeError`` (a positional argument, an unknown keyword) into
    the error a subclass names (``error(field, message)``). It gives no defaults."""

    error: Any = ConfigError
    example = "Config(context_window=8000)"
    noun = "setting"

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        meta = type(cls)
        if args:
            raise meta.error(cls.__name__, f"takes keyword arguments only, e.g. {meta.example}")
        fields: tuple[str, ...] = cls.__struct_fields__
        unknown = sorted(set(kwargs) - set(fields))
        if unknown:
            raise meta.error(
                unknown[0], f"no such {meta.noun} (see help(ctxledger.{cls.__name__}))"
            )
        return super().__call__(**kwargs)


class Config(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=False,
    gc=False,
    metaclass=KeywordsMeta,
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
            Its host-level place is ``HostOptions.snapshot_interval``: when set, it overrides
            this one for every session of the host; when ``None`` (its default), this one
            holds (as it does for ``ctxledger salvage``, which runs no host).
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
        schema_version: The schema the Config was written with (6 now; 5 for a Config recorded
            before views were hashed with version 2, whose views keep version 1 (see
            :attr:`view_hash_version`); 4 for one recorded with the two marks' first shares,
            which keeps them; 3 for one recorded before the two marks, which replays with the
            one-mark policy it was served with).
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
        validate(self)

    @property
    def legacy(self) -> bool:
        """Whether this Config was recorded before the two marks (schema 3: one mark)."""
        return self.schema_version < MARKS_SCHEMA

    @property
    def view_hash_version(self) -> int:
        """The version of :func:`ctxledger.domain.view_hash` this Config's views are hashed with:
        2 from schema 6 on, 1 for a Config recorded before (its recorded views verify)."""
        return 2 if self.schema_version >= VIEW_HASH_SCHEMA else 1

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
        return policy_sizes(self)

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
