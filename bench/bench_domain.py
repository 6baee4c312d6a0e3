"""Domain benchmark: the cost of a step must grow with the view, not with history (issue 3).

1. ``build_view`` (and ``plan_compaction``, below threshold and reactive) on histories
   of 1k, 10k and 100k messages with a checkpoint active, so every view holds the same ~60-message
   tail. Medians of repeated runs; the 100k/1k ratio should be at most 2.
2. If ``ExtractiveSummarizer`` is importable: its throughput in MB/s (UTF-8 bytes of message
   content and tool-call arguments) summarising each real trace in ../shared/traces.

Usage::

    .venv/bin/python bench/bench_domain.py              # sizes 1000,10000,100000
    .venv/bin/python bench/bench_domain.py --repeat 400 --sizes 1000,100000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctxledger import Checkpoint, Config, Message, ToolCall
from ctxledger.domain import CharTokenizer, SessionState, build_view, plan_compaction
from ctxledger.events import CheckpointCreated, MessageAppended, MessagePinned, SessionOpened

TAIL = 60  # messages after the checkpoint's cut
TRACES = Path(
    os.environ.get("CTXLEDGER_TRACES", Path(__file__).resolve().parents[2] / "shared" / "traces")
)


def build_state(size: int, config: Config) -> SessionState:
    """A session of ``size`` messages (rounds of tool steps), a checkpoint and two pins."""
    state = SessionState.new("bench", config)
    state.apply(SessionOpened(session_id="bench", config=config))
    state.apply(MessageAppended(message=Message.system("You are a coding agent.").with_seq(1)))
    seq = 1
    call = 0
    while seq < size:
        if (seq - 1) % 40 == 0:
            message = Message.user(f"task {seq}: fix the failing test in module_{seq}.py")
        elif seq % 2 == 0:
            call += 1
            arguments = json.dumps({"command": f"grep -n bug src/module_{seq}.py"})
            message = Message.assistant("Looking.", [ToolCall(f"call_{call}", "bash", arguments)])
        else:
            message = Message.tool(f"line {seq}: " + "output " * 150, f"call_{call}", "bash")
        if message.role == "user" and state.open_tool_calls():
            message = Message.tool("ok", f"call_{call}", "bash")
        seq += 1
        state.apply(MessageAppended(message=message.with_seq(seq)))
    cut = state.boundary_at_or_before(size - TAIL) or 1
    state.apply(
        CheckpointCreated(
            compaction_id="c",
            checkpoint=Checkpoint(
                id="cp",
                summary="Summary of earlier work. " * 100,
                retain_from_seq=cut,
                covers_through_seq=cut - 1,
                reason="threshold_exceeded",
            ),
        )
    )
    state.apply(MessagePinned(seq=2))
    state.apply(MessagePinned(seq=size // 2))
    return state


def median_seconds(function: Callable[[], Any], repeat: int) -> float:
    """Median wall time of ``repeat`` calls, after a warm-up call."""
    function()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_views(sizes: list[int], repeat: int) -> dict[str, Any]:
    """Median build_view and plan_compaction times per history size."""
    config = Config(context_window=128_000)
    tokenizer = CharTokenizer()
    rows: dict[str, Any] = {}
    for size in sizes:
        state = build_state(size, config)
        view = build_view(state, tokenizer=tokenizer)
        rows[str(size)] = {
            "view_messages": len(view.messages),
            "view_tokens": view.view_tokens,
            "build_view_us": median_seconds(
                lambda s=state: build_view(s, tokenizer=tokenizer), repeat
            )
            * 1e6,
            "plan_us": median_seconds(
                lambda s=state: plan_compaction(s, tokenizer=tokenizer), repeat
            )
            * 1e6,
            # A reactive plan always searches the tail for a step-level cut: the full planner.
            "plan_reactive_us": median_seconds(
                lambda s=state: plan_compaction(s, tokenizer=tokenizer, trigger="prompt_too_long"),
                repeat,
            )
            * 1e6,
        }
        print(
            f"  {size:>7} messages: view {len(view.messages)} msgs / {view.view_tokens} tokens; "
            f"build_view {rows[str(size)]['build_view_us']:.1f} us, "
            f"plan_compaction {rows[str(size)]['plan_us']:.1f} us "
            f"(reactive, cut searched: {rows[str(size)]['plan_reactive_us']:.1f} us)"
        )
    small, large = str(min(sizes)), str(max(sizes))
    for key in ("build_view_us", "plan_us", "plan_reactive_us"):
        ratio = rows[large][key] / rows[small][key]
        rows[f"ratio_{key}_{large}_over_{small}"] = ratio
        print(f"  ratio {large}/{small} for {key[:-3]}: {ratio:.2f} (target <= 2)")
    return rows


def bench_summarizer(repeat: int) -> dict[str, Any] | None:
    """ExtractiveSummarizer throughput on every trace, in MB/s."""
    try:
        from ctxledger.summarizers import ExtractiveSummarizer  # type: ignore[attr-defined]
    except ImportError:
        try:
            from ctxledger.summarizers.extractive import ExtractiveSummarizer
        except ImportError:
            print("  ExtractiveSummarizer is not importable: skipped")
            return None
    if not TRACES.is_dir():
        print(f"  traces not found in {TRACES}: skipped")
        return None
    from ctxledger import SummaryRequest
    from ctxledger.tooling.traces import read_trace

    summarizer = ExtractiveSummarizer()
    requests = []
    total_bytes = 0
    for path in sorted(TRACES.glob("*.jsonl")):
        messages = tuple(m.with_seq(i + 1) for i, m in enumerate(read_trace(path)))
        requests.append(SummaryRequest(messages=messages, max_chars=7680))
        total_bytes += sum(
            len(m.content.encode()) + sum(len(c.arguments.encode()) for c in m.tool_calls)
            for m in messages
        )

    def run_all() -> None:
        for request in requests:
            summarizer(request)

    seconds = median_seconds(run_all, repeat)
    rate = total_bytes / seconds / 1e6
    print(
        f"  {len(requests)} traces, {total_bytes / 1e6:.2f} MB: {seconds:.3f} s -> {rate:.1f} MB/s"
    )
    return {"traces": len(requests), "bytes": total_bytes, "seconds": seconds, "mb_per_s": rate}


def main() -> None:
    """Run the benchmark and print (optionally save) the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeat", type=int, default=200, help="timed runs per figure")
    parser.add_argument("--summarizer-repeat", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    print(f"build_view / plan_compaction with a checkpoint active (median of {args.repeat}):")
    results: dict[str, Any] = {"views": bench_views(sizes, args.repeat)}
    print(f"ExtractiveSummarizer throughput (median of {args.summarizer_repeat}):")
    results["summarizer"] = bench_summarizer(args.summarizer_repeat)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
