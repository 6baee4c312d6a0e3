"""Write the golden corpus of format-3 records: ``golden_v3.msgpack``, ``.json`` and ``.dict``.

Format 3 is what this release records on top of format 2 (``make_golden_v2.py``): the
``record_lost`` event that ``ctxledger salvage`` puts in place of a damaged record, with a
stand-in for a lost message (a tool result, an assistant message making the calls later results
answer, a user message) or without one (a lost record that held no message, or one that read
but could not be folded after an earlier loss).
Run ONCE per released format; while format 3 is unreleased, ``--force`` rewrites it.

    .venv/bin/python tests/data/make_golden_v3.py            # refuses to overwrite
    .venv/bin/python tests/data/make_golden_v3.py --force    # only while format 3 is unreleased
"""

from __future__ import annotations

import sys

from make_golden import _TRACEBACK, write_corpus

from ctxledger.events.types import Event, RecordLost
from ctxledger.messages import Message, ToolCall

_DETAIL = "corrupt record: session 'agent-7' event seq 152: checksum mismatch"


def golden_events() -> list[tuple[str, Event]]:
    """Every shape of ``record_lost``, small and large."""
    return [
        (
            "record_lost.tool_result",
            RecordLost(
                message=Message(
                    role="tool",
                    content="[lost: message 76 could not be read (damaged record, event 152)]",
                    tool_call_id="call-0042",
                    name="bash",
                    seq=76,
                    metadata={"lost": "damaged"},
                ),
                detail=_DETAIL,
            ),
        ),
        (
            "record_lost.assistant_calls",
            RecordLost(
                message=Message(
                    role="assistant",
                    content="[lost: message 75 could not be read (damaged record, event 150)]",
                    tool_calls=(
                        ToolCall("call-0041", "read_file", "{}"),
                        ToolCall("call-0042", "bash", "{}"),
                    ),
                    seq=75,
                    metadata={"lost": "damaged"},
                ),
                detail=_DETAIL,
            ),
        ),
        (
            "record_lost.user",
            RecordLost(
                message=Message(
                    role="user",
                    content="[lost: message 12 could not be read (damaged record, event 30)]",
                    seq=12,
                    metadata={"lost": "damaged"},
                ),
            ),
        ),
        ("record_lost.event", RecordLost(detail=_DETAIL)),
        (
            "record_lost.unfoldable.large",
            RecordLost(
                reason="unfoldable",
                detail="checkpoint 'ckpt-0103' cannot be reverted: it is not active\n" + _TRACEBACK,
                lost_type="checkpoint_reverted",
            ),
        ),
    ]


if __name__ == "__main__":
    sys.exit(write_corpus("golden_v3", golden_events(), sys.argv[1:]))
