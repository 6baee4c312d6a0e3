"""The windowed indices: entries before the base leave memory and come back when touched."""

from __future__ import annotations

import pytest

from ctxledger.domain import indices
from ctxledger.domain.indices import HASH_SIZE, SeqList, SeqMap, id_hash
from ctxledger.errors import EventDecodeError, InvalidSeqError


@pytest.fixture(autouse=True)
def small_slack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indices, "SLACK", 2)


def windowed(entries: list[int], base: int) -> tuple[SeqList, list[int]]:
    """A SeqList of ``entries`` after forget(base), and a counter of its read-backs."""
    loads: list[int] = []

    def load() -> list[int]:
        loads.append(1)
        return [seq for seq in entries if seq <= base]

    seqs = SeqList(list(entries), load=load)
    seqs.forget(base)
    return seqs, loads


def test_forget_keeps_the_slack_and_counts_the_rest() -> None:
    seqs, loads = windowed([2, 4, 6, 8, 10, 12, 14], base=10)
    assert (seqs.before, seqs.items) == (3, [8, 10, 12, 14])
    assert len(seqs) == 7 and seqs[-1] == 14 and seqs[3] == 8 and seqs[-4:] == [8, 10, 12, 14]
    assert seqs.bisect_left(12) == 5 and seqs.bisect_right(8) == 4
    assert loads == []


def test_window_is_what_forget_leaves() -> None:
    seqs = SeqList([2, 4, 6, 8, 10, 12, 14])
    assert seqs.window(10) == (3, [8, 10, 12, 14])
    assert seqs.items == [2, 4, 6, 8, 10, 12, 14]  # window does not change the list


@pytest.mark.parametrize(
    "touch",
    [
        lambda s: s[0],
        lambda s: s[-7],
        lambda s: s[1:3],
        lambda s: list(s),
        lambda s: s.bisect_left(3),
        lambda s: s.bisect_right(7),
    ],
)
def test_touching_an_old_entry_reads_them_back_once(touch: object) -> None:
    seqs, loads = windowed([2, 4, 6, 8, 10, 12, 14], base=10)
    touch(seqs)  # type: ignore[operator]
    assert loads == [1] and seqs.before == 0 and seqs.items == [2, 4, 6, 8, 10, 12, 14]
    assert seqs.bisect_left(3) == 1 and seqs[0] == 2
    assert loads == [1]


def test_an_old_entry_without_reader_is_an_invalid_seq() -> None:
    seqs = SeqList([8, 10], before=3)
    with pytest.raises(InvalidSeqError):
        seqs[0]


def test_seqmap_forgets_old_ids_into_hashes_in_seq_order() -> None:
    calls = SeqMap(hashes=b"")
    for call_id, seq in [("b", 3), ("a", 3), ("c", 5), ("d", 9)]:
        calls[call_id] = seq
    calls.forget(5)
    assert calls.recent == {"d": 9} and calls.older == 3
    assert bytes(calls.hashes or b"") == id_hash("a") + id_hash("b") + id_hash("c")
    assert len(calls) == 4 and len(id_hash("a")) == HASH_SIZE


def old_calls() -> tuple[SeqMap, list[int]]:
    """A hashed map with three ids out of memory, and a counter of its read-backs."""
    loads: list[int] = []

    def load() -> dict[str, int]:
        loads.append(1)
        return {"a": 3, "b": 3, "c": 5}

    hashes = id_hash("a") + id_hash("b") + id_hash("c")
    return SeqMap({"d": 9}, 3, hashes, load), loads


def test_seqmap_reads_back_only_on_a_hash_hit() -> None:
    calls, loads = old_calls()
    assert "new" not in calls and calls.get("new") is None and "d" in calls
    assert loads == []
    assert calls.get("c") == 5 and "a" in calls and loads == [1]
    assert sorted(calls) == ["a", "b", "c", "d"] and loads == [1]


def test_an_unhashed_seqmap_reads_back_on_any_miss() -> None:
    answers = SeqMap({"d": 10}, 2, None, lambda: {"a": 4, "c": 6})
    assert answers.get("d") == 10 and answers.older == 2
    assert "zzz" not in answers and answers.get("a") == 4


def test_an_old_id_without_reader_is_an_invalid_seq() -> None:
    with pytest.raises(InvalidSeqError):
        "x" in SeqMap({}, 1, None)  # noqa: B015


def test_a_short_read_back_is_a_decode_error() -> None:
    calls = SeqMap({}, 3, None, lambda: {"a": 1})
    with pytest.raises(EventDecodeError):
        calls.get("a")


def test_seqmap_copy_is_independent() -> None:
    calls = SeqMap({"a": 1}, hashes=b"")
    other = calls.copy()
    other["b"] = 2
    other.forget(1)
    assert calls.recent == {"a": 1} and not calls.hashes
    assert other.recent == {"b": 2} and bytes(other.hashes or b"") == id_hash("a")


def test_a_decoded_map_is_put_back_in_seq_order_before_it_forgets() -> None:
    decoded = {"a": 9, "b": 3, "c": 5}  # a snapshot's map comes back sorted by id
    calls = SeqMap(SeqMap.in_seq_order(decoded), hashes=b"")
    assert list(calls.recent) == ["b", "c", "a"]
    calls.forget(5)
    assert calls.recent == {"a": 9} and bytes(calls.hashes or b"") == id_hash("b") + id_hash("c")


def test_a_map_with_a_reader_drops_what_it_forgets_and_reads_it_back_on_a_hit() -> None:
    loads: list[int] = []
    every = {"a": 1, "b": 2, "c": 3, "d": 4}

    def load() -> dict[str, int]:  # what history holds before the base
        loads.append(1)
        return dict(list(every.items())[: calls.older])

    calls = SeqMap(hashes=b"", load=load)
    for call_id, seq in [("a", 1), ("b", 2), ("c", 3)]:
        calls[call_id] = seq
    assert "a" in calls and loads == []  # not forgotten yet: in memory
    calls.forget(2)
    assert calls.recent == {"c": 3} and calls.older == 2
    assert "never" not in calls and loads == []  # a hash miss needs no read-back
    assert calls.get("b") == 2 and "a" in calls and loads == [1]  # read back once, then cached
    calls["d"] = 4
    calls.forget(3)  # the cache is dropped with the base's move
    assert calls.get("c") == 3 and loads == [1, 1]


def test_hashes_of_forgotten_ids_are_the_same_however_often_asked_for() -> None:
    once, often = SeqMap(hashes=b""), SeqMap(hashes=b"")
    for seq, call_id in enumerate(["x", "y", "z", "w"], start=1):
        for calls in (once, often):
            calls[call_id] = seq
            calls.forget(seq - 1)
        assert often.hashes is not None  # computed at every step
    assert bytes(once.hashes or b"") == bytes(often.hashes or b"")
    assert bytes(once.hashes or b"") == id_hash("x") + id_hash("y") + id_hash("z")
