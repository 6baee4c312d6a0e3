"""``ctxledger demo --fast`` end to end in a temporary folder, as a user runs it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import PNG_SIGNATURE, assert_one_line_error, run

from ctxledger import Message, replay
from ctxledger.tooling.traces import write_trace


def _demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxledger", "demo", "--fast", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("demo") / "ctxledger-demo"


@pytest.fixture(scope="module")
def demo(demo_dir: Path) -> subprocess.CompletedProcess[str]:
    """One fast demo run, shared by the tests below."""
    return _demo("--dir", str(demo_dir))


def _summary(demo: subprocess.CompletedProcess[str], key: str) -> str:
    match = re.search(rf"^{key} +(.*)$", demo.stdout, re.MULTILINE)
    assert match, demo.stdout
    return match.group(1)


def test_demo_exits_zero(demo: subprocess.CompletedProcess[str]) -> None:
    """The fast demo succeeds."""
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert _summary(demo, "result") == "OK"


def test_demo_prints_the_session_table(demo: subprocess.CompletedProcess[str]) -> None:
    """The table has a row per agent session and a total."""
    lines = demo.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("SESSION "))
    assert lines[header].split() == [
        "SESSION",
        "SOURCE",
        "STEPS",
        "EVENTS",
        "HISTORY",
        "TOK",
        "PEAK",
        "VIEW",
        "TOK",
        "MICRO",
        "AUTO",
        "MANUAL",
        "REACTIVE",
        "INTERRUPTED",
        "WAITED",
    ]
    rows = lines[header + 2 : header + 18]
    assert [row.split()[0] for row in rows] == [f"agent-{n:02d}" for n in range(16)]
    assert lines[header + 18].startswith("TOTAL")


def test_demo_table_shows_the_seconds_agents_waited_on_summaries(
    demo: subprocess.CompletedProcess[str],
) -> None:
    """The WAITED column holds each agent's wait in seconds; TOTAL is their sum (to the
    rounding of the cells) and the summary line repeats it."""
    lines = demo.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("SESSION "))
    cells = [line.split()[-2:] for line in lines[header + 2 : header + 19]]
    assert all(unit == "s" for _, unit in cells), cells
    seconds = [float(value) for value, _ in cells]
    assert all(value >= 0 for value in seconds)
    assert abs(sum(seconds[:-1]) - seconds[-1]) <= 0.01 * len(seconds), seconds
    total = float(re.match(r"([\d.]+) s in all", _summary(demo, "waited")).group(1))  # type: ignore[union-attr]
    assert abs(total - seconds[-1]) <= 0.01


def test_demo_shows_every_compaction_layer(demo: subprocess.CompletedProcess[str]) -> None:
    """Micro, auto, manual and reactive compactions all happen."""
    counts = dict(re.findall(r"(micro|auto|manual|reactive) (\d+)", _summary(demo, "compactions")))
    assert set(counts) == {"micro", "auto", "manual", "reactive"}
    assert all(int(n) > 0 for n in counts.values()), counts


def test_demo_verifies_ok_after_the_kill(demo: subprocess.CompletedProcess[str]) -> None:
    """The log re-derives every served view after the SIGKILL."""
    assert "[1/4] SIGKILLed the host process" in demo.stdout
    assert "[3/4] verify after the crash: ok:" in demo.stdout


def test_demo_loses_no_acknowledged_message(demo: subprocess.CompletedProcess[str]) -> None:
    """Every message the killed host acknowledged is found after recovery."""
    assert ", 0 acknowledged messages lost," in _summary(demo, "crash")
    assert "16/16 sessions recovered" in _summary(demo, "crash")


def test_demo_writes_a_png_plot(demo: subprocess.CompletedProcess[str], demo_dir: Path) -> None:
    """The plot named in the summary exists and is a PNG."""
    plot = Path(_summary(demo, "plot"))
    assert plot == demo_dir / "tokens.png"
    assert plot.read_bytes()[:8] == PNG_SIGNATURE


def test_demo_writes_the_html_report_of_one_agent(
    demo: subprocess.CompletedProcess[str], demo_dir: Path
) -> None:
    """The report named in the summary exists, is one page, and holds that agent's steps."""
    from report_helpers import report_data

    line = _summary(demo, "report")
    path = Path(line.split(" (session ")[0])
    session = line.split(" (session ")[1].split(":")[0]
    assert path == demo_dir / "report.html"
    data = report_data(path.read_text("utf-8"))
    assert data["session_id"] == session and data["steps"]["seq"]


def test_demo_log_verifies_independently(
    demo: subprocess.CompletedProcess[str], demo_dir: Path
) -> None:
    """The finished log passes replay.verify run by the test itself."""
    report = replay.verify(demo_dir / "log")
    assert report.ok and report.sessions == 16 and report.views_checked > 0


def test_demo_shows_progress_on_stderr(demo: subprocess.CompletedProcess[str]) -> None:
    """Progress goes to stderr, keeping stdout for the results."""
    assert "running agents:" in demo.stderr and "finishing:" in demo.stderr


def test_demo_rejects_a_traces_folder_without_traces(tmp_path: Path) -> None:
    """--traces must name a folder holding *.jsonl files."""
    result = run("demo", "--fast", "--dir", tmp_path / "d", "--traces", tmp_path)
    assert_one_line_error(result, "no *.jsonl trace files")


@pytest.mark.traces
def test_demo_replays_real_traces(tmp_path: Path, traces: dict[str, list[Message]]) -> None:
    """With --traces each trace file becomes one more agent, verified like the others."""
    chosen = tmp_path / "traces"
    chosen.mkdir()
    for name in sorted(traces, key=lambda stem: len(traces[stem]))[:2]:
        write_trace(chosen / f"{name}.jsonl", traces[name])
    done = _demo(
        "--dir", str(tmp_path / "d"), "--sessions", "2", "--steps", "8", "--traces", str(chosen)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(re.findall(r"^trace-\S+ +trace ", done.stdout, re.MULTILINE)) == 2
