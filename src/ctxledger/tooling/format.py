"""Plain-text output for the terminal: aligned tables and human-sized numbers."""

from __future__ import annotations

import time
from collections.abc import Sequence

__all__ = ["clip", "human_bytes", "human_seconds", "human_time", "human_tokens", "table"]


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, right: str = "") -> str:
    """Format rows under headers as aligned columns.

    Args:
        headers: Column titles.
        rows: Cells, converted with ``str``.
        right: One character per column, ``">"`` to right-align it (numbers), anything else
            (or missing) left-aligns.
    """
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [len(title) for title in headers]
    for row in cells:
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], len(cell))

    def line(values: Sequence[str]) -> str:
        parts = []
        for index, value in enumerate(values):
            align = right[index] if index < len(right) else "<"
            parts.append(value.rjust(widths[index]) if align == ">" else value.ljust(widths[index]))
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(headers), rule, *(line(row) for row in cells)])


def human_tokens(value: float) -> str:
    """Token counts as people say them: 950, 25.5k, 1.2M."""
    for scale, suffix in ((1_000_000, "M"), (1000, "k")):
        if abs(value) >= scale:
            scaled = value / scale
            text = f"{scaled:.0f}" if abs(scaled) >= 100 else f"{scaled:.1f}"
            return text.removesuffix(".0") + suffix
    return f"{value:.0f}"


def human_bytes(value: float) -> str:
    """Byte counts in binary units: 512 B, 64.0 KiB, 1.5 GiB."""
    for scale, suffix in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {suffix}"
    return f"{value:.0f} B"


def human_seconds(seconds: float) -> str:
    """A duration as people say it: 0 s, 0.4 ms, 12 ms, 1.25 s, 42.0 s, 3 min 5 s."""
    if seconds <= 0:
        return "0 s"
    if seconds < 0.001:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"
    return f"{int(seconds // 60)} min {round(seconds % 60)} s"


def human_time(timestamp: float) -> str:
    """A unix time as local ``YYYY-MM-DD HH:MM:SS`` (``-`` for 0)."""
    if not timestamp:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def clip(text: str, width: int) -> str:
    """One line of at most ``width`` characters: whitespace squashed, an ellipsis when cut."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: max(0, width - 1)] + "…"
