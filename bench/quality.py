"""Context quality on real traces: ctxledger against naive and replace-everything compaction.

Replays every trace in ../shared/traces through four policies (see :mod:`quality_policies`:
ctxledger without and with the fact block, naive, replace) with a 32,000-token window and the
offline :class:`ExtractiveSummarizer`, preparing a step (compact if needed, then serve the view)
right before each assistant message and once at the end, and reports per trace and in total:

* peak view tokens (chars // 3) against the window; any view above it is an overflow;
* summariser calls and input tokens (chars // 3 of each request's messages + previous summary);
* fact retention, from the library's loss audit (:func:`ctxledger.domain.audit_checkpoint`, the
  extractor of :mod:`ctxledger.domain.facts`): the file paths (named ones, and all, tool-output
  listings included), shell commands, error lines, test/function names, numbers with units and
  user request lines of the messages a compaction takes out of the raw tail, and the share of
  them found verbatim (whitespace-collapsed) in the next served view; as a long-term figure, in
  the last view;
* what stays raw after a compaction (tail tokens; is the newest tool result still shown);
* prompt-cache stability: the share of each view (OpenAI-rendered JSON, message by message) that
  is a byte-identical prefix of the previous view, as medians over the steps between compactions
  and over all steps, and the share of all prompt tokens a prefix cache could serve.

It also replays two prototype fixes (pinning the task / the round's opener, see
:data:`quality_policies.PROTOTYPES`), sweeps ``micro_batch`` over 1, 2, 4, 8, 16 for
ctxledger's policy, at 32,000 tokens and at other windows, and sweeps ``fact_index_chars`` for
the fact block (and compares it off and at its default at the other windows). Usage::

    .venv/bin/python bench/quality.py                 # writes bench/results/quality.{md,json,png}
    .venv/bin/python bench/quality.py --traces DIR --out DIR --batches 1,8 --sweep-windows "" \
        --fact-sizes 0,16000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from quality_marks import before_config, marks_config, marks_markdown, marks_section
from quality_policies import POLICIES, PROTOTYPES, WINDOW, Replay, policy_config, replay

from ctxledger import Config, Pricing
from ctxledger.domain import (
    Fact,
    ModelView,
    fact_index_chars,
    message_chars,
    shown_text,
    threshold_for,
)
from ctxledger.messages import Message
from ctxledger.summarizers.extractive import ExtractiveSummarizer
from ctxledger.tooling.traces import read_trace

HERE = Path(__file__).resolve().parent
DEFAULT_TRACES = Path(os.environ.get("CTXLEDGER_TRACES", HERE.parents[1] / "shared" / "traces"))
KINDS = ("paths", "paths_all", "commands", "errors", "identifiers", "numbers", "requests")
KIND_TITLES = {
    "paths": "paths (named)",
    "paths_all": "paths (all)",
    "commands": "commands",
    "errors": "errors",
    "identifiers": "test/function names",
    "numbers": "numbers with units",
    "requests": "user request lines",
}
LIBRARY_KINDS = {
    "command": "commands",
    "error": "errors",
    "identifier": "identifiers",
    "number": "numbers",
    "request": "requests",
}
TARGET_RETENTION = 0.90
TARGET_STABILITY = 0.90
WINDOW_SWEEP_KEYS = (
    "compactions",
    "overflow_views",
    "mean_view_tokens",
    "summarizer_input_tokens",
    "stability_median_between",
    "cached_share",
    "fresh_tokens",
    "billed_anthropic",
    "billed_openai",
)
LOST_LISTED = 60  # lost facts listed per kind and trace in the JSON

# --- facts -------------------------------------------------------------------------------------
# Facts come from the library (ctxledger.domain.facts, the loss audit's extractor): each
# compaction's figures are its LossReport (audit_checkpoint on the state right after it).


def bench_kinds(fact: Fact) -> tuple[str, ...]:
    """The report columns a library fact counts in ("paths" are the named ones)."""
    if fact.kind == "path":
        return ("paths_all", "paths") if fact.named else ("paths_all",)
    return (LIBRARY_KINDS[fact.kind],)


# --- metrics -----------------------------------------------------------------------------------


def rendered(view: ModelView) -> list[str]:
    """The view in OpenAI chat format, one compact JSON string per message."""
    return [json.dumps(m, ensure_ascii=False, separators=(",", ":")) for m in view.to_openai()]


def common_prefix(old: list[str], new: list[str]) -> int:
    """Characters of the concatenation of ``new`` that equal the start of ``old``'s."""
    total = 0
    for a, b in zip(old, new, strict=False):
        if a == b:
            total += len(a)
            continue
        return total + _shared_chars(a, b)
    return total


