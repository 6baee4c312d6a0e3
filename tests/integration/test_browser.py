"""The report and the UI in a real browser (Debian's chromium through Playwright): a chart is
drawn, a marker opens its compaction, the step picker shows that step's view, the console stays
clean and no request leaves the page. Skipped, saying why, where no browser is installed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from report_helpers import (
    HOSTILE,
    SESSION,
    browser_page,
    build_log,
    report_data,
    view_entries,
)

from ctxledger.replay import view_at
from ctxledger.storage import open_log
from ctxledger.tooling.report import write_report
from ctxledger.tooling.ui import UiServer

_CHILD = Path(__file__).with_name("ui_writer_child.py")


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log whose session compacted in every way."""
    return build_log(tmp_path_factory.mktemp("browser") / "db")


@pytest.fixture(scope="module")
def report(db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The static report of the session."""
    path = tmp_path_factory.mktemp("report") / "report.html"
    with open_log(db, readonly=True) as log:
        write_report(log, SESSION, path)
    return path


def _shown_seqs(page: Any) -> list[int]:
    return [int(seq) for seq in page.eval_on_selector_all(
        "#view .msg", "nodes => nodes.map(n => n.dataset.seq || 0)"
    )]


def test_the_report_draws_opens_a_compaction_and_shows_a_step(db: Path, report: Path) -> None:
    """Offline, from a file: chart, marker click, step picker, escaping, clean console."""
    data = report_data(report.read_text("utf-8"))
    with browser_page() as (page, errors, requests):
        page.goto(report.as_uri())
        page.wait_for_selector("#chart svg polyline.series.view")
        assert page.locator("#chart svg polyline").count() == 2  # history and view
        assert page.locator("#chart .mark").count() >= len(data["compactions"])
        # A marker of each kind the log holds, each opening its own compaction.
        for index, compaction in enumerate(data["compactions"]):
            if index > 3 and compaction["kind"] == data["compactions"][index - 1]["kind"]:
                continue
            page.click(f'#chart .mark[data-compaction="{index}"]')
            summary = page.inner_text("#compaction pre.summary")
            assert summary.strip() == data["texts"][compaction["summary"]].strip()
            assert f"Compaction {index + 1} of" in page.inner_text("#compaction .title")
        # The step picker: the view shown is the view served at that step.
        step = len(data["steps"]["seq"]) // 2
        page.fill("#step-number", str(step))
        page.press("#step-number", "Enter")
        page.wait_for_selector(f'#step-title:has-text("Step {step}:")')
        with open_log(db, readonly=True) as log:
            expected = view_at(log, SESSION, data["steps"]["seq"][step - 1]).messages
        assert _shown_seqs(page) == [m.seq or 0 for m in expected]
        # The hostile message is text on the page, never markup.
        page.fill("#search", "keep this literal")
        page.wait_for_selector("#results .hits li")
        page.click("#results .hits li")
        page.wait_for_selector("#view .msg.hit")
        assert HOSTILE in page.inner_text("#view .msg.hit pre")
        assert page.evaluate("window.__pwned === undefined")
        assert page.locator("#view img").count() == 0
    assert errors == []
    assert requests == [report.as_uri()]


def test_masked_and_truncated_parts_are_marked_in_the_step_view(report: Path) -> None:
    """A view that masks and truncates results shows badges saying so."""
    data = report_data(report.read_text("utf-8"))
    chosen = None
    for step in range(len(data["steps"]["seq"]), 0, -1):
        flags = {entry[4] for entry in view_entries(data, step)}
        if {"masked", "truncated"} <= flags:
            chosen = step
            break
    assert chosen is not None, "no step of the fixture both masks and truncates"
    with browser_page() as (page, errors, _requests):
        page.goto(report.as_uri())
        page.wait_for_selector("#step-number")
        page.fill("#step-number", str(chosen))
        page.press("#step-number", "Enter")
        page.wait_for_selector(f'#step-title:has-text("Step {chosen}:")')
        assert page.locator("#view .badge.masked").count() > 0
        assert page.locator("#view .badge.truncated").count() > 0
    assert errors == []


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[UiServer, Any]]:
    """The UI over a log that a child process keeps writing to (``child.stdin``: ``step ID``)."""
    db = build_log(tmp_path / "db", steps=12)
    child = subprocess.Popen(
        [sys.executable, str(_CHILD), str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "ready"
        with open_log(db, readonly=True) as log, UiServer(log, "127.0.0.1", 0) as ui:
            ui.start()
            yield ui, child
        child.stdin.write("quit\n")
        child.stdin.flush()
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
        child.stdin.close()
        child.stdout.close()
        child.wait()


def test_the_ui_index_links_to_a_page_that_follows_the_log(live: tuple[UiServer, Any]) -> None:
    """Index → session page; a step written by another process appears without a reload;
    requests stay on the server's own origin."""
    ui, child = live
    with browser_page() as (page, errors, requests):
        page.goto(ui.url)
        page.wait_for_selector("#sessions table a")
        page.click(f'#sessions a:has-text("{SESSION}")')
        page.wait_for_selector("#chart svg polyline.series.view")
        page.click('#chart .mark[data-compaction="0"]')
        assert page.inner_text("#compaction pre.summary").strip()
        steps = int(page.get_attribute("#step-number", "max") or 0)
        child.stdin.write(f"step {SESSION}\n")
        child.stdin.flush()
        child.stdout.readline()
        # The page polls every second; 30 s is a bound for a loaded machine, not a timing.
        page.wait_for_function(
            f"() => Number(document.querySelector('#step-number').max) > {steps}", timeout=30_000
        )
    assert errors == []
    assert requests and all(url.startswith(ui.url) for url in requests)
