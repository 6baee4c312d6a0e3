"""The golden corpus: records written by format 1 must decode to the same values forever.

``golden_v1`` holds every event type of the first release; ``golden_v1b`` the event type and
fields added by issue 16. A record written before a field existed decodes to the value that
field's absence means (:data:`ADDED_AFTER_V1`), and to exactly its written value elsewhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ctxledger.config import Config
from ctxledger.events.codec import Codec
from ctxledger.events.upcasters import CURRENT_TAGS

DATA = Path(__file__).resolve().parents[1] / "data"
RECORDS: dict[str, bytes] = msgspec.msgpack.decode((DATA / "golden_v1.msgpack").read_bytes())
LISTING: list[dict[str, Any]] = json.loads((DATA / "golden_v1.json").read_text(encoding="utf-8"))
CODEC = Codec({1: (DATA / "golden_v1.dict").read_bytes()})
LATER_RECORDS: dict[str, bytes] = msgspec.msgpack.decode((DATA / "golden_v1b.msgpack").read_bytes())
LATER_LISTING: list[dict[str, Any]] = json.loads(
    (DATA / "golden_v1b.json").read_text(encoding="utf-8")
)

#: Fields added after ``golden_v1`` was written, and the value a record without them decodes to
#: (the behaviour of the version that wrote it: no fact block, no metadata).
ADDED_AFTER_V1: dict[str, object] = {
    "fact_index_chars": 0,  # Config
    "facts": "",  # Checkpoint
    "summarizer": "",
    "summary_seconds": 0.0,
    "input_chars": 0,
    "summarizer_calls": 0,
}


def _old_record_matches(decoded: Any, expected: Any, where: str = "") -> None:
    """``decoded`` equals ``expected``; keys it has beyond those are added fields at their
    old-record values."""
    if isinstance(expected, dict):
        assert isinstance(decoded, dict), where
        for key, value in decoded.items():
            if key in expected:
                _old_record_matches(value, expected[key], f"{where}.{key}")
            else:
                assert key in ADDED_AFTER_V1, f"{where}.{key} is not in the record"
                assert value == ADDED_AFTER_V1[key], f"{where}.{key} = {value!r}"
        assert set(expected) <= set(decoded), where
    elif isinstance(expected, list):
        assert isinstance(decoded, list) and len(decoded) == len(expected), where
        for index, (one, other) in enumerate(zip(decoded, expected, strict=True)):
            _old_record_matches(one, other, f"{where}[{index}]")
    else:
        assert decoded == expected, where


@pytest.mark.parametrize("entry", LISTING, ids=[entry["name"] for entry in LISTING])
def test_golden_record_decodes_to_its_expected_value(entry: dict[str, Any]) -> None:
    """Each stored record still decodes to the value written down when it was made."""
    event = CODEC.decode(RECORDS[entry["name"]])
    _old_record_matches(json.loads(msgspec.json.encode(event)), entry["expected"])


@pytest.mark.parametrize("entry", LATER_LISTING, ids=[entry["name"] for entry in LATER_LISTING])
def test_later_golden_record_decodes_to_its_expected_value(entry: dict[str, Any]) -> None:
    """Each record of the later corpus decodes to exactly the value written down."""
    event = CODEC.decode(LATER_RECORDS[entry["name"]])
    assert json.loads(msgspec.json.encode(event)) == entry["expected"]


def test_old_config_decodes_with_the_fact_block_off() -> None:
    """A Config recorded before fact_index_chars existed decodes to 0, a new one has it on."""
    opened = CODEC.decode(RECORDS["session_opened"])
    assert opened.config.fact_index_chars == 0  # type: ignore[union-attr]
    assert Config().fact_index_chars > 0


@pytest.mark.parametrize(
    ("listing", "records"), [(LISTING, RECORDS), (LATER_LISTING, LATER_RECORDS)]
)
def test_golden_record_keeps_its_header(
    listing: list[dict[str, Any]], records: dict[str, bytes]
) -> None:
    """The header of each stored record says what the listing says (compression, dictionary)."""
    for entry in listing:
        record = records[entry["name"]]
        assert (bool(record[1] & 1), int.from_bytes(record[2:6], "big")) == (
            entry["compressed"],
            entry["dict_id"],
        )


def test_golden_corpus_covers_every_event_type() -> None:
    """Every current tag has at least one golden record."""
    assert {entry["tag"] for entry in [*LISTING, *LATER_LISTING]} >= CURRENT_TAGS


def test_golden_corpus_has_raw_compressed_and_dictionary_records() -> None:
    """The corpus pins all three storage variants."""
    variants = {(entry["compressed"], entry["dict_id"] > 0) for entry in LISTING}
    assert variants == {(False, False), (True, False), (True, True)}


def test_golden_corpus_holds_an_old_tag_that_is_upcast() -> None:
    """The old-tag record decodes through its upcaster into a current event."""
    record = RECORDS["message_added_v0.upcast"]
    assert msgspec.msgpack.decode(record[10:])["type"] == "message_added_v0"
    assert type(CODEC.decode(record)).__struct_config__.tag == "message_appended"


@pytest.mark.parametrize(
    ("listing", "records"), [(LISTING, RECORDS), (LATER_LISTING, LATER_RECORDS)]
)
def test_listing_and_records_name_the_same_entries(
    listing: list[dict[str, Any]], records: dict[str, bytes]
) -> None:
    """Every listed record exists and every record is listed."""
    assert sorted(entry["name"] for entry in listing) == sorted(records)
