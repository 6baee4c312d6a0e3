"""The golden corpora: records written by each format must decode to the same values forever.

``golden_v1`` holds every event type of the first release, ``golden_v2`` what the second
added (events and fields), ``golden_v3`` the ``record_lost`` event of salvage. A field added to
an event type later (always with a default) shows up in the decoded value of an older record
with the value its absence means (the behaviour of the version that wrote it):
:data:`ADDED_FIELDS` lists each such field per corpus, so that the values written down when a
record was made are checked whole and nothing else changes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ctxledger.config import Config
from ctxledger.events import ConfigChanged, SessionOpened
from ctxledger.events.codec import Codec
from ctxledger.events.upcasters import CURRENT_TAGS

DATA = Path(__file__).resolve().parents[1] / "data"
CORPORA = sorted(path.stem for path in DATA.glob("golden_v*.msgpack"))
RECORDS: dict[str, dict[str, bytes]] = {
    corpus: msgspec.msgpack.decode((DATA / f"{corpus}.msgpack").read_bytes()) for corpus in CORPORA
}
CODECS = {corpus: Codec({1: (DATA / f"{corpus}.dict").read_bytes()}) for corpus in CORPORA}
ENTRIES: list[tuple[str, dict[str, Any]]] = [
    (corpus, entry)
    for corpus in CORPORA
    for entry in json.loads((DATA / f"{corpus}.json").read_text(encoding="utf-8"))
]
IDS = [f"{corpus}:{entry['name']}" for corpus, entry in ENTRIES]
# The format-1 corpus, which the tests below that are about format 1 only look at.
RECORDS_V1 = RECORDS["golden_v1"]
LISTING = [entry for corpus, entry in ENTRIES if corpus == "golden_v1"]

#: Fields added after a corpus was written, by name (at any depth: an event, its Config, its
#: Checkpoint), with the value a record written without them decodes to.
ADDED_FIELDS: dict[str, dict[str, object]] = {
    "golden_v1": {
        "prepare_threshold": 0.0,  # Config: no background compaction
        "fact_index_chars": 0,  # Config: no fact block
        "background": False,  # CompactionStarted, CompactionFailed
        "prepared": False,  # CheckpointCreated
        "facts": "",  # Checkpoint: no fact block, no metadata
        "summarizer": "",
        "summary_seconds": 0.0,
        "input_chars": 0,
        "summarizer_calls": 0,
        "max_total_tokens": 0,  # Config: no cap
        "calibrate_after_reports": 0,  # Config: no calibration
        "min_compaction_gain_tokens": 0,  # Config: no gain rule
        "floor_guard": False,  # Config: no floor rule
        "summary_result_chars": 0,  # Config: the summariser gets every message raw
        "cached_tokens": 0,  # UsageReported
        "cache_write_tokens": 0,
        "view_chars": 0,  # ViewServed
        "prefix_kept_tokens": 0,  # Checkpoint
        "remask": None,  # ViewServed: no re-mask recorded
        "compaction_target": 0.0,  # Config: one mark (the schema before the two marks)
        "schema_version": 3,  # Config: recorded before the schema version, upcast to 3
    },
    "golden_v2": {
        "remask": None,  # ViewServed: no re-mask recorded
        "mask_count": None,  # MessageRetracted: the masking boundary left as it is
        "compaction_target": 0.0,  # Config: one mark (the schema before the two marks)
        "schema_version": 3,  # Config: recorded before the schema version, upcast to 3
    },
    "golden_v3": {},
}


def _matches(corpus: str, decoded: Any, expected: Any, where: str = "") -> None:
    """``decoded`` equals ``expected``; keys beyond those are added fields at their old values."""
    if isinstance(expected, dict):
        assert isinstance(decoded, dict), where
        added = ADDED_FIELDS[corpus]
        for key, value in decoded.items():
            if key in expected:
                _matches(corpus, value, expected[key], f"{where}.{key}")
            else:
                assert key in added, f"{where}.{key} is not in the record"
                assert value == added[key], f"{where}.{key} = {value!r}"
        assert set(expected) <= set(decoded), where
    elif isinstance(expected, list):
        assert isinstance(decoded, list) and len(decoded) == len(expected), where
        for index, (one, other) in enumerate(zip(decoded, expected, strict=True)):
            _matches(corpus, one, other, f"{where}[{index}]")
    else:
        assert decoded == expected, where


@pytest.mark.parametrize(("corpus", "entry"), ENTRIES, ids=IDS)
def test_golden_record_decodes_to_its_expected_value(corpus: str, entry: dict[str, Any]) -> None:
    """Each stored record still decodes to the value written down when it was made."""
    event = CODECS[corpus].decode(RECORDS[corpus][entry["name"]])
    _matches(corpus, json.loads(msgspec.json.encode(event)), entry["expected"])


def test_old_configs_decode_with_the_old_behaviour() -> None:
    """A Config recorded before a field existed decodes to the value that reproduces it."""
    for name in ("session_opened", "config_changed"):
        event = CODECS["golden_v1"].decode(RECORDS_V1[name])
        assert isinstance(event, SessionOpened | ConfigChanged)
        assert event.config.prepare_threshold == 0.0  # off, as it was recorded
        assert event.config.fact_index_chars == 0
        assert event.config.legacy and event.config.compaction_target == 0.0  # one mark
    new = Config()
    assert new.sizes().prepare_tokens > 0  # a new Config: on (the prepare point derived)
    assert new.sizes().facts_chars > 0  # the fact block's room, derived from the window
    assert not new.legacy and new.sizes().target_tokens < new.threshold_tokens
    event = CODECS["golden_v2"].decode(RECORDS["golden_v2"]["session_opened.v2"])
    assert isinstance(event, SessionOpened)
    assert event.config.prepare_threshold == 0.7


@pytest.mark.parametrize(("corpus", "entry"), ENTRIES, ids=IDS)
def test_golden_record_keeps_its_header(corpus: str, entry: dict[str, Any]) -> None:
    """The header of each stored record says what the listing says (compression, dictionary)."""
    record = RECORDS[corpus][entry["name"]]
    assert (bool(record[1] & 1), int.from_bytes(record[2:6], "big")) == (
        entry["compressed"],
        entry["dict_id"],
    )


def test_golden_corpus_covers_every_event_type() -> None:
    """Every current tag has at least one golden record."""
    assert {entry["tag"] for _, entry in ENTRIES} >= CURRENT_TAGS


def test_golden_corpus_has_raw_compressed_and_dictionary_records() -> None:
    """The format-1 corpus pins all three storage variants."""
    variants = {(entry["compressed"], entry["dict_id"] > 0) for entry in LISTING}
    assert variants == {(False, False), (True, False), (True, True)}


def test_golden_corpus_holds_an_old_tag_that_is_upcast() -> None:
    """The old-tag record decodes through its upcaster into a current event."""
    record = RECORDS_V1["message_added_v0.upcast"]
    assert msgspec.msgpack.decode(record[10:])["type"] == "message_added_v0"
    assert type(CODECS["golden_v1"].decode(record)).__struct_config__.tag == "message_appended"


@pytest.mark.parametrize("corpus", CORPORA)
def test_listing_and_records_name_the_same_entries(corpus: str) -> None:
    """Every listed record exists and every record is listed."""
    names = [entry["name"] for name, entry in ENTRIES if name == corpus]
    assert sorted(names) == sorted(RECORDS[corpus])
