"""The token plot: TokenSeries validation and the PNG written by plot_token_series."""

from __future__ import annotations

import itertools
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from ctxledger.tooling.plotting import LAYERS, MAX_PANELS, TokenSeries, plot_token_series

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _series(session_id: str = "s1", steps: int = 60, dynamic: bool = False) -> TokenSeries:
    """A sawtooth: history grows, the view drops at each compaction."""
    history, view, compactions = [], [], []
    total = shown = 0
    for step in range(steps):
        total += 900
        shown += 900
        if shown >= 12_000:
            shown = 4000
            compactions.append((step, LAYERS[step % len(LAYERS)]))
        history.append(total)
        view.append(shown)
    threshold = [10_000 + 20 * step for step in range(steps)] if dynamic else 12_000
    return TokenSeries(session_id, range(steps), history, view, threshold, compactions)


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from the IHDR chunk, which must follow the PNG signature."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    length, kind = struct.unpack(">I4s", data[8:16])
    assert (length, kind) == (13, b"IHDR")
    width, height = struct.unpack(">II", data[16:24])
    return width, height


# --- TokenSeries --------------------------------------------------------------------------------


def test_series_stores_sequences_as_tuples() -> None:
    """Lists and ranges become tuples, so a series is immutable and hashable."""
    series = TokenSeries("s", [1, 2], [10, 20], [5, 6], [7, 8], [[2, "auto"]])
    assert (series.steps, series.threshold, series.compactions) == ((1, 2), (7, 8), ((2, "auto"),))
    assert hash(series) == hash(TokenSeries("s", (1, 2), (10, 20), (5, 6), (7, 8), ((2, "auto"),)))


def test_series_rejects_sequences_of_different_lengths() -> None:
    """Every per-step sequence needs one value per step."""
    with pytest.raises(ValueError, match="view_tokens has 1 values for 2 steps"):
        TokenSeries("s", [1, 2], [10, 20], [5], 100)


def test_series_rejects_a_dynamic_threshold_of_the_wrong_length() -> None:
    """A per-step threshold needs one value per step."""
    with pytest.raises(ValueError, match="threshold has 3 values for 2 steps"):
        TokenSeries("s", [1, 2], [10, 20], [5, 6], [1, 2, 3])


def test_series_rejects_steps_that_do_not_ascend() -> None:
    """Steps are x values and must increase."""
    with pytest.raises(ValueError, match="strictly ascending"):
        TokenSeries("s", [2, 1], [10, 20], [5, 6], 100)


def test_series_rejects_an_unknown_compaction_layer() -> None:
    """Layers are micro, auto, manual or reactive."""
    with pytest.raises(ValueError, match="unknown layer 'mega'"):
        TokenSeries("s", [1], [10], [5], 100, [(1, "mega")])


# --- plot_token_series --------------------------------------------------------------------------


def test_plot_writes_a_png_with_a_sane_size(tmp_path: Path) -> None:
    """One session gives a landscape PNG of a few hundred pixels each way."""
    pytest.importorskip("matplotlib")
    out = plot_token_series([_series()], tmp_path / "tokens.png", title="demo")
    assert out == tmp_path / "tokens.png"
    width, height = _png_size(out)
    assert 400 <= height < width <= 2000


def test_plot_of_many_sessions_grows_the_figure(tmp_path: Path) -> None:
    """Six sessions with dynamic thresholds and every layer give a larger PNG than one."""
    pytest.importorskip("matplotlib")
    many = [_series(f"s{i}", dynamic=i % 2 == 0) for i in range(MAX_PANELS)]
    one_width, one_height = _png_size(plot_token_series([_series()], tmp_path / "one.png"))
    width, height = _png_size(plot_token_series(many, tmp_path / "many.png"))
    assert width > one_width
    assert height > one_height


def test_plot_accepts_a_session_without_steps(tmp_path: Path) -> None:
    """An empty series (a session that has not started) still plots."""
    pytest.importorskip("matplotlib")
    empty = TokenSeries("new", [], [], [], 1000)
    assert _png_size(plot_token_series([empty, _series()], tmp_path / "p.png"))[0] > 0


def test_plot_rejects_no_series(tmp_path: Path) -> None:
    """There must be something to plot."""
    with pytest.raises(ValueError, match="no token series"):
        plot_token_series([], tmp_path / "p.png")


def test_plot_rejects_more_sessions_than_panels(tmp_path: Path) -> None:
    """More than MAX_PANELS sessions would be unreadable in one figure."""
    with pytest.raises(ValueError, match=f"at most {MAX_PANELS} sessions"):
        plot_token_series([_series(f"s{i}") for i in range(MAX_PANELS + 1)], tmp_path / "p.png")


def test_missing_matplotlib_raises_an_import_error_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without matplotlib, the error says how to install it."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"pip install 'ctxledger\[plot\]'"):
        plot_token_series([_series()], tmp_path / "p.png")


def test_importing_the_module_does_not_import_matplotlib() -> None:
    """matplotlib is imported only when a plot is drawn, so ctxledger works without it."""
    code = "import sys, ctxledger.tooling.plotting; assert 'matplotlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# --- duration labels ---------------------------------------------------------------------------


def test_duration_labels_never_crowd_each_other() -> None:
    """Labels closer than a slot of the panel are dropped; close neighbours alternate heights."""
    from ctxledger.tooling.plotting import placed_notes

    notes = [(step, f"{step} ms") for step in (1, 2, 3, 10, 14, 60, 100)]
    series = TokenSeries("s", range(1, 101), [1] * 100, [1] * 100, 1, notes=notes)
    placed = placed_notes(series)
    assert [step for step, _, _ in placed] == [1, 10, 60, 100]
    gap = 99 / 14
    for (a, _, level_a), (b, _, level_b) in itertools.pairwise(placed):
        assert b - a >= gap
        if b - a < 2 * gap:
            assert level_a != level_b


def test_summariser_times_read_as_people_say_them() -> None:
    """A 3 ms summary is '3 ms', not '0.0 s'; a timeline's labels use it."""
    from ctxledger.tooling.format import human_seconds

    assert human_seconds(0.0) == "0 s"
    assert human_seconds(0.0004) == "0.4 ms"
    assert human_seconds(0.0031) == "3 ms"
    assert human_seconds(1.234) == "1.23 s"
    assert human_seconds(42.04) == "42.0 s"
    assert human_seconds(185) == "3 min 5 s"
