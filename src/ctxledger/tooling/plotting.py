"""The token plot: history and model-view size over the steps of one or more sessions.

Each session gets a panel with its history size (what keeping everything would send), the size
of the model view actually served, the compaction threshold as a dashed line, and a marker at
each compaction coloured by its layer (micro, auto, manual, reactive). matplotlib is an optional
dependency (``pip install 'ctxledger[plot]'``), imported only when a plot is drawn, and used
through its object API, so plotting touches no pyplot global state and works from any thread.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxledger.tooling.format import human_seconds

__all__ = ["FORMATS", "LAYERS", "MAX_PANELS", "TokenSeries", "placed_notes", "plot_token_series"]

#: Compaction layers, cheapest first, as the design names them.
LAYERS: tuple[str, ...] = ("micro", "auto", "manual", "reactive")
#: Sessions per figure; more panels would be too small to read.
MAX_PANELS = 6
#: File suffixes a plot can be written as (the format follows the suffix).
FORMATS = (".png", ".svg", ".pdf")

# Marker style per layer: colour-blind-safe colours (Okabe-Ito) and distinct shapes, so the
# layers stay apart in greyscale prints too.
_LAYER_STYLE = {
    "micro": {"color": "#999999", "marker": "v", "s": 28},
    "auto": {"color": "#0072B2", "marker": "o", "s": 46},
    "manual": {"color": "#009E73", "marker": "s", "s": 46},
    "reactive": {"color": "#D55E00", "marker": "X", "s": 70},
}
_HISTORY_COLOR, _VIEW_COLOR, _THRESHOLD_COLOR = "#7f7f7f", "#0072B2", "#CC79A7"
# Beyond this ratio of history to view (in any panel), a linear axis flattens the view into a
# line at the bottom; a log axis keeps both readable.
_LOG_SCALE_RATIO = 8
# A panel has room for about this many duration labels side by side.
_NOTE_SLOTS = 14


@dataclass(frozen=True)
class TokenSeries:
    """Per-step token counts of one session, as plotted by :func:`plot_token_series`.

    Sequences are stored as tuples, so a series is immutable and hashable.

    Attributes:
        session_id: Names the panel.
        steps: Step indices (x values), ascending.
        history_tokens: Estimated tokens of the whole history at each step.
        view_tokens: Estimated tokens of the model view served at each step.
        threshold: The compaction threshold in tokens: one number, or one per step when a
            dynamic policy moves it.
        compactions: ``(step, layer)`` for each compaction, ``layer`` one of :data:`LAYERS`.
        notes: ``(step, text)`` labels drawn by the compaction markers (the summariser's wall
            time).
        summary_seconds: The summariser's total wall time, shown in the panel's subtitle when
            known (0.0: not recorded).

    Raises:
        ValueError: The per-step sequences differ in length, steps are not ascending, or a
            compaction names an unknown layer.
    """

    session_id: str
    steps: Sequence[int]
    history_tokens: Sequence[float]
    view_tokens: Sequence[float]
    threshold: float | Sequence[float]
    compactions: Sequence[tuple[int, str]] = field(default=())
    notes: Sequence[tuple[int, str]] = field(default=())
    summary_seconds: float = 0.0

    def __post_init__(self) -> None:
        for name in ("steps", "history_tokens", "view_tokens", "compactions", "notes"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(
            self, "compactions", tuple((int(step), layer) for step, layer in self.compactions)
        )
        lengths = {"history_tokens": len(self.history_tokens), "view_tokens": len(self.view_tokens)}
        if not isinstance(self.threshold, int | float):
            object.__setattr__(self, "threshold", tuple(self.threshold))
            lengths["threshold"] = len(self.threshold)
        for name, length in lengths.items():
            if length != len(self.steps):
                raise ValueError(
                    f"session {self.session_id!r}: {name} has {length} values for "
                    f"{len(self.steps)} steps"
                )
        if any(b <= a for a, b in zip(self.steps, self.steps[1:], strict=False)):
            raise ValueError(f"session {self.session_id!r}: steps must be strictly ascending")
        for step, layer in self.compactions:
            if layer not in LAYERS:
                raise ValueError(
                    f"session {self.session_id!r}: compaction at step {step} has unknown layer "
                    f"{layer!r}; expected one of {list(LAYERS)}"
                )


def _figure_class() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(
            "plotting needs matplotlib, which is not installed: pip install 'ctxledger[plot]'"
        ) from exc
    return Figure


def _short(value: float, _position: object = None) -> str:
    """Token counts as people say them: 950, 25.5k, 219k, 1.2M."""
    for scale, suffix in ((1_000_000, "M"), (1000, "k")):
        if abs(value) >= scale:
            scaled = value / scale
            digits = f"{scaled:.0f}" if abs(scaled) >= 100 else f"{scaled:.1f}".rstrip("0")
            return digits.rstrip(".") + suffix
    return f"{value:.0f}"


def _marker_height(series: TokenSeries, step: int) -> float:
    """The view size just before the compaction at ``step``: where the sawtooth peaks."""
    index = next((i for i, s in enumerate(series.steps) if s >= step), len(series.steps) - 1)
    before = series.view_tokens[max(0, index - 1)] if series.steps[index] == step else 0
    return max(before, series.view_tokens[index])


def _wants_log_scale(series: TokenSeries) -> bool:
    peak_view = max(series.view_tokens, default=0)
    return 0 < peak_view * _LOG_SCALE_RATIO < max(series.history_tokens, default=0)


def placed_notes(series: TokenSeries) -> list[tuple[int, str, int]]:
    """The notes a panel draws, as ``(step, text, level)``: labels too close to the one before
    would print over it, so a note is skipped unless it is at least 1/:data:`_NOTE_SLOTS` of
    the panel's width from the last one drawn, and near neighbours alternate between two
    heights (``level`` 0 or 1)."""
    if not series.steps:
        return []
    span = max(series.steps[-1] - series.steps[0], 1)
    gap = span / _NOTE_SLOTS
    placed: list[tuple[int, str, int]] = []
    for step, text in sorted(series.notes):
        if placed and step - placed[-1][0] < gap:
            continue
        level = 1 - placed[-1][2] if placed and step - placed[-1][0] < 2 * gap else 0
        placed.append((step, text, level))
    return placed


def _draw_panel(axes: Any, series: TokenSeries, log_scale: bool) -> None:
    from matplotlib.ticker import FuncFormatter

    steps = series.steps
    axes.plot(steps, series.history_tokens, color=_HISTORY_COLOR, linewidth=1.6,
              label="history (everything kept)")
    axes.fill_between(steps, series.view_tokens, color=_VIEW_COLOR, alpha=0.12, linewidth=0)
    axes.plot(steps, series.view_tokens, color=_VIEW_COLOR, linewidth=1.8,
              label="model view (sent to the LLM)")
    if isinstance(series.threshold, tuple):
        axes.plot(steps, series.threshold, color=_THRESHOLD_COLOR, linestyle="--",
                  linewidth=1.4, drawstyle="steps-post", label="compaction threshold")
    else:
        axes.axhline(series.threshold, color=_THRESHOLD_COLOR, linestyle="--", linewidth=1.4,
                     label="compaction threshold")
    for layer in LAYERS:
        points = [step for step, kind in series.compactions if kind == layer]
        if points and steps:
            heights = [_marker_height(series, step) for step in points]
            axes.scatter(points, heights, zorder=3, label=f"{layer} compaction",
                         edgecolors="white", linewidths=0.6, **_LAYER_STYLE[layer])
    for step, text, level in placed_notes(series):
        axes.annotate(text, (step, _marker_height(series, step)), textcoords="offset points",
                      xytext=(0, 7 + 9 * level), ha="center", fontsize=6.5, color="#555555")
    peak_view = max(series.view_tokens, default=0)
    peak_history = max(series.history_tokens, default=0)
    if log_scale:
        axes.set_yscale("log")
        # Start at a power of ten so the lowest decade is labelled.
        lowest = min((v for v in (*series.view_tokens, *series.history_tokens) if v > 0), default=1)
        axes.set_ylim(bottom=10 ** math.floor(math.log10(lowest)))
        axes.set_ylabel("tokens (log scale)")
    else:
        axes.set_ylim(bottom=0)
        axes.set_ylabel("tokens")
    axes.yaxis.set_major_formatter(FuncFormatter(_short))
    axes.set_xlabel("step")
    axes.grid(True, which="major", color="#e5e5e5", linewidth=0.8)
    axes.set_axisbelow(True)
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)
    axes.set_title(series.session_id, fontsize=10, fontweight="bold", loc="left")
    summariser = (
        f" · summariser {human_seconds(series.summary_seconds)}" if series.summary_seconds else ""
    )
    axes.set_title(
        f"peak view {_short(peak_view)} · history {_short(peak_history)} · "
        f"{len(series.compactions)} compactions{summariser}",
        fontsize=8.5, color="#555555", loc="right",
    )


def plot_token_series(
    series: Sequence[TokenSeries], path: str | os.PathLike[str], *, title: str | None = None
) -> Path:
    """Draw one panel per session and write the figure as PNG, SVG or PDF (by its suffix).

    Args:
        series: One to :data:`MAX_PANELS` sessions.
        path: Where to write it, ending in one of :data:`FORMATS`; parent folders must exist.
        title: A title above all panels.

    Returns:
        The path written.

    Raises:
        ValueError: No series, more than :data:`MAX_PANELS`, or a suffix not in
            :data:`FORMATS`.
        ImportError: matplotlib is not installed (``pip install 'ctxledger[plot]'``).
    """
    if not series:
        raise ValueError("nothing to plot: no token series given")
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"a plot is written as {', '.join(FORMATS)}: not '{Path(path).name}'")
    if len(series) > MAX_PANELS:
        raise ValueError(f"at most {MAX_PANELS} sessions fit one figure, got {len(series)}")
    figure_class = _figure_class()
    columns = 1 if len(series) == 1 else 2 if len(series) <= 4 else 3
    rows = math.ceil(len(series) / columns)
    figure = figure_class(figsize=(6.4 * columns, 3.4 * rows + 0.9), layout="constrained")
    grid = figure.subplots(rows, columns, squeeze=False)
    # One scale for all panels, so they compare at a glance.
    log_scale = any(_wants_log_scale(one) for one in series)
    for axes, one in zip(grid.flat, series, strict=False):
        _draw_panel(axes, one, log_scale)
    for axes in list(grid.flat)[len(series):]:
        axes.set_visible(False)
    # One legend for the whole figure, with every entry any panel drew, in drawing order.
    entries: dict[str, Any] = {}
    for axes in grid.flat:
        for handle, label in zip(*axes.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    figure.legend(list(entries.values()), list(entries), loc="outside lower center",
                  ncol=min(len(entries), 3 if columns == 1 else 4), frameon=False, fontsize=9)
    if title:
        figure.suptitle(title, fontsize=12, fontweight="bold")
    target = Path(path)
    figure.savefig(target, format=suffix[1:], dpi=110)
    return target
