"""The self-calibrating estimate on the real traces, against a known (synthetic) tokenizer.

Replays every trace in ../shared/traces through a :class:`~ctxledger.testing.DomainSession`
(32,000-token window, the offline extractive summariser), serving a view before each assistant
message. After each view, a "provider" counts the view with a deterministic synthetic tokenizer
(the true count, plus a fixed overhead per message and per call as providers add for roles and
tool schemas) and the session records that as its usage report, so the session calibrates as it
would in production. For every view, the estimate of the view's own tokens is compared with the
true count:

* ``fixed // 3``: a session with calibration off (``calibrate_after_reports=0``);
* ``calibrated``: a session with the default (the learnt ratio once enough reports paired).

Each is measured twice: the tokenizer's count of the view alone (what planning and a view after
a checkpoint rely on), and the decision's estimate (which also uses the provider's last figure
while it is current). Reported: median and p90 absolute error, and the share of views
*under*-counted (the dangerous side: an under-counted view may overflow). Usage::

    .venv/bin/python bench/calibration.py [--traces DIR] [--out bench/results/calibration.md]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from ctxledger import Config
from ctxledger.messages import Message
from ctxledger.summarizers.extractive import ExtractiveSummarizer
from ctxledger.testing import DomainSession
from ctxledger.tooling.traces import read_trace

HERE = Path(__file__).resolve().parent
DEFAULT_TRACES = Path(os.environ.get("CTXLEDGER_TRACES", HERE.parents[1] / "shared" / "traces"))
WINDOW = 32_000
PER_MESSAGE = 4  # role and framing tokens a provider adds per message
PER_CALL = 300  # tool schemas and the like, per call

_WORDISH = re.compile(r"[^\W\d_]{1,8}|\d{1,3}|[^\w\s]|\s+(?=\S)")
_CODEISH = re.compile(r"[^\W\d_]{1,4}|\d|[^\w\s]")


def _counter(pattern: re.Pattern[str]) -> Callable[[Sequence[Message]], int]:
    def count(messages: Sequence[Message]) -> int:
        total = PER_CALL
        for message in messages:
            text = message.content + "".join(c.name + c.arguments for c in message.tool_calls)
            total += len(pattern.findall(text)) + PER_MESSAGE
        return total

    return count


#: Synthetic tokenizers: "bpe-like" (letters in pieces of up to 8, numbers up to 3 digits, each
#: punctuation mark, runs of spaces), "dense" (pieces of up to 4 letters, each digit).
TOKENIZERS = {"bpe-like": _counter(_WORDISH), "dense": _counter(_CODEISH)}


def run_trace(
    messages: list[Message], true_count: Callable[[Sequence[Message]], int], calibrate: int
) -> list[tuple[int, int, int]]:
    """Return (true, view tokens, estimate) of every view served on one trace.

    View tokens are the session tokenizer's count of the view alone; the estimate is the
    decision's (DESIGN §2: the view, or the provider's last figure plus what came since).
    """
    config = Config(context_window=WINDOW, calibrate_after_reports=calibrate)
    session = DomainSession(config, summarizer=ExtractiveSummarizer())
    out: list[tuple[int, int, int]] = []
    for message in [*messages, None]:
        if message is None or (message.role == "assistant" and session.state.last_seq):
            view = session.step()
            true = true_count(view.messages)
            out.append((true, view.view_tokens, view.estimated_tokens))
            session.record_usage(true, 100)
        if message is not None:
            session.append(message)
    return out


def _error_stats(pairs: list[tuple[int, int]]) -> dict[str, float]:
    errors = sorted(abs(est - true) / true for true, est in pairs)
    under = sum(1 for true, est in pairs if est < true) / len(pairs)
    return {
        "median": statistics.median(errors),
        "p90": errors[int(0.9 * (len(errors) - 1))],
        "under": under,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    parser.add_argument("--out", type=Path, default=None, help="write the table here too")
    args = parser.parse_args(argv)
    paths = sorted(args.traces.glob("*.jsonl"))
    if not paths:
        print(f"no traces in {args.traces}", file=sys.stderr)
        return 1
    traces = {path.stem: read_trace(path) for path in paths}
    lines = [
        f"Estimate error per served view, {len(traces)} traces, window {WINDOW:,}, "
        f"calibrate_after_reports={Config().calibrate_after_reports} (command: "
        "`.venv/bin/python bench/calibration.py`)",
        "",
        "| true tokenizer | session tokenizer | views | view count: median abs error | p90 | "
        "under-counted | decision estimate: median abs error | p90 | under-counted |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, count in TOKENIZERS.items():
        for label, calibrate in (
            ("fixed // 3", 0),
            ("calibrated", Config().calibrate_after_reports),
        ):
            rows = [
                row for messages in traces.values() for row in run_trace(messages, count, calibrate)
            ]
            view = _error_stats([(true, est) for true, est, _ in rows])
            decision = _error_stats([(true, est) for true, _, est in rows])
            lines.append(
                f"| {name} | {label} | {len(rows):,} | {view['median']:.1%} | {view['p90']:.1%} "
                f"| {view['under']:.1%} | {decision['median']:.1%} | {decision['p90']:.1%} | "
                f"{decision['under']:.1%} |"
            )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
