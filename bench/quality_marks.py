"""The two-mark policy on the real traces (issue 26): before/after, and the sweep of the target.

Two measurements per Config and window, both on the 34 traces of ../shared/traces:

* **quality replay** (:func:`quality_policies.replay`, policy "(a) + fact index"): a step is
  prepared before each assistant message through :class:`~ctxledger.testing.DomainSession`
  (synchronous compactions, the offline extractive summariser); it gives compactions, summariser
  input, facts kept (the loss audit of each compaction: all paths, errors, commands), the
  cache-stable prefix between compactions, the share of prompt tokens a prefix cache serves and
  the peak view.
* **what-if** (:func:`ctxledger.replay.what_if`), as the issue measured it: each trace recorded
  once under a 1,000,000-token window (an agent step every 0.25 s, a view after each, no
  compaction), then re-projected under the Config, background summaries included as a host
  would run them (``summary_seconds`` 2): compactions, peak view, views at or over the threshold.

"Before" is the Config main built before the two marks (commit 2cca20a: one mark, the floor
guard, the gain rule of 2,560 tokens capped at a tenth of the threshold, the fact block of
16,000 characters capped at a fifth of it), decoded as a recorded Config of then decodes
(schema 3), so it runs exactly the one-mark code of main. "Schema 4" is the two marks as first
released (target 0.5, the kept request up to half the target, its lines first in the fact
block), as a Config recorded with it replays; "defaults" is a Config built now (schema 5).
What-if is also run with background compaction off (``prepare_threshold=0``): the compactions
the marks alone make, without the summaries prepared ahead that absorb growth.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import msgspec

from ctxledger import Config
from ctxledger.config import upcast_config
from ctxledger.messages import Message
from ctxledger.replay import what_if

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_background import trace_log

__all__ = ["BEFORE", "before_config", "first_marks_config", "marks_config", "what_if_row"]

#: The fields main's ``Config()`` set besides the declared defaults (its ``NEW_DEFAULTS``).
BEFORE: dict[str, Any] = {
    "prepare_threshold": 0.85,
    "fact_index_chars": 16_000,
    "max_total_tokens": 0,
    "calibrate_after_reports": 3,
    "min_compaction_gain_tokens": 2_560,
    "floor_guard": True,
    "summary_result_chars": 1_000,
}
#: The window the traces are recorded under for what-if (nothing compacts there).
RECORD_WINDOW = 1_000_000
SUMMARY_SECONDS = 2.0


def before_config(window: int, **overrides: Any) -> Config:
    """``Config(context_window=window)`` as main built it before the two marks (schema 3)."""
    raw = {"context_window": window, **BEFORE, **overrides}
    config: Config = msgspec.convert(upcast_config(raw), Config)
    return config


def marks_config(window: int, **overrides: Any) -> Config:
    """A Config built now (the two marks) at ``window``."""
    return Config(context_window=window, **overrides)


def first_marks_config(window: int) -> Config:
    """``Config(context_window=window)`` as the first two-mark release built it (schema 4)."""
    return Config(context_window=window, schema_version=4)


_LOGS: dict[str, Any] = {}


def what_if_row(traces: dict[str, list[Message]], config: Config) -> dict[str, Any]:
    """What-if figures of ``config`` over every trace (each recorded once, cached)."""
    compactions = peak = at_threshold = over_window = late = in_time = 0
    worst = ("", 0)
    threshold = config.threshold_tokens
    for name, messages in sorted(traces.items()):
        log = _LOGS.get(name)
        if log is None:
            log = _LOGS[name] = trace_log(name, messages, Config(context_window=RECORD_WINDOW))
        report = what_if(log, name, config, summary_seconds=SUMMARY_SECONDS)
        compactions += report.compactions
        worst = max(worst, (name, report.compactions), key=lambda item: item[1])
        peak = max(peak, report.peak_tokens)
        served = [step for step in report.steps if not step.refused]
        at_threshold += sum(1 for step in served if step.view_tokens >= threshold)
        over_window += sum(1 for step in report.steps if step.view_tokens > config.context_window)
        in_time += report.prepared_in_time
        late += report.prepared_late
    synchronous = 0
    if config.prepare_threshold != 0:
        off = config.replace(prepare_threshold=0.0)
        for name in sorted(traces):
            synchronous += what_if(_LOGS[name], name, off).compactions
    else:
        synchronous = compactions
    return {
        "compactions": compactions,
        "synchronous_compactions": synchronous,
        "worst_trace": {"trace": worst[0], "compactions": worst[1]},
        "peak_tokens": peak,
        "views_at_or_over_threshold": at_threshold,
        "views_over_window": over_window,
        "prepared_in_time": in_time,
        "prepared_late": late,
    }


# --- the section of bench/quality.py -------------------------------------------------------------

#: The columns of the two-mark tables: (title, key in a row, format).
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("target", "target_tokens", "{:,}"),
    ("compactions (replay)", "compactions", "{:,}"),
    ("compactions (what-if)", "what_if_compactions", "{:,}"),
    ("compactions (what-if, background off)", "what_if_synchronous", "{:,}"),
    ("most in one trace", "what_if_worst", "{:,}"),
    ("summariser input tokens", "summarizer_input_tokens", "{:,}"),
    ("paths (all) kept", "paths_all", "{:.1%}"),
    ("errors kept", "errors", "{:.1%}"),
    ("commands kept", "commands", "{:.1%}"),
    ("user request lines kept", "requests", "{:.1%}"),
    ("stable prefix, median between compactions", "stability", "{:.1%}"),
    ("prompt tokens a prefix cache serves", "cached_share", "{:.1%}"),
    ("peak view (what-if)", "what_if_peak", "{:,}"),
    ("views at/over threshold (what-if)", "what_if_at_threshold", "{:,}"),
)


def marks_row(
    traces: dict[str, list[Message]],
    config: Config,
    run: Any,
    totals: Any,
) -> dict[str, Any]:
    """One row: the quality replay's totals (``totals(run(traces, policy, config))``) and
    what-if's figures of ``config``."""
    total = totals(run(traces, "ctxledger+facts", config))
    retention = total["retention"]
    wi = what_if_row(traces, config)
    return {
        "target_tokens": config.sizes().target_tokens,
        "compactions": total["compactions"],
        "what_if_compactions": wi["compactions"],
        "what_if_synchronous": wi["synchronous_compactions"],
        "what_if_worst": wi["worst_trace"]["compactions"],
        "summarizer_input_tokens": total["summarizer_input_tokens"],
        "paths_all": retention["paths_all"]["next_share"] or 0.0,
        "errors": retention["errors"]["next_share"] or 0.0,
        "commands": retention["commands"]["next_share"] or 0.0,
        "requests": retention["requests"]["next_share"] or 0.0,
        "stability": total["stability_median_between"] or 0.0,
        "cached_share": total["cached_share"] or 0.0,
        "what_if_peak": wi["peak_tokens"],
        "what_if_at_threshold": wi["views_at_or_over_threshold"],
        "what_if_prepared_in_time": wi["prepared_in_time"],
        "what_if_prepared_late": wi["prepared_late"],
    }


