"""bench/bench_targets.py runs end to end (a smoke run; the figures are in bench/README.md).

The bench measures; nothing here checks a timing. What is checked is that the systems took
their turns, that every round has its figures and ratios, and that the report counts the
rounds that met each target from those ratios.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bench_helpers import load_bench, run_bench


def sequential_row(ours: float, yardstick: float, p99: float) -> dict[str, Any]:
    return {
        "ctxledger": {"p50_us": ours, "p99_us": p99},
        "lmdb-txn1": {"p50_us": yardstick, "p99_us": 2 * yardstick},
        "lmdb-layout": {"p50_us": yardstick, "p99_us": 2 * yardstick},
        "p50_ratio": ours / yardstick,
        "p99_over_p50": p99 / ours,
        "layout_ratio": 1.0,
    }


def concurrent_row(ours: float, yardstick: float) -> dict[str, Any]:
    return {
        "first": "ctxledger",
        "ctxledger": {"appends_per_s": ours},
        "jsonl-fsync": {"appends_per_s": yardstick},
        "ratio": ours / yardstick,
    }


def test_the_report_counts_the_rounds_that_met_each_target_edges_included() -> None:
    targets = load_bench("bench_targets")
    sequential = [
        sequential_row(130, 100, 390),  # exactly 1.3 and exactly 3x: both met
        sequential_row(131, 100, 394),  # just over both
        sequential_row(120, 100, 200),
    ]
    concurrent = [concurrent_row(1000, 1000), concurrent_row(999, 1000), concurrent_row(5, 4)]
    report = targets.report(sequential, concurrent)
    assert "median p50 ratio 1.30 (met in 2 of 3 rounds)" in report
    assert "median p99 / p50 3.00 (met in 2 of 3)" in report
    assert "median ratio 1.00 (met in 2 of 3 rounds)" in report
    assert "| 2 | 131 / 394 | 100 | 100 | 1.31 | 1.00 | 3.01 |" in report


def run_targets(tmp_path: Path, *args: str) -> tuple[str, dict[str, Any]]:
    out = tmp_path / "targets.json"
    done = run_bench("bench_targets.py", "--quick", "--json", str(out), *args)
    assert done.returncode == 0, done.stderr
    return done.stdout, json.loads(out.read_text())


def test_a_quick_run_reports_every_round_of_both_phases(tmp_path: Path) -> None:
    report, figures = run_targets(tmp_path)
    sequential, concurrent = figures["sequential"], figures["concurrent"]
    assert len(sequential) == len(concurrent) == 2
    for row in sequential:
        p50s = {name: row[name]["p50_us"] for name in ("ctxledger", "lmdb-txn1", "lmdb-layout")}
        assert all(value > 0 for value in p50s.values())
        assert row["p50_ratio"] == pytest.approx(p50s["ctxledger"] / p50s["lmdb-txn1"])
    # The order of the concurrent phase alternates by round.
    assert [row["first"] for row in concurrent] == ["jsonl-fsync", "ctxledger"]
    for row in concurrent:
        rates = [row[name]["appends_per_s"] for name in ("ctxledger", "jsonl-fsync")]
        assert all(rate > 0 for rate in rates)
        assert row["ratio"] == pytest.approx(rates[0] / rates[1])
    met = sum(row["p50_ratio"] <= 1.3 for row in sequential)
    assert f"(met in {met} of 2 rounds)" in report
    met = sum(row["ratio"] >= 1.0 for row in concurrent)
    assert f"(met in {met} of 2 rounds)" in report.split("concurrent (appends/s)")[1]


def test_a_phase_can_be_skipped_and_bad_options_are_refused(tmp_path: Path) -> None:
    report, figures = run_targets(tmp_path, "--skip", "concurrent")
    assert figures["concurrent"] == [] and len(figures["sequential"]) == 2
    assert "concurrent" not in report
    done = run_bench("bench_targets.py", "--skip", "reopen", timeout=120)
    assert done.returncode == 2 and "--skip takes sequential and/or concurrent" in done.stderr
