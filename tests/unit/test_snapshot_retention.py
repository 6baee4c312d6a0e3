"""Which snapshots a session keeps: all recent ones, then one per doubling of age."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ctxledger.replay.loading import DENSE_SNAPSHOTS, snapshots_to_drop


def _kept(seqs: list[int], interval: int) -> list[int]:
    drop = set(snapshots_to_drop(seqs, interval))
    return [seq for seq in seqs if seq not in drop]


def test_recent_snapshots_are_all_kept() -> None:
    """Within the dense span of the newest, nothing is dropped."""
    seqs = [1000 * n for n in range(1, DENSE_SNAPSHOTS + 1)]
    assert snapshots_to_drop(seqs, 1000) == []


def test_a_long_session_keeps_logarithmically_many() -> None:
    """A million events with a snapshot every thousand keep ~dense + log2 of them."""
    seqs = [1000 * n for n in range(1, 1001)]
    kept = _kept(seqs, 1000)
    assert len(kept) <= DENSE_SNAPSHOTS + 8
    assert kept[-DENSE_SNAPSHOTS:] == seqs[-DENSE_SNAPSHOTS:]
    assert kept[0] == 1000  # the oldest bucket keeps its oldest snapshot


@given(st.lists(st.integers(1, 10**6), min_size=1, max_size=300, unique=True))
def test_every_age_keeps_a_snapshot_near_it(seqs: list[int]) -> None:
    """A fold to any kept-older point starts at most twice its age back: per doubling of age
    (beyond the dense span) at least one snapshot of the original set in it stays."""
    interval = 1000
    newest = max(seqs)
    span = DENSE_SNAPSHOTS * interval
    kept = set(_kept(seqs, interval))
    assert newest in kept
    assert {s for s in seqs if newest - s < span} <= kept
    buckets = {(newest - s) // span for s in seqs if newest - s >= span}
    kept_buckets = {((newest - s) // span).bit_length() for s in kept if newest - s >= span}
    assert {b.bit_length() for b in buckets} == kept_buckets


def test_retention_is_stable_as_the_session_grows() -> None:
    """Pruning after every new snapshot keeps the set bounded and its newest ones dense."""
    stored: list[int] = []
    for n in range(1, 2001):
        stored.append(1000 * n)
        drop = set(snapshots_to_drop(stored, 1000))
        stored = [seq for seq in stored if seq not in drop]
    assert len(stored) <= DENSE_SNAPSHOTS + 9
    assert stored[-DENSE_SNAPSHOTS:] == [1000 * n for n in range(1991, 2001)]


@given(st.lists(st.integers(1, 1000), min_size=12, max_size=200), st.integers(0, 999))
def test_a_fold_within_the_dense_span_starts_at_most_one_interval_back(
    gaps: list[int], lag: int
) -> None:
    """Snapshots taken at most one interval apart and pruned after each save: a fold to any
    event within the newest ``DENSE_SNAPSHOTS`` intervals (recovery, ``view_at`` of recent seqs)
    finds a snapshot at most one interval before it, wherever the snapshots fell."""
    interval = 1000
    stored: list[int] = []
    seq = 0
    for gap in gaps:
        seq += gap
        stored.append(seq)
        drop = set(snapshots_to_drop(stored, interval))
        stored = [s for s in stored if s not in drop]
    newest = seq + lag  # events after the newest snapshot
    for target in range(max(1, newest - DENSE_SNAPSHOTS * interval), newest + 1, 7):
        start = max((s for s in stored if s <= target), default=0)
        if target >= stored[0] + interval:  # (before the first snapshot: the log's start)
            assert target - start <= interval, (target, start, stored)


def test_a_snapshot_exactly_one_dense_span_old_is_not_dropped_from_under_it() -> None:
    """The case the 1M-event benchmark hit: the snapshot at newest - span is the start of any
    fold to the oldest events of the dense span, and must stay."""
    seqs = [1000 * n for n in range(1, 1001)]
    kept = _kept(seqs, 1000)
    assert 1_000_000 - DENSE_SNAPSHOTS * 1000 in kept
