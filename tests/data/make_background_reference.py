"""Reference view hashes on the real traces from the code before background compaction.

``prepare_threshold=0`` must reproduce the views served before background compaction existed,
byte for byte. This script drives every trace in ../shared/traces as the trace tests do and
digests the hashes of every served view (``ViewServed.view_hash``, in order) per trace. Each
trace is one session of a real :class:`~ctxledger.Host` on LMDB, stepped as an agent would
(append a step, ``prepare_step``), under the Configs of the trace tests (:data:`CONFIGS`): the
8,000-token Config of ``tests/integration/test_host_concurrent_traces.py`` and the three
32,000-token Configs of ``tests/integration/test_traces_domain.py``. Sessions are driven one
after the other, so ids and clock ticks are deterministic (a view's hash covers its checkpoint
id).

It was run once on commit c4f78f5 (the commit before background compaction), from a temporary
worktree of it::

    git -C /work/main worktree add /tmp/old_c4f78f5 c4f78f5
    PYTHONPATH=/tmp/old_c4f78f5/src .venv/bin/python tests/data/make_background_reference.py \\
        --out tests/data/background_reference.json --commit c4f78f5

``tests/integration/test_background.py`` imports :func:`trace_hashes` and compares the current
code (with ``prepare_threshold=0``) against the committed JSON. The traces themselves are not
committed, only the digests.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import msgspec

from ctxledger import Config, Host, HostOptions, Message
from ctxledger.tooling.traces import read_trace

WINDOW = 32_000
#: name -> (Config settings, provider overhead recorded as usage after each view, or None).
CONFIGS: dict[str, tuple[dict[str, Any], int | None]] = {
    # tests/integration/test_host_concurrent_traces.py
    "host-8k": (
        {"context_window": 8000, "compression_threshold": 0.7, "min_retain_rounds": 2,
         "micro_batch": 4},
        None,
    ),
    # tests/integration/test_traces_domain.py (its three Configs at 32k)
    "32k-defaults": ({"context_window": WINDOW}, None),
    "32k-no-masking": (
        {"context_window": WINDOW, "micro_keep_recent": 1_000_000, "micro_batch": 1}, None
    ),
    "32k-usage-overhead": ({"context_window": WINDOW, "min_retain_rounds": 2}, 1500),
}  # fmt: skip


def config(settings: dict[str, Any]) -> Config:
    """The Config of ``settings`` as c4f78f5 built it, with background compaction off.

    Fields added since c4f78f5 take the value that reproduces the older behaviour, as a Config
    recorded by c4f78f5 decodes: through ``upcast_config`` (schema 3, one mark) where this
    version has it, else their declared default (``Config.NEW_DEFAULTS`` lists them).
    ``prepare_threshold`` is set to 0 explicitly: that is the switch under test.
    """
    try:
        from ctxledger.config import upcast_config
    except ImportError:  # a version before the Config schema (the reference's own, c4f78f5)
        newer = dict(getattr(Config, "NEW_DEFAULTS", {}))
        defaults = dict(zip(Config.__struct_fields__, Config.__struct_defaults__, strict=True))
        extra = {name: defaults[name] for name in newer if name not in settings}
        if "prepare_threshold" in newer:
            extra["prepare_threshold"] = 0.0
        return Config(**settings, **extra)
    raw = upcast_config({**settings, "prepare_threshold": 0.0})
    recorded: Config = msgspec.convert(raw, Config)
    return recorded


def _digest(hashes: list[str]) -> dict[str, Any]:
    return {"views": len(hashes), "sha256": hashlib.sha256("\n".join(hashes).encode()).hexdigest()}


def agent_steps(messages: list[Message]) -> list[list[Message]]:
    """Split a trace right before each assistant message (as test_host_concurrent_traces)."""
    steps: list[list[Message]] = [[]]
    for message in messages:
        if message.role == "assistant" and steps[-1]:
            steps.append([])
        steps[-1].append(message)
    return [step for step in steps if step]


def host_hashes(
    traces: dict[str, list[Message]], settings: dict[str, Any], overhead: int | None, folder: Path
) -> dict[str, list[str]]:
    """Served view hashes of every trace through one real LMDB host, one session at a time."""
    ids = itertools.count(1)
    ticks = itertools.count(1)
    out: dict[str, list[str]] = {}
    with Host.open(
        folder,
        config=config(settings),
        clock=lambda: float(next(ticks)),
        id_factory=lambda: f"id{next(ids)}",
        options=HostOptions(durability="none"),
    ) as host:
        for name, messages in sorted(traces.items()):
            session = host.session(name)
            hashes = []
            for step in agent_steps(messages):
                session.append_many(step)
                view = session.prepare_step()
                hashes.append(view.view_hash)
                if overhead is not None:
                    session.record_usage(view.estimated_tokens + overhead)
            out[name] = hashes
    return out


def trace_hashes(traces: dict[str, list[Message]]) -> dict[str, dict[str, Any]]:
    """``{config name: {trace: {"views": n, "sha256": digest of the served hashes}}}``."""
    result: dict[str, dict[str, Any]] = {}
    for name, (settings, overhead) in CONFIGS.items():
        with tempfile.TemporaryDirectory(prefix="ctxledger-reference-") as folder:
            served = host_hashes(traces, settings, overhead, Path(folder) / "db")
        result[name] = {trace: _digest(hashes) for trace, hashes in served.items()}
    return result


def main() -> int:
    """Write the reference JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=os.environ.get("CTXLEDGER_TRACES", ""))
    parser.add_argument("--out", required=True)
    parser.add_argument("--commit", default="", help="the commit whose code ran (recorded)")
    args = parser.parse_args()
    folder = Path(args.traces or Path(__file__).resolve().parents[3] / "shared" / "traces")
    files = sorted(folder.glob("*.jsonl"))
    if not files:
        print(f"no traces in {folder}", file=sys.stderr)
        return 1
    traces = {path.stem: read_trace(path) for path in files}
    reference = {"commit": args.commit, **trace_hashes(traces)}
    Path(args.out).write_text(json.dumps(reference, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