def marks_section(
    traces: dict[str, list[Message]],
    windows: list[int],
    targets: list[float],
    run: Any,
    totals: Any,
    log: Any,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Before (one mark, main) against the two marks (the defaults, then each target of the
    sweep), per window."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for window in windows:
        rows: dict[str, Any] = {}
        variants = {
            "before: one mark (main)": before_config(window),
            "two marks, schema 4 (first release)": first_marks_config(window),
            "two marks (defaults, schema 5)": marks_config(window),
        }
        for target in targets:
            variants[f"two marks, target {target}"] = marks_config(window, compaction_target=target)
        for name, config in variants.items():
            log(f"  two marks at window {window:,}: {name} ...")
            rows[name] = marks_row(traces, config, run, totals)
        out[str(window)] = rows
    return out


def marks_markdown(section: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """The tables of :func:`marks_section`, one per window."""
    lines = [
        "",
        "## Two marks (issue 26)",
        "",
        "Policy (a) + fact index on the 34 traces. *replay*: a step before each assistant "
        "message through DomainSession (synchronous compactions); *what-if*: each trace "
        "recorded once under a 1,000,000-token window and re-projected, background summaries "
        "included (2 s each, a step every 0.25 s). Facts kept: the loss audit of each "
        "compaction (the share of the covered messages' facts found in the next view). "
        "*before*: the one-mark Config main built (floor guard, gain rule, its clamp); "
        "*schema 4*: the two marks as first released; *defaults*: a Config built now. "
        "*background off*: what-if with ``prepare_threshold=0``.",
    ]
    for window, rows in section.items():
        lines += [
            "",
            f"### Window {int(window):,} (threshold 0.8)",
            "",
            "| Config | " + " | ".join(title for title, _, _ in COLUMNS) + " |",
            "|---|" + "---:|" * len(COLUMNS),
        ]
        for name, row in rows.items():
            cells = [fmt.format(row[key]) for _, key, fmt in COLUMNS]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines
