"""``ctxledger report``: one self-contained HTML file whose data is the log's, exactly."""

from __future__ import annotations

import re
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cli_helpers import assert_one_line_error, run
from report_helpers import CONFIG, HOSTILE, SESSION, build_log, report_data, view_entries

from ctxledger import Config, Host, HostOptions, Pricing
from ctxledger.events import CheckpointCreated
from ctxledger.replay import audit, view_at
from ctxledger.storage import open_log
from ctxledger.tooling.report import write_report
from ctxledger.tooling.report_data import CLIP_CHARS, target_tokens
from ctxledger.tooling.workload import iter_agent_steps


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log whose session compacted in every way."""
    return build_log(tmp_path_factory.mktemp("report") / "db")


@pytest.fixture(scope="module")
def page(db: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The report of the session, written by the command."""
    out = tmp_path_factory.mktemp("out") / "report.html"
    result = run("report", "--db", db, SESSION, "-o", out, "--pricing", "anthropic-sonnet")
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.stdout
    return out.read_text("utf-8")


def test_the_page_loads_nothing_from_anywhere(page: str) -> None:
    """No src/href to another resource, no URL at all in the markup; the policy forbids requests."""
    assert not re.search(r"\b(?:src|href)\s*=\s*[\"'](?!data:)", page)
    urls = set(re.findall(r"https?://[^\s\"'<>]+", page))
    assert urls <= {"http://www.w3.org/2000/svg"}  # a namespace name, never fetched
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert policy is not None
    assert "connect-src 'none'" in policy.group(1) and "default-src 'none'" in policy.group(1)
    assert "'unsafe-inline'" not in policy.group(1)


def test_markup_from_a_message_is_never_markup_of_the_page(page: str) -> None:
    """The hostile message is in the data, not in the HTML; only the page's own scripts run."""
    assert HOSTILE not in page
    assert "__pwned" not in page
    assert page.count("<script") == 3  # the boot JSON, the data, the page's own script
    data = report_data(page)
    assert any(HOSTILE in text for text in data["texts"])


def test_every_step_is_a_served_view_that_rebuilds_to_its_hash(db: Path, page: str) -> None:
    """One step per ViewServed; each view rebuilt before the event matches the recorded hash."""
    data = report_data(page)
    with open_log(db, readonly=True) as log:
        served = [r for r in log.iter_events(SESSION) if type(r.event).__name__ == "ViewServed"]
    assert data["steps"]["seq"] == [r.event.through_seq for r in served]  # type: ignore[attr-defined]
    assert data["steps"]["e"] == [r.event.estimated_tokens for r in served]  # type: ignore[attr-defined]
    assert set(data["steps"]["ok"]) == {1}


def test_the_view_of_a_step_is_the_view_served_then(db: Path, page: str) -> None:
    """For every step, the rebuilt runs give view_at's messages, masked and truncated marked."""
    data = report_data(page)
    seqs = data["steps"]["seq"]
    flags: set[str] = set()
    with open_log(db, readonly=True) as log:
        for step, seq in enumerate(seqs, start=1):
            if step < len(seqs) and seqs[step] == seq:
                continue  # view_at gives the last view served at a seq
            expected = view_at(log, SESSION, seq).messages
            entries = view_entries(data, step)
            assert [(e[0] or None, e[1]) for e in entries] == [(m.seq, m.role) for m in expected]
            for entry, message in zip(entries, expected, strict=True):
                text = data["texts"][entry[3]]
                if len(message.content) <= CLIP_CHARS:
                    assert text == message.content
                else:
                    assert entry[3] in data["clipped"] and text[:100] == message.content[:100]
                flags.add(entry[4])
    assert {"raw", "masked", "truncated", "summary"} <= flags


def test_compactions_are_told_apart_with_their_audit(db: Path, page: str) -> None:
    """Manual, reactive and automatic kinds as the log recorded them, each with its audit."""
    data = report_data(page)
    with open_log(db, readonly=True) as log:
        created = [
            r.event for r in log.iter_events(SESSION) if isinstance(r.event, CheckpointCreated)
        ]
    kinds = [c["kind"] for c in data["compactions"]]
    expected = [
        {"manual": "manual", "prompt_too_long": "reactive"}.get(
            e.checkpoint.reason, "prepared" if e.prepared else "auto"
        )
        for e in created
    ]
    assert kinds == expected
    assert {"manual", "reactive", "auto"} <= set(kinds)
    with open_log(db, readonly=True) as log:
        for compaction, event in zip(data["compactions"], created, strict=True):
            checkpoint = event.checkpoint
            assert data["texts"][compaction["summary"]] == checkpoint.summary
            # -1: the checkpoint has no fact block (the policy gave it no room)
            facts = data["texts"][compaction["facts"]] if compaction["facts"] >= 0 else ""
            assert facts == checkpoint.facts
            assert compaction["covers_through_seq"] == checkpoint.covers_through_seq
            assert compaction["tokens_before"] == checkpoint.tokens_before
            assert compaction["summarizer"] == checkpoint.summarizer == "ExtractiveSummarizer"
            lost = audit(log, SESSION, checkpoint.id)
            assert compaction["audit"]["lost_total"] == len(lost.lost)
            assert compaction["audit"]["kept"] == len(lost.kept)
            shown = [[f.seq, f.kind, f.text] for f in lost.lost[: len(compaction["audit"]["lost"])]]
            assert [[s, k, data["texts"][t]] for s, k, t in compaction["audit"]["lost"]] == shown