def _shared_chars(a: str, b: str) -> int:
    """Length of the common prefix of ``a`` and ``b`` (binary search over slice equality)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def stability(replay_: Replay) -> dict[str, Any]:
    """Prompt-cache figures of one replay.

    Per step: the share of the view's tokens that is a byte-identical prefix of the previous
    view (``prefix // 3 / view // 3``), split into steps between compactions and steps right
    after one; and the share of the previous view kept as prefix (rewriting without growth).
    Over the replay: prompt tokens sent and the part of them a prefix cache could serve.
    """
    between: list[float] = []
    at_compaction: list[float] = []
    kept: list[float] = []
    sent = cached = growth = 0
    previous: list[str] | None = None
    for view, compacted in zip(replay_.views, replay_.compacted_before, strict=True):
        current = rendered(view)
        size = sum(map(len, current))
        sent += size // 3
        # What even a perfect cache writes: the growth over the previous view.
        growth += max(0, size - sum(map(len, previous or ()))) // 3
        if previous is not None:
            prefix = common_prefix(previous, current)
            cached += prefix // 3
            share = (prefix // 3) / max(size // 3, 1)
            (at_compaction if compacted else between).append(share)
            if not compacted:
                kept.append(prefix / max(sum(map(len, previous)), 1))
        previous = current
    every = between + at_compaction
    return {
        "steps_between": len(between),
        "median_between": statistics.median(between) if between else None,
        "median_all": statistics.median(every) if every else None,
        "previous_kept_median_between": statistics.median(kept) if kept else None,
        "prompt_tokens": sent,
        "cached_tokens": cached,
        "growth_tokens": growth,
        "shares_between": between,
        "shares_all": every,
        "kept_between": kept,
    }


def retention(replay_: Replay, history: Sequence[Message]) -> dict[str, Any]:
    """Facts of each compaction's newly covered messages found in the next and the last view.

    The next view's figures are the compaction's loss audit (``audit_checkpoint``). Lost facts
    are listed with the seq and role of the newest covered message that holds them, at most
    :data:`LOST_LISTED` per kind.
    """
    counts = {kind: {"facts": 0, "next": 0, "last": 0} for kind in KINDS}
    lost: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    last = shown_text(replay_.views[-1].messages) if replay_.views else ""
    for compaction in replay_.compactions:
        report = compaction.report
        missing = {id(fact) for fact in report.lost}
        for fact in sorted((*report.kept, *report.lost), key=lambda f: (f.kind, f.text)):
            for kind in bench_kinds(fact):
                counts[kind]["facts"] += 1
                counts[kind]["last"] += fact.text in last
                if id(fact) not in missing:
                    counts[kind]["next"] += 1
                elif len(lost[kind]) < LOST_LISTED:
                    lost[kind].append(
                        {
                            "compaction_through_seq": compaction.through_seq,
                            "seq": fact.seq,
                            "role": history[fact.seq - 1].role if fact.seq else None,
                            "fact": fact.text,
                        }
                    )
    return {"counts": counts, "lost": lost}


def share(hit: int, total: int) -> float | None:
    return hit / total if total else None


def raw_after(replay_: Replay, history: Sequence[Message]) -> list[dict[str, Any]]:
    """What each compaction left raw: tail tokens, and whether the newest tool result (the
    output the agent is about to act on) is still shown, verbatim or truncated with a marker,
    rather than masked or summarised."""
    found = []
    for compaction in replay_.compactions:
        view = replay_.views[compaction.view_index]
        tail = [m for m in view.messages if m.seq is not None and m.seq >= view.retain_from_seq]
        results = [m for m in history[: compaction.through_seq] if m.role == "tool"]
        newest = results[-1] if results else None
        shown = {m.seq: m.content for m in view.messages if m.seq is not None}
        found.append(
            {
                "raw_tail_tokens": sum(message_chars(m) for m in tail) // 3,
                "newest_result_shown": newest is not None
                and newest.seq in shown
                and not shown[newest.seq].startswith("[Previous: used "),
            }
        )
    return found


def trace_row(
    name: str, history: list[Message], replay_: Replay, window: int = WINDOW
) -> dict[str, Any]:
    """All figures of one policy on one trace."""
    tokens = [view.view_tokens for view in replay_.views]
    numbered = [m.with_seq(i + 1) for i, m in enumerate(history)]
    raw = raw_after(replay_, numbered)
    kept = retention(replay_, history)
    stab = stability(replay_)
    return {
        "trace": name,
        "policy": replay_.policy,
        "messages": len(history),
        "views": len(replay_.views),
        "peak_tokens": max(tokens),
        "overflows": [
            {"view_index": i, "through_seq": v.through_seq, "tokens": v.view_tokens}
            for i, v in enumerate(replay_.views)
            if v.view_tokens > window
        ],
        "compactions": len(replay_.compactions),
        "compaction_seqs": [
            {
                "through_seq": c.through_seq,
                "retain_from_seq": c.retain_from_seq,
                "covered": len(c.covered),
                "summary_chars": c.summary_chars,
                "calls": c.calls,
                "input_tokens": c.input_tokens,
                **left,
            }
            for c, left in zip(replay_.compactions, raw, strict=True)
        ],
        "summarizer_calls": replay_.summarizer_calls,
        "summarizer_input_tokens": replay_.summarizer_input_tokens,
        "summarizer_seconds": round(replay_.summarizer_seconds, 4),
        "seconds": round(replay_.seconds, 4),
        "retention": kept["counts"],
        "lost": kept["lost"],
        "stability": stab,
    }


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals of one policy over every trace (retention pooled over all facts)."""
    counts = {kind: {"facts": 0, "next": 0, "last": 0} for kind in KINDS}
    for row in rows:
        for kind in KINDS:
            for key in ("facts", "next", "last"):
                counts[kind][key] += row["retention"][kind][key]
    between = [s for row in rows for s in row["stability"]["shares_between"]]
    every = [s for row in rows for s in row["stability"]["shares_all"]]
    kept = [s for row in rows for s in row["stability"]["kept_between"]]
    sent = sum(r["stability"]["prompt_tokens"] for r in rows)
    cached = sum(r["stability"]["cached_tokens"] for r in rows)
    growth = sum(r["stability"]["growth_tokens"] for r in rows)
    summarized = sum(r["summarizer_input_tokens"] for r in rows)
    left = [c for r in rows for c in r["compaction_seqs"]]
    summary_out = sum(c["summary_chars"] for c in left) // 3
    return {
        "traces": len(rows),
        "views": sum(r["views"] for r in rows),
        "peak_tokens": max(r["peak_tokens"] for r in rows),
        "overflow_views": sum(len(r["overflows"]) for r in rows),
        "overflow_traces": sorted(r["trace"] for r in rows if r["overflows"]),
        "compactions": sum(r["compactions"] for r in rows),
        "summarizer_calls": sum(r["summarizer_calls"] for r in rows),
        "summarizer_input_tokens": sum(r["summarizer_input_tokens"] for r in rows),
        "summary_output_tokens": summary_out,
        "summarizer_seconds": round(sum(r["summarizer_seconds"] for r in rows), 3),
        "seconds": round(sum(r["seconds"] for r in rows), 3),
        "retention": {
            kind: {
                **counts[kind],
                "next_share": share(counts[kind]["next"], counts[kind]["facts"]),
                "last_share": share(counts[kind]["last"], counts[kind]["facts"]),
            }
            for kind in KINDS
        },
        "stability_median_between": statistics.median(between) if between else None,
        "stability_median_all": statistics.median(every) if every else None,
        "stability_mean_between": statistics.fmean(between) if between else None,
        "previous_kept_median_between": statistics.median(kept) if kept else None,
        "prompt_tokens": sent,
        "cached_tokens": cached,
        "cached_share": cached / sent if sent else None,
        "growth_tokens": growth,
        "uncached_tokens": sent - cached,
        "mean_view_tokens": sent / max(sum(r["views"] for r in rows), 1),
        # Fresh input: prompt tokens no prefix cache serves, plus what the summariser reads.
        "fresh_tokens": sent - cached + summarized,
        # Input priced in base-token equivalents (output tokens ignored): Anthropic-style cache
        # (write 1.25x, read 0.1x) and OpenAI-style (cached 0.5x); the summariser at 1x.
        "billed_anthropic": round(1.25 * (sent - cached) + 0.1 * cached + summarized),
        "billed_openai": round((sent - cached) + 0.5 * cached + summarized),
        "raw_tail_tokens_median": (
            statistics.median(c["raw_tail_tokens"] for c in left) if left else None
        ),
        "newest_result_shown_share": (
            share(sum(c["newest_result_shown"] for c in left), len(left)) if left else None
        ),
    }


# --- cost (issue 17) ----------------------------------------------------------------------------

#: Provider-style prices for the cost tables: Anthropic (cache writes 1.25x, reads 0.1x) and
#: OpenAI (no write surcharge, cached 0.25x); examples of ``ctxledger.Pricing`` presets.
PRICINGS = {
    "anthropic-style": Pricing.preset("anthropic-sonnet"),
    "openai-style": Pricing.preset("openai-gpt-4.1"),
}


def billed(total: dict[str, Any], pricing: Pricing, *, caching: bool) -> float:
    """Dollars of one policy's input: the agent's prompts (a growing conversation: the prefix
    shared with the previous view read from the cache, the rest written to it; or every token
    at the input price without caching) plus the summariser (its input uncached, its summary
    at the output price). The agent's own output is the same under every policy: left out."""
    prompt, cached = total["prompt_tokens"], total["cached_tokens"]
    agent = pricing.prompt_cost(prompt, cached, caching=caching)
    summariser = (
        total["summarizer_input_tokens"] * pricing.input
        + total["summary_output_tokens"] * pricing.output
    ) / 1_000_000
    return agent + summariser


def floor_cost(total: dict[str, Any], pricing: Pricing) -> float:
    """The least the same views could cost with caching: a perfect cache (only each view's
    growth over the previous one written, the rest read) and a free summariser. A policy that
    serves views of these sizes cannot be billed less; to go lower it must send smaller views."""
    prompt, growth = total["prompt_tokens"], total["growth_tokens"]
    return pricing.prompt_cost(prompt, prompt - growth)


def cost_rows(
    traces: dict[str, list[Message]], targets: list[float], window: int = WINDOW
) -> dict[str, Any]:
    """The one-mark defaults of main (before issue 26) against the two marks at ``window``,
    over ``compaction_target`` (the default's own value is a row of its own)."""
    variants: dict[str, Config] = {
        "before: one mark (main)": before_config(window),
        "two marks (defaults)": marks_config(window),
    }
    for target in targets:
        variants[f"two marks, target {target}"] = marks_config(window, compaction_target=target)
    out: dict[str, Any] = {}
    for name, config in variants.items():
        log(f"  cost at window {window:,}: {name} ...")
        total = totals(run_config(traces, "ctxledger+facts", config))
        out[name] = {
            **_slim_total(total),
            "target_tokens": config.sizes().target_tokens,
            "summary_output_tokens": total["summary_output_tokens"],
            "cost": {
                style: {
                    "cached": round(billed(total, pricing, caching=True), 4),
                    "uncached": round(billed(total, pricing, caching=False), 4),
                    "floor": round(floor_cost(total, pricing), 4),
                }
                for style, pricing in PRICINGS.items()
            },
        }
    return out


def _cost_markdown(by_window: dict[str, dict[str, Any]]) -> list[str]:
    lines = [
        "",
        "## Cost (issues 17 and 26)",
        "",
        "Billed-equivalent dollars of the agent's prompts and the summariser over the 34 traces, "
        "policy (a) + fact index; Anthropic-style "
        f"{PRICINGS['anthropic-style']} and OpenAI-style {PRICINGS['openai-style']} per million "
        "tokens, with the provider's prompt cache (the prefix shared with the previous view "
        "read, the rest written) and without. `target` is the low mark in tokens (one mark: "
        "the threshold). The floor is the least the same views could be billed: a perfect cache "
        "(only each view's growth over the previous one written) and a free summariser.",
    ]
    for window, rows in by_window.items():
        base = rows["before: one mark (main)"]
        lines += [
            "",
            f"### Window {int(window):,}",
            "",
            "| defaults | target | compactions | overflow views | summariser input tokens | "
            "prompt tokens | cached share | Anthropic-style cached | uncached | "
            "OpenAI-style cached | uncached | vs before (A / O cached) | floor vs before (A / O) "
            "| errors kept | paths (all) kept |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for name, row in rows.items():
            cost = row["cost"]
            ratio_a = cost["anthropic-style"]["cached"] / base["cost"]["anthropic-style"]["cached"]
            ratio_o = cost["openai-style"]["cached"] / base["cost"]["openai-style"]["cached"]
            floor_a = cost["anthropic-style"]["floor"] / base["cost"]["anthropic-style"]["cached"]
            floor_o = cost["openai-style"]["floor"] / base["cost"]["openai-style"]["cached"]
            retention = row["retention"]
            lines.append(
                f"| {name} | {row['target_tokens']:,} | {row['compactions']} | "
                f"{row['overflow_views']} | "
                f"{row['summarizer_input_tokens']:,} | {row['prompt_tokens']:,} | "
                f"{_pct(row['cached_share'])} | ${cost['anthropic-style']['cached']:.2f} | "
                f"${cost['anthropic-style']['uncached']:.2f} | "
                f"${cost['openai-style']['cached']:.2f} | "
                f"${cost['openai-style']['uncached']:.2f} | {ratio_a - 1:+.1%} / "
                f"{ratio_o - 1:+.1%} | {floor_a - 1:+.1%} / {floor_o - 1:+.1%} | "
                f"{_pct(retention['errors']['next_share'])} | "
                f"{_pct(retention['paths_all']['next_share'])} |"
            )
    return lines


# --- report ------------------------------------------------------------------------------------

POLICY_TITLES = {
    "ctxledger": "(a) ctxledger",
    "ctxledger+facts": "(a) + fact index",
    "naive": "(b) naive",
    "replace": "(c) replace",
}


def _k(tokens: float) -> str:
    return f"{tokens / 1000:.1f}k"


def _triple(rows: dict[str, dict[str, Any]], cell: Any) -> str:
    return " / ".join(cell(rows[p]) for p in POLICIES)


def _retention_cell(row: dict[str, Any], kind: str) -> str:
    counts = row["retention"][kind]
    return "-" if not counts["facts"] else f"{100 * counts['next'] / counts['facts']:.0f}"


def markdown(results: dict[str, Any]) -> str:
    """All tables of the report, in markdown."""
    policies = results["policies"]
    out = [
        f"## Context quality on real traces (window {WINDOW:,}, threshold "
        f"{results['threshold']:,} tokens; offline extractive summariser)",
        "",
        "| policy | peak view tokens | overflow views (traces) | compactions | summariser calls "
        "| summariser input tokens | "
        + " | ".join(KIND_TITLES[k] for k in KINDS)
        + " | prefix stability, median between compactions / all steps | prompt tokens a prefix "
        "cache serves | fresh input tokens |",
        "|---|" + "---:|" * (8 + len(KINDS)),
    ]
    for policy in POLICIES:
        t = policies[policy]["total"]
        ret = t["retention"]
        out.append(
            f"| {POLICY_TITLES[policy]} | {t['peak_tokens']:,} | {t['overflow_views']} "
            f"({len(t['overflow_traces'])}) | {t['compactions']} | {t['summarizer_calls']} "
            f"| {t['summarizer_input_tokens']:,} | "
            + " | ".join(
                f"{_pct(ret[k]['next_share'])} ({ret[k]['next']}/{ret[k]['facts']})" for k in KINDS
            )
            + f" | {_pct(t['stability_median_between'])} / {_pct(t['stability_median_all'])} "
            f"| {_pct(t['cached_share'])} | {t['fresh_tokens']:,} |"
        )
    out += [
        "",
        "Fact retention is the share of the facts of the messages each compaction took out of "
        "the raw tail that are still found verbatim in the next served view. Long-term "
        "retention (the same facts, found in the last view of the trace):",
        "",
        "| policy | " + " | ".join(KIND_TITLES[k] for k in KINDS) + " |",
        "|---|" + "---:|" * len(KINDS),
    ]
    for policy in POLICIES:
        ret = policies[policy]["total"]["retention"]
        out.append(
            f"| {POLICY_TITLES[policy]} | "
            + " | ".join(_pct(ret[k]["last_share"]) for k in KINDS)
            + " |"
        )
    out += [
        "",
        "What stays raw: the retained tail right after a compaction, and whether the newest tool "
        "result (the output the agent acts on next) is still shown (verbatim, or truncated with "
        "a marker when oversize) rather than masked or summarised.",
        "",
        "| policy | raw tail tokens after a compaction, median | newest tool result shown "
        "| mean view tokens |",
        "|---|---:|---:|---:|",
    ]
    for policy in POLICIES:
        t = policies[policy]["total"]
        tail = t["raw_tail_tokens_median"]
        out.append(
            f"| {POLICY_TITLES[policy]} | {'-' if tail is None else f'{tail:,.0f}'} "
            f"| {_pct(t['newest_result_shown_share'])} | {t['mean_view_tokens']:,.0f} |"
        )
    for title, key in (
        ("Targets for (a)", "targets"),
        ("Targets for (a) + fact index (issue 16)", "fact_targets"),
    ):
        out += ["", f"### {title}", "", "| target | value | met |", "|---|---:|:---:|"]
        for target in results.get(key, []):
            value = target["value"]
            shown = _pct(value) if isinstance(value, float) else f"{value:,}"
            verdict = "yes" if target["met"] else "**no**"
            out.append(f"| {target['target']} | {shown} | {verdict} |")
    out += _fact_sweep_markdown(results)
    out += ["", "### Overflows (views above the window)", ""]
    any_overflow = False
    for policy in POLICIES:
        for row in policies[policy]["traces"]:
            if row["overflows"]:
                any_overflow = True
                worst = max(row["overflows"], key=lambda o: o["tokens"])
                out.append(
                    f"- {POLICY_TITLES[policy]} `{row['trace']}`: {len(row['overflows'])} of "
                    f"{row['views']} views, first through seq {row['overflows'][0]['through_seq']}"
                    f", worst {worst['tokens']:,} tokens through seq {worst['through_seq']}"
                )
    if not any_overflow:
        out.append("None.")
    prototypes = results.get("prototypes", {})
    if prototypes:
        out += [
            "",
            "### Prototype fixes (bench only), against (a)",
            "",
            "| variant | peak view tokens | overflow views | compactions | summariser input tokens "
            "| " + " | ".join(KIND_TITLES[k] for k in KINDS) + " | prefix stability median "
            "between | fresh input tokens |",
            "|---|---:|---:|---:|---:|" + "---:|" * len(KINDS) + "---:|---:|",
        ]
        variants = {"(a) ctxledger": policies["ctxledger"]["total"]}
        variants.update({f"(a) + {name}": data["total"] for name, data in prototypes.items()})
        for title, t in variants.items():
            ret = t["retention"]
            out.append(
                f"| {title} | {t['peak_tokens']:,} | {t['overflow_views']} | {t['compactions']} "
                f"| {t['summarizer_input_tokens']:,} | "
                + " | ".join(_pct(ret[k]["next_share"]) for k in KINDS)
                + f" | {_pct(t['stability_median_between'])} | {t['fresh_tokens']:,} |"
            )
    sweep = results.get("micro_batch_sweep", {})
    if sweep:
        out += [
            "",
            "### micro_batch sweep, policy (a)",
            "",
            "| micro_batch | peak view tokens | mean view tokens | compactions | summariser input "
            "tokens | prefix stability median between / all | previous view kept, median "
            "| prompt tokens a prefix cache serves | uncached prompt tokens | fresh input tokens "
            "| billed-equivalent, Anthropic-style / OpenAI-style | paths named / commands "
            "retained |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for batch, t in sweep.items():
            ret = t["retention"]
            out.append(
                f"| {batch} | {t['peak_tokens']:,} | {t['mean_view_tokens']:,.0f} "
                f"| {t['compactions']} | {t['summarizer_input_tokens']:,} "
                f"| {_pct(t['stability_median_between'])} / {_pct(t['stability_median_all'])} "
                f"| {_pct(t['previous_kept_median_between'])} | {_pct(t['cached_share'])} "
                f"| {t['uncached_tokens']:,} | {t['fresh_tokens']:,} "
                f"| {t['billed_anthropic']:,} / {t['billed_openai']:,} "
                f"| {_pct(ret['paths']['next_share'])} / {_pct(ret['commands']['next_share'])} |"
            )
    windows = results.get("micro_batch_windows", {})
    if windows:
        out += [
            "",
            "The same sweep at other windows (overflow counted against each window):",
            "",
            "| window | micro_batch | compactions | overflow views | mean view tokens "
            "| summariser input tokens | prefix stability median between | prompt tokens a prefix "
            "cache serves | fresh input tokens "
            "| billed-equivalent, Anthropic-style / OpenAI-style |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for window, batches in windows.items():
            for batch, t in batches.items():
                out.append(
                    f"| {int(window):,} | {batch} | {t['compactions']} | {t['overflow_views']} "
                    f"| {t['mean_view_tokens']:,.0f} | {t['summarizer_input_tokens']:,} "
                    f"| {_pct(t['stability_median_between'])} | {_pct(t['cached_share'])} "
                    f"| {t['fresh_tokens']:,} "
                    f"| {t['billed_anthropic']:,} / {t['billed_openai']:,} |"
                )
    out += [
        "",
        "### Per trace: (a) / (a) + fact index / (b) / (c)",
        "",
        "Retention in % (- when no compaction covered such a fact); stability is the median "
        "prefix share between compactions.",
        "",
        "| trace | msgs | peak view tokens | overflow views | compactions | summariser input | "
        + " | ".join(KIND_TITLES[k] for k in KINDS)
        + " | stability |",
        "|---|" + "---:|" * (6 + len(KINDS)),
    ]
    names = [row["trace"] for row in policies["ctxledger"]["traces"]]
    for index, name in enumerate(names):
        rows = {p: policies[p]["traces"][index] for p in POLICIES}
        out.append(
            f"| {name} | {rows['ctxledger']['messages']} "
            f"| {_triple(rows, lambda r: format(r['peak_tokens'], ','))} "
            f"| {_triple(rows, lambda r: str(len(r['overflows'])))} "
            f"| {_triple(rows, lambda r: str(r['compactions']))} "
            f"| {_triple(rows, lambda r: _k(r['summarizer_input_tokens']))} | "
            + " | ".join(_triple(rows, lambda r, k=k: _retention_cell(r, k)) for k in KINDS)
            + " | "
            + _triple(rows, lambda r: _pct(r["stability"]["median_between"]).replace(" %", ""))
            + " |"
        )
    out += [
        "",
        "### Named paths and commands (a) lost at a compaction (not in the next view)",
        "",
        "Each with the seq and role of the message it came from.",
        "",
    ]
    for row in policies["ctxledger"]["traces"]:
        for kind in ("paths", "commands"):
            lost = row["lost"][kind]
            if lost:
                shown = ", ".join(
                    f"`{item['fact']}` (#{item['seq']} {item['role']})" for item in lost[:8]
                )
                more = f" and {len(lost) - 8} more" if len(lost) > 8 else ""
                out.append(f"- `{row['trace']}` {KIND_TITLES[kind]}: {shown}{more}")
    return "\n".join(out) + "\n"


def _fact_sweep_markdown(results: dict[str, Any]) -> list[str]:
    """The fact_index_chars sweep at the main window, and the default at other windows."""
    out: list[str] = []
    columns = (
        "| fact_index_chars (room used) | peak view tokens | overflow views | compactions "
        "| mean view tokens | summariser input tokens | paths (named) | paths (all) | commands "
        "| errors | test/function names | user request lines | prefix stability median "
        "between | fresh input tokens |"
    )
    rule = "|---:|" + "---:|" * 13

    def row(label: str, t: dict[str, Any]) -> str:
        ret = t["retention"]
        kinds = ("paths", "paths_all", "commands", "errors", "identifiers", "requests")
        return (
            f"| {label} | {t['peak_tokens']:,} | {t['overflow_views']} | {t['compactions']} "
            f"| {t['mean_view_tokens']:,.0f} | {t['summarizer_input_tokens']:,} | "
            + " | ".join(_pct(ret[k]["next_share"]) for k in kinds)
            + f" | {_pct(t['stability_median_between'])} | {t['fresh_tokens']:,} |"
        )

    sweep = results.get("fact_index_sweep", {})
    if sweep:
        out += ["", f"### fact_index_chars sweep (window {WINDOW:,})", "", columns, rule]
        out += [row(f"{size} ({data['room']:,})", data["total"]) for size, data in sweep.items()]
    windows = results.get("fact_index_windows", {})
    if windows:
        out += [
            "",
            "The fact block at other windows: off / the default (overflow counted against each "
            "window):",
            "",
            columns.replace("fact_index_chars (room used)", "window, fact_index_chars (room)"),
            rule,
        ]
        for window, sizes in windows.items():
            for size, data in sizes.items():
                out.append(row(f"{int(window):,}, {size} ({data['room']:,})", data["total"]))
    return out


def write_chart(results: dict[str, Any], path: Path) -> None:
    """Peak tokens per trace against the window; retention, stability, cost and the sweep."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = results["policies"]
    colors = {
        "ctxledger": "#1f77b4",
        "ctxledger+facts": "#2ca02c",
        "naive": "#d62728",
        "replace": "#ff7f0e",
    }
    names = [row["trace"] for row in policies["ctxledger"]["traces"]]
    order = sorted(range(len(names)), key=lambda i: policies["ctxledger"]["traces"][i]["messages"])
    figure = plt.figure(figsize=(17, 13), layout="constrained")
    grid = figure.add_gridspec(4, 2, width_ratios=(1.15, 1))
    peak = figure.add_subplot(grid[:, 0])
    height = 0.8 / len(POLICIES)
    for offset, policy in enumerate(POLICIES):
        values = [policies[policy]["traces"][i]["peak_tokens"] / 1000 for i in order]
        positions = [n + (offset - (len(POLICIES) - 1) / 2) * height for n in range(len(order))]
        peak.barh(
            positions, values, height=height, color=colors[policy], label=POLICY_TITLES[policy]
        )
    peak.axvline(WINDOW / 1000, color="black", linewidth=1.5, label=f"window {WINDOW // 1000}k")
    peak.axvline(
        results["threshold"] / 1000,
        color="gray",
        linestyle="--",
        linewidth=1,
        label=f"threshold {results['threshold'] / 1000:.1f}k",
    )
    peak.set_yticks(range(len(order)))
    peak.set_yticklabels(
        [names[i].replace("miniswe-gemini3pro-", "miniswe-") for i in order], fontsize=8
    )
    peak.set_xlabel("peak view tokens (thousands, chars // 3); right of the black line = overflow")
    peak.set_title("Peak view tokens per trace (traces by length, longest at the top)")
    peak.legend(loc="lower right")
    peak.margins(y=0.01)

    kinds = figure.add_subplot(grid[0, 1])
    series: list[tuple[str, dict[str, Any], str, str | None]] = [
        (POLICY_TITLES[p], policies[p]["total"], colors[p], None) for p in POLICIES
    ]
    series += [
        (f"(a) + {name} (prototype)", data["total"], colors["ctxledger"], hatch)
        for (name, data), hatch in zip(
            results.get("prototypes", {}).items(), ("//", "..", "xx"), strict=False
        )
    ]
    width = 0.8 / len(series)
    for offset, (title, total, color, hatch) in enumerate(series):
        ret = total["retention"]
        values = [100 * (ret[k]["next_share"] or 0) for k in KINDS]
        shift = (offset - (len(series) - 1) / 2) * width
        bars = kinds.bar(
            [n + shift for n in range(len(KINDS))],
            values,
            width,
            color=color,
            hatch=hatch,
            edgecolor="white" if hatch else None,
            label=title,
        )
        kinds.bar_label(bars, fmt="%.0f", fontsize=7)
    kinds.axhline(100 * TARGET_RETENTION, color="black", linestyle="--", linewidth=1)
    kinds.set_xticks(range(len(KINDS)))
    kinds.set_xticklabels([KIND_TITLES[k].replace(" ", "\n", 1) for k in KINDS], fontsize=8)
    kinds.set_ylim(0, 135)
    kinds.set_ylabel("% in the next view")
    kinds.set_title("Fact retention at compaction (dashed: 90 % target)")
    kinds.legend(fontsize=7, loc="upper left", ncols=3)

    cache = figure.add_subplot(grid[1, 1])
    metrics = (
        ("stability_median_between", "median between\ncompactions"),
        ("stability_median_all", "median\nall steps"),
        ("cached_share", "prompt tokens a\nprefix cache serves"),
    )
    for offset, policy in enumerate(POLICIES):
        total = policies[policy]["total"]
        values = [100 * (total[key] or 0) for key, _ in metrics]
        bars = cache.bar(
            [n + (offset - (len(POLICIES) - 1) / 2) * width for n in range(len(metrics))],
            values,
            width,
            color=colors[policy],
            label=POLICY_TITLES[policy],
        )
        cache.bar_label(bars, fmt="%.1f", fontsize=7)
    cache.axhline(100 * TARGET_STABILITY, color="black", linestyle="--", linewidth=1)
    cache.set_xticks(range(len(metrics)))
    cache.set_xticklabels([label for _, label in metrics])
    cache.set_ylim(0, 110)
    cache.set_ylabel("% of view tokens")
    cache.set_title("Prompt-cache prefix stability (dashed: 90 % target)")

    cost = figure.add_subplot(grid[2, 1])
    labels = [POLICY_TITLES[p] for p in POLICIES]
    summarizer = [policies[p]["total"]["summarizer_input_tokens"] / 1e6 for p in POLICIES]
    bars = cost.bar(labels, summarizer, color=[colors[p] for p in POLICIES])
    cost.bar_label(
        bars,
        labels=[
            f"{v:.2f}M tokens, {policies[p]['total']['summarizer_calls']} calls\n"
            f"{policies[p]['total']['compactions']} compactions, "
            f"{len(policies[p]['total']['overflow_traces'])} traces overflow"
            for v, p in zip(summarizer, POLICIES, strict=True)
        ],
        fontsize=8,
    )
    cost.set_ylim(0, max(summarizer) * 1.45)
    cost.set_ylabel("million tokens")
    cost.set_title("Tokens sent to the summariser, all traces")

    sweep = results.get("micro_batch_sweep", {})
    if sweep:
        axis = figure.add_subplot(grid[3, 1])
        batches = list(sweep)
        xs = range(len(batches))
        axis.plot(
            xs,
            [100 * sweep[b]["stability_median_between"] for b in batches],
            "o-",
            color="#1f77b4",
            label="prefix stability, median between compactions (%)",
        )
        axis.plot(
            xs,
            [100 * sweep[b]["cached_share"] for b in batches],
            "s-",
            color="#2ca02c",
            label="prompt tokens a prefix cache serves (%)",
        )
        axis.axhline(100 * TARGET_STABILITY, color="black", linestyle="--", linewidth=1)
        axis.set_xticks(list(xs))
        axis.set_xticklabels(batches)
        axis.set_xlabel("micro_batch (policy a)")
        axis.set_ylabel("%")
        twin = axis.twinx()
        twin.bar(
            xs,
            [sweep[b]["fresh_tokens"] / 1e6 for b in batches],
            alpha=0.25,
            color="gray",
            label="fresh input tokens (M): uncached prompt + summariser",
        )
        twin.set_ylabel("million tokens")
        for x, b in zip(xs, batches, strict=True):
            twin.annotate(
                f"{sweep[b]['compactions']} comp.",
                (x, sweep[b]["fresh_tokens"] / 1e6),
                ha="center",
                va="bottom",
                fontsize=8,
            )
        twin.set_ylim(0, max(sweep[b]["fresh_tokens"] for b in batches) / 1e6 * 1.25)
        axis.set_zorder(twin.get_zorder() + 1)
        axis.patch.set_visible(False)
        lines = axis.get_legend_handles_labels()
        bars_ = twin.get_legend_handles_labels()
        axis.legend(lines[0] + bars_[0], lines[1] + bars_[1], fontsize=7, loc="lower right")
        axis.set_title("micro_batch sweep")
    figure.suptitle(
        f"ctxledger context quality on {len(names)} real traces (window {WINDOW:,} tokens)",
        fontsize=14,
    )
    figure.savefig(path, dpi=110)
    plt.close(figure)


# --- running -----------------------------------------------------------------------------------


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run_policy(
    traces: dict[str, list[Message]], policy: str, **overrides: Any
) -> list[dict[str, Any]]:
    """Replay every trace under ``policy`` (with Config ``overrides``); one row per trace."""
    return run_config(traces, policy, policy_config(policy, **overrides))


def run_config(
    traces: dict[str, list[Message]], policy: str, config: Config
) -> list[dict[str, Any]]:
    """Replay every trace under ``policy`` with ``config``; one row per trace."""
    rows = []
    for name, history in traces.items():
        result = replay(history, policy, config, ExtractiveSummarizer())
        rows.append(trace_row(name, history, result, config.context_window))
    return rows


def load(directory: Path) -> dict[str, list[Message]]:
    return {path.stem: read_trace(path) for path in sorted(directory.glob("*.jsonl"))}


def targets(ours: dict[str, Any], naive: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets for ctxledger's policy, each with its figure and verdict."""
    ret = ours["retention"]
    checks = [
        ("no overflow on any trace", ours["overflow_views"], ours["overflow_views"] == 0),
        (
            "path retention >= 90 % (paths named in user/assistant text and tool calls)",
            ret["paths"]["next_share"],
            (ret["paths"]["next_share"] or 0) >= TARGET_RETENTION,
        ),
        (
            "path retention >= 90 % (every path, tool-output listings included)",
            ret["paths_all"]["next_share"],
            (ret["paths_all"]["next_share"] or 0) >= TARGET_RETENTION,
        ),
        (
            "command retention >= 90 %",
            ret["commands"]["next_share"],
            (ret["commands"]["next_share"] or 0) >= TARGET_RETENTION,
        ),
        (
            "summariser input tokens < naive",
            ours["summarizer_input_tokens"],
            ours["summarizer_input_tokens"] < naive["summarizer_input_tokens"],
        ),
        (
            "median prefix stability between compactions >= 90 %",
            ours["stability_median_between"],
            (ours["stability_median_between"] or 0) >= TARGET_STABILITY,
        ),
    ]
    return [{"target": t, "value": v, "met": bool(m)} for t, v, m in checks]


def fact_targets(facts: dict[str, Any], ours: dict[str, Any], window: int) -> list[dict[str, Any]]:
    """Issue 16's targets for (a) + fact index, against (a) without it."""
    ret, base = facts["retention"], ours["retention"]

    def share(totals: dict[str, Any], kind: str) -> float:
        return float(totals[kind]["next_share"] or 0.0)

    checks = [
        (
            "all-path retention >= 90 % (tool-output listings included)",
            share(ret, "paths_all"),
            share(ret, "paths_all") >= TARGET_RETENTION,
        ),
        (
            "error-line retention >= 90 %",
            share(ret, "errors"),
            share(ret, "errors") >= TARGET_RETENTION,
        ),
        (
            f"command retention not below (a)'s ({_pct(share(base, 'commands'))})",
            share(ret, "commands"),
            share(ret, "commands") >= share(base, "commands"),
        ),
        (
            f"named-path retention not below (a)'s ({_pct(share(base, 'paths'))})",
            share(ret, "paths"),
            share(ret, "paths") >= share(base, "paths"),
        ),
        (f"peak view <= window ({window:,})", facts["peak_tokens"], facts["peak_tokens"] <= window),
        (
            "median prefix stability between compactions >= 90 %",
            facts["stability_median_between"],
            (facts["stability_median_between"] or 0) >= TARGET_STABILITY,
        ),
    ]
    return [{"target": t, "value": v, "met": bool(m)} for t, v, m in checks]


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "cpu": cpu,
        "platform": platform.platform(),
    }


def code_state() -> dict[str, Any]:
    """The commit the figures come from, and uncommitted changes in the code they depend on."""
    import subprocess

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=HERE, capture_output=True, text=True, check=False, timeout=60
            ).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""

    return {
        "commit": git("rev-parse", "HEAD"),
        # Uncommitted changes in the code the bench runs (domain, summarisers, driver, config).
        "uncommitted": git(
            "status",
            "--porcelain",
            "--",
            "../src/ctxledger/domain",
            "../src/ctxledger/summarizers",
            "../src/ctxledger/testing/driver.py",
            "../src/ctxledger/testing/_summaries.py",
            "../src/ctxledger/config.py",
        ).splitlines(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES, help="trace directory")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="results directory")
    parser.add_argument("--batches", default="1,2,4,8,16", help="micro_batch values to sweep")
    parser.add_argument(
        "--sweep-windows",
        default="16000,64000,128000",
        help="other context windows to repeat the micro_batch sweep at ('' to skip)",
    )
    parser.add_argument(
        "--fact-sizes",
        default="0,2000,4000,8000,12000,16000",
        help="fact_index_chars values to sweep for (a) + fact index ('' to skip)",
    )
    parser.add_argument(
        "--cost-targets",
        default="0.4,0.6",
        help="compaction_target values for the cost table besides the default ('' for none)",
    )
    parser.add_argument("--no-cost", action="store_true", help="skip the cost tables")
    parser.add_argument(
        "--marks-windows",
        default="16000,32000",
        help="windows of the two-mark tables (before/after, target sweep; '' to skip)",
    )
    parser.add_argument(
        "--targets",
        default="0.4,0.45,0.5,0.55,0.6",
        help="compaction_target values of the two-mark sweep",
    )
    parser.add_argument(
        "--marks-only", action="store_true", help="only the two-mark tables (quicker)"
    )
    parser.add_argument(
        "--cost-windows",
        default=f"{WINDOW},16000,128000",
        help="context windows of the cost tables",
    )
    parser.add_argument("--no-chart", action="store_true", help="skip the PNG")
    args = parser.parse_args(argv)
    if not args.traces.is_dir() or not any(args.traces.glob("*.jsonl")):
        log(f"quality: no traces in {args.traces} (set --traces or CTXLEDGER_TRACES); skipped")
        return 0
    started = time.perf_counter()
    traces = load(args.traces)
    log(f"quality: {len(traces)} traces from {args.traces}")
    results: dict[str, Any] = {
        "window": WINDOW,
        "machine": machine(),
        "code": code_state(),
        "policies": {},
    }
    marks_windows = [int(w) for w in args.marks_windows.split(",") if w.strip()]
    if marks_windows:
        results["two_marks"] = marks_section(
            traces,
            marks_windows,
            [float(t) for t in args.targets.split(",") if t.strip()],
            run_config,
            totals,
            log,
        )
    if args.marks_only:
        text = "\n".join(marks_markdown(results.get("two_marks", {}))) + "\n"
        print(text)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "quality_marks.md").write_text(text)
        (args.out / "quality_marks.json").write_text(
            json.dumps({k: results[k] for k in ("machine", "code", "two_marks")}, indent=1) + "\n"
        )
        log(f"quality: wrote {args.out}/quality_marks.{{md,json}}")
        return 0
    threshold = threshold_for(_state_of(policy_config("ctxledger")))
    results["threshold"] = threshold
    for policy in POLICIES:
        log(f"  policy {policy} ...")
        rows = run_policy(traces, policy)
        results["policies"][policy] = {
            "config": _config_dict(policy_config(policy)),
            "traces": rows,
            "total": totals(rows),
        }
        log(f"    {_one_line(results['policies'][policy]['total'])}")
    results["prototypes"] = {}
    for name in PROTOTYPES:
        log(f"  prototype {name} ...")
        rows = run_policy(traces, name)
        results["prototypes"][name] = {"traces": rows, "total": totals(rows)}
        log(f"    {_one_line(results['prototypes'][name]['total'])}")
    sweep = {}
    for batch in [int(b) for b in args.batches.split(",") if b.strip()]:
        log(f"  ctxledger micro_batch={batch} ...")
        sweep[str(batch)] = totals(run_policy(traces, "ctxledger", micro_batch=batch))
        log(f"    {_one_line(sweep[str(batch)])}")
    results["micro_batch_sweep"] = sweep
    windows: dict[str, dict[str, Any]] = {}
    for window in [int(w) for w in args.sweep_windows.split(",") if w.strip()]:
        log(f"  ctxledger window={window}, micro_batch in {args.batches} ...")
        windows[str(window)] = {}
        for batch in [int(b) for b in args.batches.split(",") if b.strip()]:
            t = totals(run_policy(traces, "ctxledger", micro_batch=batch, context_window=window))
            windows[str(window)][str(batch)] = {key: t[key] for key in WINDOW_SWEEP_KEYS}
    results["micro_batch_windows"] = windows
    results["fact_index_sweep"] = {}
    for size in [int(f) for f in args.fact_sizes.split(",") if f.strip()]:
        log(f"  ctxledger+facts fact_index_chars={size} ...")
        t = totals(run_policy(traces, "ctxledger+facts", fact_index_chars=size))
        room = fact_index_chars(policy_config("ctxledger+facts", fact_index_chars=size))
        results["fact_index_sweep"][str(size)] = {"room": room, "total": t}
        log(f"    {_one_line(t)}")
    results["fact_index_windows"] = {}
    for window in [int(w) for w in args.sweep_windows.split(",") if w.strip()]:
        log(f"  ctxledger window={window}, fact block off / default ...")
        sizes: dict[str, Any] = {}
        for size in (0, None):
            config = policy_config("ctxledger+facts", fact_index_chars=size, context_window=window)
            t = totals(
                run_policy(traces, "ctxledger+facts", fact_index_chars=size, context_window=window)
            )
            sizes["default" if size is None else str(size)] = {
                "room": fact_index_chars(config),
                "total": _slim_total(t),
            }
        results["fact_index_windows"][str(window)] = sizes
    results["targets"] = targets(
        results["policies"]["ctxledger"]["total"], results["policies"]["naive"]["total"]
    )
    results["fact_targets"] = fact_targets(
        results["policies"]["ctxledger+facts"]["total"],
        results["policies"]["ctxledger"]["total"],
        WINDOW,
    )
    if not args.no_cost:
        cost_targets = [float(t) for t in args.cost_targets.split(",") if t.strip()]
        results["cost"] = {
            str(window): cost_rows(traces, cost_targets, window)
            for window in [int(w) for w in args.cost_windows.split(",") if w.strip()]
        }
    results["seconds"] = round(time.perf_counter() - started, 2)
    text = markdown(results)
    if not args.no_cost:
        text += "\n".join(_cost_markdown(results["cost"])) + "\n"
    if "two_marks" in results:
        text += "\n".join(marks_markdown(results["two_marks"])) + "\n"
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "quality.md").write_text(text)
    slim = _strip_series(results)
    (args.out / "quality.json").write_text(json.dumps(slim, indent=1, sort_keys=False) + "\n")
    if not args.no_chart:
        write_chart(results, args.out / "quality.png")
    log(f"quality: done in {results['seconds']} s; wrote {args.out}/quality.{{md,json,png}}")
    return 0


