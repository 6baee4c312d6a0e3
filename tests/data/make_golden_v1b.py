"""Write ``golden_v1b.msgpack`` and ``.json``: format-1 records of what issue 16 added.

The first corpus (``make_golden.py``, ``golden_v1.*``) is never rewritten; events and fields
added later get a corpus of their own, written once by the version that added them:
``CheckpointReverted``, the checkpoint's fact block and compaction metadata
(``facts``, ``summarizer``, ``summary_seconds``, ``input_chars``, ``summarizer_calls``) and
``Config.fact_index_chars``. ``tests/unit/test_codec_golden.py`` reads every corpus.

    .venv/bin/python tests/data/make_golden_v1b.py            # refuses to overwrite

Files (the same layout as ``golden_v1``; no dictionary records):
    golden_v1b.msgpack  a msgpack map: record name -> framed record bytes
    golden_v1b.json     per record: name, tag, compressed, dict_id, and the expected decoded value
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config
from ctxledger.events.codec import Codec
from ctxledger.events.types import CheckpointCreated, CheckpointReverted, Event, SessionOpened

HERE = Path(__file__).resolve().parent
NAME = "golden_v1b"

_FACTS = (
    "Facts from compacted history (newest first; #N is the message seq; $ command, ! error, "
    "> user request, `name`):\n"
    + "\n".join(f"#{200 - n} src/pkg/module_{n:03d}.py" for n in range(40))
    + "\n#120 $ python -m pytest tests/test_dateparse.py -x\n"
    "#119 ! E AssertionError: assert parse('-P1D') == timedelta(days=-1)"
)
_PREVIOUS = Checkpoint(
    id="ckpt-0101",
    summary="Summary of messages 2-80\n## Errors\n- [#44] pytest: exit 1 | E IndexError",
    retain_from_seq=81,
    covers_through_seq=80,
    reason="threshold_exceeded",
    created_at=1795900200.0,
    tokens_before=30_000,
    tokens_after=9_000,
)


def golden_events() -> list[tuple[str, Event]]:
    """The new event type, and the new fields at values other than their defaults."""
    return [
        (
            "session_opened.fact_index",
            SessionOpened(
                session_id="sess-9b1c",
                config=Config(context_window=32_000, fact_index_chars=2500),
                created_at=1795900300.5,
            ),
        ),
        (
            "checkpoint_created.metadata.large",
            CheckpointCreated(
                compaction_id="cmp-0102",
                checkpoint=Checkpoint(
                    id="ckpt-0102",
                    summary="Summary of messages 2-200\n## Commands\n- python -m pytest (x12)",
                    retain_from_seq=201,
                    covers_through_seq=200,
                    reason="threshold_exceeded",
                    created_at=1795900400.25,
                    previous_checkpoint_id="ckpt-0101",
                    tokens_before=31_000,
                    tokens_after=12_500,
                    input_hash="7c1e" * 16,
                    facts=_FACTS,
                    summarizer="OpenAIChatSummarizer:gpt-4o-mini",
                    summary_seconds=12.75,
                    input_chars=184_233,
                    summarizer_calls=2,
                ),
            ),
        ),
        (
            "checkpoint_reverted",
            CheckpointReverted(
                checkpoint_id="ckpt-0102", restored=_PREVIOUS, reason="the summary lost the task"
            ),
        ),
    ]


def main(argv: list[str]) -> int:
    """Write the corpus files (refusing to overwrite)."""
    targets = [HERE / f"{NAME}.{ext}" for ext in ("msgpack", "json")]
    if any(path.exists() for path in targets):
        print(f"{NAME} exists; it must never change once written")
        return 1
    codec = Codec()
    records: dict[str, bytes] = {}
    listing: list[dict[str, Any]] = []
    for name, event in golden_events():
        record = codec.encode(event)
        records[name] = record
        listing.append(
            {
                "name": name,
                "tag": type(event).__struct_config__.tag,
                "compressed": bool(record[1] & 1),
                "dict_id": int.from_bytes(record[2:6], "big"),
                "expected": json.loads(msgspec.json.encode(event)),
            }
        )
    targets[0].write_bytes(msgspec.msgpack.encode(records))
    targets[1].write_text(json.dumps(listing, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {len(records)} records")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
