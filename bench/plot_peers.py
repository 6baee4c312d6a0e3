"""Chart of the persistence comparison: ``bench/results/peers.json`` → ``peers.png``.

Usage::

    .venv/bin/python bench/plot_peers.py [results/peers.json] [results/peers.png]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

HERE = Path(__file__).resolve().parent


def main() -> None:
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "results" / "peers.json"
    target = Path(sys.argv[2]) if len(sys.argv) > 2 else HERE / "results" / "peers.png"
    results = [r for r in json.loads(source.read_text())["results"] if not r.get("error")]
    names = [r["system"] for r in results]
    sequential = [r["sequential_appended"] / r["sequential_seconds"] for r in results]
    concurrent = [r["concurrent_appended"] / r["concurrent_seconds"] for r in results]
    per_message = [r["bytes_on_disk"] / max(r["recovered"], 1) for r in results]
    raw_json = [r["json_bytes"] / max(r["recovered"], 1) for r in results]

    figure, axes = plt.subplots(2, 2, figsize=(12, 8))
    colours = ["#1f77b4" if name == "ctxledger" else "#999999" for name in names]
    panels = [
        (axes[0][0], sequential, "sequential appends / s (one conversation)"),
        (axes[0][1], concurrent, "concurrent appends / s (64 conversations)"),
        (axes[1][0], per_message, "bytes on disk per message"),
    ]
    for axis, values, title in panels:
        axis.barh(names, values, color=colours)
        axis.set_title(title)
        axis.set_xscale("log")
        axis.invert_yaxis()
    axes[1][0].axvline(raw_json[0], color="#d62728", linestyle="--", label="raw JSON size")
    axes[1][0].legend(loc="lower right")
    growth = axes[1][1]
    for result in results:
        marks = sorted((int(k), v) for k, v in result["latency_at_us"].items())
        growth.plot(
            [m for m, _ in marks],
            [v / 1000 for _, v in marks],
            marker="o",
            label=result["system"],
            linewidth=2.5 if result["system"] == "ctxledger" else 1,
        )
    growth.set_xscale("log")
    growth.set_yscale("log")
    growth.set_xlabel("messages already in the conversation")
    growth.set_ylabel("append latency, ms (median near the mark)")
    growth.set_title("per-step cost as history grows")
    growth.legend(fontsize=8)
    figure.suptitle("Persistence: ctxledger vs what its users would use instead (one run)")
    figure.tight_layout()
    figure.savefig(target, dpi=110)
    print(target)


if __name__ == "__main__":
    main()