def test_a_foreground_compaction_counts_its_wait_and_a_prepared_one_none(page: str) -> None:
    """Waiting is derived from the log: a summary on the step's path waited; one ready did not."""
    data = report_data(page)
    for compaction in data["compactions"]:
        if compaction["waited_how"] == "prepared in the background before the step":
            assert compaction["waited"] == 0.0
        if compaction["kind"] == "manual":
            assert compaction["waited_how"] == "summariser on the step's path"


def test_usage_and_cost_totals_are_shown_when_recorded(db: Path, page: str) -> None:
    """The provider's usage is totalled; --pricing prices it."""
    data = report_data(page)
    usage = data["totals"]["usage"]
    with Host.open(db) as host:
        totals = host.session(SESSION).usage()
    assert usage["input_tokens"] == totals.input_tokens and usage["calls"] == totals.calls
    assert data["totals"]["cost"] == pytest.approx(Pricing.preset("anthropic-sonnet").cost(totals))


def test_a_session_of_1000_steps_makes_a_report_under_3_mb(tmp_path: Path) -> None:
    """The size promise, on the synthetic workload (the chart, views and texts of 1,000 steps)."""
    config = Config(context_window=24_000, compression_threshold=0.8, min_retain_rounds=2)
    with Host.open(tmp_path / "db", config=config, options=HostOptions(durability="none")) as host:
        session = host.session("long")
        for step in iter_agent_steps(0, steps=1000):
            session.append_many(step)
            session.prepare_step()
    with open_log(tmp_path / "db", readonly=True) as log:
        written = write_report(log, "long", tmp_path / "long.html")
    assert written.steps == 1000 and written.compactions > 10
    assert written.bytes == (tmp_path / "long.html").stat().st_size < 3_000_000


def test_unknown_session_is_one_line_and_writes_nothing(db: Path, tmp_path: Path) -> None:
    """An unknown session names the verb that lists them; no file appears."""
    out = tmp_path / "nope.html"
    assert_one_line_error(run("report", "--db", db, "nope", "-o", out), "unknown session 'nope'")
    assert not out.exists()


def test_a_bad_pricing_is_refused_naming_the_option(db: Path, tmp_path: Path) -> None:
    """--pricing takes a preset or four prices, nothing else."""
    result = run("report", "--db", db, SESSION, "-o", tmp_path / "r.html", "--pricing", "1,2")
    assert_one_line_error(result, "--pricing", "anthropic-sonnet")


def test_the_target_line_comes_from_the_config_when_it_has_one() -> None:
    """A Config with compaction_target (or sizes()) draws a target; today's Config has none."""
    assert target_tokens(CONFIG) is None or hasattr(CONFIG, "compaction_target")
    with_share: Any = SimpleNamespace(context_window=10_000, compaction_target=0.5)
    assert target_tokens(with_share) == 5000
    sized: Any = SimpleNamespace(
        context_window=10_000, sizes=lambda: SimpleNamespace(target_tokens=4321)
    )
    assert target_tokens(sized) == 4321


def test_following_a_growing_session_adds_only_the_new_steps(tmp_path: Path) -> None:
    """The builder catches up from where it was: the data equals a fresh build."""
    from ctxledger.tooling.report_data import ReportBuilder

    path = tmp_path / "db"
    with Host.open(path, config=CONFIG) as host:
        session = host.session("grow")
        steps = list(iter_agent_steps(1, steps=16))
        for step in steps[:8]:
            session.append_many(step)
            session.prepare_step()
        builder = ReportBuilder(host.log, "grow")
        assert builder.catch_up()
        before = len(builder.data()["steps"]["seq"])
        for step in steps[8:]:
            session.append_many(step)
            session.prepare_step()
        session.wait_background()
        assert builder.catch_up()
        grown = builder.data()
        fresh = ReportBuilder(host.log, "grow")
        fresh.catch_up()
        assert not builder.catch_up()
        expected = fresh.data()
    assert before == 8 and len(grown["steps"]["seq"]) == 16
    for key in ("steps", "compactions", "totals", "history"):
        assert grown[key] == expected[key]
    assert [grown["texts"][m[3]] for m in grown["msgs"]] == [
        expected["texts"][m[3]] for m in expected["msgs"]
    ]


def test_a_report_is_written_whole_or_not_at_all(db: Path, tmp_path: Path) -> None:
    """The file appears by rename: no partial file is left beside it."""
    target = tmp_path / "r.html"
    started = time.time()
    with open_log(db, readonly=True) as log:
        write_report(log, SESSION, target)
    assert target.stat().st_mtime >= started - 1
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]
