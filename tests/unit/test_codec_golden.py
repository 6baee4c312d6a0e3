"""The golden corpus: records written by format 1 must decode to the same values forever."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ctxledger.events.codec import Codec
from ctxledger.events.upcasters import CURRENT_TAGS

DATA = Path(__file__).resolve().parents[1] / "data"
RECORDS: dict[str, bytes] = msgspec.msgpack.decode((DATA / "golden_v1.msgpack").read_bytes())
LISTING: list[dict[str, Any]] = json.loads((DATA / "golden_v1.json").read_text(encoding="utf-8"))
CODEC = Codec({1: (DATA / "golden_v1.dict").read_bytes()})


@pytest.mark.parametrize("entry", LISTING, ids=[entry["name"] for entry in LISTING])
def test_golden_record_decodes_to_its_expected_value(entry: dict[str, Any]) -> None:
    """Each stored record still decodes to the value written down when it was made."""
    event = CODEC.decode(RECORDS[entry["name"]])
    assert json.loads(msgspec.json.encode(event)) == entry["expected"]


@pytest.mark.parametrize("entry", LISTING, ids=[entry["name"] for entry in LISTING])
def test_golden_record_keeps_its_header(entry: dict[str, Any]) -> None:
    """The header of each stored record says what the listing says (compression, dictionary)."""
    record = RECORDS[entry["name"]]
    assert (bool(record[1] & 1), int.from_bytes(record[2:6], "big")) == (
        entry["compressed"],
        entry["dict_id"],
    )


def test_golden_corpus_covers_every_event_type() -> None:
    """Every current tag has at least one golden record."""
    assert {entry["tag"] for entry in LISTING} >= CURRENT_TAGS


def test_golden_corpus_has_raw_compressed_and_dictionary_records() -> None:
    """The corpus pins all three storage variants."""
    variants = {(entry["compressed"], entry["dict_id"] > 0) for entry in LISTING}
    assert variants == {(False, False), (True, False), (True, True)}


def test_golden_corpus_holds_an_old_tag_that_is_upcast() -> None:
    """The old-tag record decodes through its upcaster into a current event."""
    record = RECORDS["message_added_v0.upcast"]
    assert msgspec.msgpack.decode(record[10:])["type"] == "message_added_v0"
    assert type(CODEC.decode(record)).__struct_config__.tag == "message_appended"


def test_listing_and_records_name_the_same_entries() -> None:
    """Every listed record exists and every record is listed."""
    assert sorted(entry["name"] for entry in LISTING) == sorted(RECORDS)
