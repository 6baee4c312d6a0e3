"""Write the golden corpus of format-1 records: ``golden_v1.msgpack``, ``.json`` and ``.dict``.

Run ONCE per released format, never again for an existing one: the point of the corpus is that
bytes written by an old ctxledger keep decoding to the same values forever
(``tests/unit/test_codec_golden.py``). To freeze a new format, copy this script to
``make_golden_v2.py`` and write ``golden_v2.*`` next to these files.

    .venv/bin/python tests/data/make_golden.py            # refuses to overwrite
    .venv/bin/python tests/data/make_golden.py --force    # only while format 1 is unreleased
    .venv/bin/python tests/data/make_golden.py --add      # records for new event types only

``--add`` leaves every existing record byte for byte and appends the records of
:func:`golden_events` that the corpus lacks (a new event type in the same format), raw.

Files:
    golden_v1.msgpack  a msgpack map: record name -> framed record bytes
    golden_v1.json     per record: name, tag, compressed, dict_id, and the expected decoded value
                       (``msgspec.to_builtins`` of the event, through JSON)
    golden_v1.dict     the zstd dictionary (id 1) that the ``*.dict`` records were compressed with
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec
import zstandard

from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config
from ctxledger.events.codec import Codec, encode_payload
from ctxledger.events.types import (
    CheckpointCreated,
    CompactionFailed,
    CompactionStarted,
    ConfigChanged,
    Event,
    HistoryCleared,
    MessageAppended,
    MessagePinned,
    MessageRetracted,
    SessionForked,
    SessionOpened,
    ToolResultSynthesized,
    TranscriptExported,
    UsageReported,
    ViewServed,
)
from ctxledger.messages import Message, ToolCall

HERE = Path(__file__).resolve().parent
DICT_ID = 1

_LISTING = "\n".join(
    f"-rw-r--r--  1 dev  staff  {1000 + 37 * n:>6} Nov 30 00:{n % 60:02d} src/module_{n:03d}.py"
    for n in range(120)
)
_TRACEBACK = (
    "\n".join(
        f'  File "/srv/agent/summarizers/http.py", line {100 + n}, in call_{n}\n'
        f"    response = client.post(url, json=payload, timeout={n}.0)"
        for n in range(40)
    )
    + "\nhttpx.ReadTimeout: timed out"
)
_SUMMARY = (
    "## Goal\nFix the failing date parsing in `utils/dateparse.py` for ISO 8601 durations.\n"
    "## Progress\n"
    + "".join(
        f"- Step {n}: inspected `tests/test_dateparse.py::test_case_{n}`; "
        f"the regex drops the sign of negative durations ({n} cases).\n"
        for n in range(60)
    )
    + "## Next\nRun the full suite, then update the changelog."
)
_CONFIG = Config(
    context_window=200_000,
    compression_threshold=0.75,
    min_retain_rounds=4,
    micro_preserve_tools=("read_file", "str_replace_based_edit_tool"),
)


def golden_events() -> list[tuple[str, Event]]:
    """Every event type at least once, small (raw) and, where natural, large (compressed)."""
    call = ToolCall("toolu_01A", "bash", '{"command": "ls -la src/", "timeout": 30}')
    return [
        (
            "session_opened",
            SessionOpened(session_id="sess-7f3a", config=_CONFIG, created_at=1795900000.25),
        ),
        (
            "message_appended.system",
            MessageAppended(message=Message.system("You are a careful coding agent.").with_seq(1)),
        ),
        (
            "message_appended.user",
            MessageAppended(
                message=Message.user("The date parser rejects '-P1D'. Please fix it.").with_seq(2)
            ),
        ),
        (
            "message_appended.assistant_call",
            MessageAppended(
                message=Message.assistant("Let me look at the source tree.", [call]).with_seq(3)
            ),
        ),
        (
            "message_appended.large",
            MessageAppended(message=Message.tool(_LISTING, "toolu_01A", "bash").with_seq(4)),
        ),
        (
            "message_appended.metadata",
            MessageAppended(
                message=msgspec.structs.replace(
                    Message.user("continue"),
                    seq=5,
                    metadata={"source": "cli", "attempt": 2, "tags": ["a", "b"]},
                )
            ),
        ),
        (
            "usage_reported",
            UsageReported(prompt_tokens=18234, completion_tokens=412, through_seq=4),
        ),
        (
            "compaction_started",
            CompactionStarted(
                compaction_id="cmp-0001",
                reason="manual",
                retain_from_seq=40,
                covers_through_seq=39,
                estimated_tokens=101_000,
                focus="keep the API signatures",
                attempt=1,
            ),
        ),
        (
            "checkpoint_created.large",
            CheckpointCreated(
                compaction_id="cmp-0001",
                checkpoint=Checkpoint(
                    id="ckpt-0001",
                    summary=_SUMMARY,
                    retain_from_seq=40,
                    covers_through_seq=39,
                    reason="threshold_exceeded",
                    focus=None,
                    created_at=1795900100.5,
                    previous_checkpoint_id=None,
                    tokens_before=101_000,
                    tokens_after=23_500,
                    input_hash="9f2c" * 16,
                ),
            ),
        ),
        (
            "checkpoint_created.small",
            CheckpointCreated(
                compaction_id="cmp-0002",
                checkpoint=Checkpoint(
                    id="ckpt-0002",
                    summary="Fixed the sign handling; tests pass.",
                    retain_from_seq=61,
                    covers_through_seq=60,
                    reason="prompt_too_long",
                    previous_checkpoint_id="ckpt-0001",
                ),
            ),
        ),
        (
            "compaction_failed",
            CompactionFailed(
                compaction_id="cmp-0003",
                reason="summary_unavailable",
                detail="summariser timed out after 120 s",
            ),
        ),
        ("compaction_failed.large", CompactionFailed(compaction_id="cmp-0004", detail=_TRACEBACK)),
        (
            "tool_result_synthesized",
            ToolResultSynthesized(
                message=Message.tool(
                    "[interrupted: no result was recorded before the crash]", "toolu_09Z", "bash"
                ).with_seq(77)
            ),
        ),
        (
            "tool_result_synthesized.large",
            ToolResultSynthesized(
                message=Message.tool(_LISTING, "toolu_10Q", "bash").with_seq(78),
                reason="interrupted",
            ),
        ),
        (
            "view_served",
            ViewServed(
                through_seq=78,
                estimated_tokens=23_912,
                view_hash="ab12" * 16,
                checkpoint_id="ckpt-0002",
                message_count=31,
            ),
        ),
        ("session_forked", SessionForked(parent_id="sess-7f3a", at_seq=40, parent_event_seq=95)),
        (
            "transcript_exported",
            TranscriptExported(
                path="/var/lib/agent/exports/sess-7f3a.jsonl",
                messages=78,
                checkpoints=2,
                sha256="e3b0" * 16,
            ),
        ),
        ("config_changed", ConfigChanged(config=_CONFIG.replace(compression_threshold=0.6))),
        ("message_pinned", MessagePinned(seq=2)),
        ("message_retracted", MessageRetracted(seq=78)),
        ("history_cleared", HistoryCleared(through_seq=77)),
    ]


def main(argv: list[str]) -> int:
    """Write the corpus files (refusing to overwrite without ``--force``)."""
    targets = [HERE / f"golden_v1.{ext}" for ext in ("msgpack", "json", "dict")]
    if "--add" in argv:
        return add_missing(targets)
    if any(path.exists() for path in targets) and "--force" not in argv:
        print("golden_v1 exists; it must never change once released (--force to overwrite)")
        return 1
    events = golden_events()
    samples = [encode_payload(event) for _, event in events] * 40
    dictionary = zstandard.train_dictionary(4096, samples).as_bytes()
    plain, with_dict = Codec(), Codec({DICT_ID: dictionary}, active=DICT_ID)
    records: dict[str, bytes] = {}
    listing: list[dict[str, Any]] = []
    for name, event in events:
        variants = [(name, plain.encode(event))]
        if name.endswith(".large"):
            variants.append((f"{name}.dict", with_dict.encode(event)))
        for variant, record in variants:
            records[variant] = record
            listing.append(_describe(variant, event, record))
    old = msgspec.msgpack.encode(
        {"type": "message_added_v0", "role": "user", "content": "hello from v0", "seq": 9}
    )
    records["message_added_v0.upcast"] = plain.frame(old)
    listing.append(
        _describe(
            "message_added_v0.upcast",
            MessageAppended(message=Message.user("hello from v0").with_seq(9)),
            records["message_added_v0.upcast"],
        )
    )
    targets[0].write_bytes(msgspec.msgpack.encode(records))
    targets[1].write_text(json.dumps(listing, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    targets[2].write_bytes(dictionary)
    print(f"wrote {len(records)} records")
    return 0


def add_missing(targets: list[Path]) -> int:
    """Append the records of event types the corpus lacks; existing records stay as they are."""
    records: dict[str, bytes] = msgspec.msgpack.decode(targets[0].read_bytes())
    listing: list[dict[str, Any]] = json.loads(targets[1].read_text(encoding="utf-8"))
    plain = Codec()
    added = 0
    for name, event in golden_events():
        if name in records:
            continue
        records[name] = plain.encode(event)
        listing.append(_describe(name, event, records[name]))
        added += 1
    targets[0].write_bytes(msgspec.msgpack.encode(records))
    targets[1].write_text(json.dumps(listing, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"added {added} records")
    return 0


def _describe(name: str, event: Event, record: bytes) -> dict[str, Any]:
    return {
        "name": name,
        "tag": type(event).__struct_config__.tag,
        "compressed": bool(record[1] & 1),
        "dict_id": int.from_bytes(record[2:6], "big"),
        "expected": json.loads(msgspec.json.encode(event)),
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