def _slim_total(total: dict[str, Any]) -> dict[str, Any]:
    """A total without its per-step series (for the JSON of window sweeps)."""
    return {key: value for key, value in total.items() if not key.startswith("shares")}


def _state_of(config: Any) -> Any:
    from ctxledger.domain import SessionState

    return SessionState.new("threshold", config)


def _config_dict(config: Any) -> dict[str, Any]:
    return {name: getattr(config, name) for name in config.__struct_fields__}


def _one_line(total: dict[str, Any]) -> str:
    ret = total["retention"]
    return (
        f"peak {total['peak_tokens']} overflow views {total['overflow_views']} "
        f"compactions {total['compactions']} summariser calls {total['summarizer_calls']} "
        f"input {total['summarizer_input_tokens']} tok; retention paths "
        f"{_pct(ret['paths']['next_share'])} commands {_pct(ret['commands']['next_share'])} "
        f"errors {_pct(ret['errors']['next_share'])}; stability median between "
        f"{_pct(total['stability_median_between'])} all {_pct(total['stability_median_all'])}"
    )


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f} %"


def _strip_series(results: dict[str, Any]) -> dict[str, Any]:
    """Drop per-step share lists from the JSON (kept: medians) to keep it readable."""
    out: dict[str, Any] = json.loads(json.dumps(results))
    for policy in out["policies"].values():
        for row in policy["traces"]:
            row["stability"].pop("shares_between", None)
            row["stability"].pop("shares_all", None)
            row["stability"].pop("kept_between", None)
    return out


if __name__ == "__main__":
    sys.exit(main())
