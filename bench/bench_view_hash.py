"""What hashing a served view costs a step (issue 28): version 2 resumed, against whole views.

A step adds two messages (a tool call and its ~400-byte result) to a view of ``n`` messages.
For each ``n`` the table gives the median microseconds of ``kept_hash_v2`` resuming from what
the view of ``n`` messages kept (what the history actor and ``DomainSession`` do for a Config
of schema 6), of ``view_hash(version=2)`` hashing the whole view, and of
``view_hash(version=1)`` (schema 5 and older, which cannot resume: its count comes first).
``KEEP_DIGESTS_FROM`` (ctxledger.domain.view_hashing) is chosen from it.

Usage::

    .venv/bin/python bench/bench_view_hash.py              # 400 repetitions per size
    .venv/bin/python bench/bench_view_hash.py --reps 50
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench_args import positive_int

from ctxledger import Message, ToolCall
from ctxledger.domain.view_hashing import kept_hash_v2, view_hash

SIZES = (8, 16, 32, 64, 128, 256, 512)


def messages(count: int) -> list[Message]:
    """``count`` messages: tool calls and their ~400-byte results, alternating."""
    out = []
    for index in range(count):
        if index % 2 == 0:
            call = ToolCall(f"c{index}", "read_file", '{"path": "src/pkg/mod.py"}')
            text = "Reading the module. " * 3
            out.append(Message(role="assistant", content=text, tool_calls=(call,), seq=index + 1))
        else:
            text = "def f(x):\n    return x * 2\n" * 14
            call_id = f"c{index - 1}"
            out.append(
                Message(
                    role="tool", content=text, tool_call_id=call_id, name="read_file", seq=index + 1
                )
            )
    return out


def row(count: int, reps: int, pool: list[Message]) -> tuple[float, float, float]:
    """Median µs of a step onto a view of ``count`` messages: resumed, whole v2, whole v1."""
    before, after = pool[:count], pool[: count + 2]
    _, kept = kept_hash_v2("full_history", None, before, None)
    resumed, whole, first = [], [], []
    for _ in range(reps):
        started = time.perf_counter()
        kept_hash_v2("full_history", None, after, kept)
        resumed.append(time.perf_counter() - started)
        started = time.perf_counter()
        view_hash("full_history", None, after, version=2)
        whole.append(time.perf_counter() - started)
        started = time.perf_counter()
        view_hash("full_history", None, after, version=1)
        first.append(time.perf_counter() - started)
    median = statistics.median
    return median(resumed) * 1e6, median(whole) * 1e6, median(first) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=positive_int, default=400, help="repetitions per size (400)")
    args = parser.parse_args()
    pool = messages(max(SIZES) + 2)
    print(f"a step of two messages onto a view of n, median of {args.reps} (µs)\n")
    print("| n | version 2 resumed | version 2 whole | version 1 whole |")
    print("|---:|---:|---:|---:|")
    for count in SIZES:
        resumed, whole, first = row(count, args.reps, pool)
        print(f"| {count} | {resumed:.1f} | {whole:.1f} | {first:.1f} |")


if __name__ == "__main__":
    main()
