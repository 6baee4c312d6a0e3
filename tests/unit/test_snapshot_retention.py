"""Which snapshots a session keeps: all recent ones, then one per doubling of age."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ctxledger.runtime.loading import DENSE_SNAPSHOTS, snapshots_to_drop


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
