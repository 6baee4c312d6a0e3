"""Budget's pure decision on a measured session (ctxledger.domain._pressure.measured_verdict)."""

from __future__ import annotations

import msgspec

from ctxledger.domain import BACKGROUND_BACKOFF
from ctxledger.domain._pressure import (
    ExtensionWanted,
    Measurement,
    Off,
    PressureMemo,
    Queued,
    Released,
    measured_verdict,
)

#: Marks of the examples: prepare 600, threshold 1000, so a look's step is (1000 - 600) // 4.
PREPARE, THRESHOLD, STEP = 600, 1000, 100


def measure(**fields: object) -> Measurement:
    """A measure at the examples' marks, with ``fields`` over it."""
    base = Measurement(last_seq=40, threshold=THRESHOLD, prepare=PREPARE)
    return msgspec.structs.replace(base, **fields)


def test_off_forgets_and_leaves_the_memo_alone() -> None:
    """A measure of a session whose background compaction is off is Off, the memo untouched."""
    memo = PressureMemo(last_seq=3, bound=7, absorb_until=9)
    assert measured_verdict(memo, measure(off=True, blocked_until=50)) == (memo, Off())


def test_blocked_releases_quiet_until_the_seq_and_drops_the_bound() -> None:
    """A blocked session is released without a bound, quiet until the seq it names."""
    memo = PressureMemo(last_seq=3, bound=700, absorb_until=900, since=5, prepare=600)
    new, verdict = measured_verdict(memo, measure(blocked_until=52, estimate=800))
    assert verdict == Released(until=None)
    assert (new.quiet_until, new.bound, new.last_seq, new.absorb_until) == (52, None, 40, None)
    assert new.prepare == 600  # not measured: the marks are not read


def test_below_the_prepare_point_releases_until_it() -> None:
    """One token below the prepare point: released until it, the bound the estimate and since."""
    new, verdict = measured_verdict(PressureMemo(since=7), measure(estimate=PREPARE - 1))
    assert verdict == Released(until=PREPARE)
    assert (new.bound, new.prepare, new.last_seq) == (PREPARE - 1 + 7, PREPARE, 40)


def test_at_the_prepare_point_a_summary_is_queued_by_closeness() -> None:
    """At exactly the prepare point, nothing to wait for: queued at -estimate / threshold."""
    new, verdict = measured_verdict(PressureMemo(), measure(estimate=PREPARE))
    assert verdict == Queued(priority=-PREPARE / THRESHOLD)
    assert new.bound == PREPARE


def test_a_dynamic_policy_releases_without_an_until() -> None:
    """With a dynamic threshold policy the prepare point is not kept: no until."""
    new, verdict = measured_verdict(PressureMemo(), measure(estimate=PREPARE - 1, dynamic=True))
    assert verdict == Released(until=None)
    assert new.prepare is None


def test_appends_during_a_dropped_measure_leave_no_bound() -> None:
    """With ``since`` None (the bound was dropped while measuring) the bound stays unknown."""
    new, _ = measured_verdict(PressureMemo(since=None), measure(estimate=PREPARE - 1))
    assert new.bound is None


def slow(**fields: object) -> Measurement:
    """A measure past the prepare point of a session too fast for a summary to be ready: 100
    tokens a second, a summary of 4 s, 300 tokens of room."""
    values: dict[str, object] = {
        "estimate": 700,
        "active": "cp-1",
        "grown": 1000,
        "seconds": 10.0,
        "summary_seconds": 4.0,
    }
    values.update(fields)
    return measure(**values)


def test_too_late_for_the_cycle_is_remembered_and_released() -> None:
    """Without recheck_pace, a summary that cannot be ready marks the checkpoint late_for."""
    memo = PressureMemo(quiet_until=5)
    new, verdict = measured_verdict(memo, slow())
    assert verdict == Released(until=None)
    assert (new.late_for, new.quiet_until, new.bound) == ("cp-1", 5, 700)


def test_a_checkpoint_late_for_is_released_for_its_whole_cycle() -> None:
    """The next measure in that checkpoint's cycle is released even when in time now."""
    memo = PressureMemo(late_for="cp-1")
    new, verdict = measured_verdict(memo, slow(grown=0))
    assert verdict == Released(until=None)
    assert new.late_for == "cp-1"


def test_a_new_checkpoint_ends_the_late_cycle() -> None:
    """A checkpoint other than late_for is judged afresh (queued when in time)."""
    _, verdict = measured_verdict(PressureMemo(late_for="cp-0"), slow(grown=0))
    assert verdict == Queued(priority=-700 / THRESHOLD)


def test_ready_exactly_in_time_is_queued() -> None:
    """A summary ready with exactly the room left (400 tokens) is queued, one token less is not."""
    assert measured_verdict(PressureMemo(), slow(estimate=600))[1] == Queued(priority=-0.6)
    assert measured_verdict(PressureMemo(), slow(estimate=601))[1] == Released(until=None)


def test_recheck_pace_quiets_a_backoff_of_messages() -> None:
    """With recheck_pace it is quiet until last_seq + BACKGROUND_BACKOFF, the bound dropped."""
    new, verdict = measured_verdict(PressureMemo(), slow(recheck_pace=True, last_seq=41))
    assert verdict == Released(until=None)
    assert (new.quiet_until, new.bound, new.late_for) == (41 + BACKGROUND_BACKOFF, None, None)


def test_a_prepared_summary_asks_for_its_extension_once() -> None:
    """A prepared summary not yet found to absorb: measured again for its extension."""
    memo = PressureMemo(absorb_until=1, since=2)
    new, verdict = measured_verdict(memo, measure(estimate=700, prepared="s-1", active="cp-1"))
    assert verdict == ExtensionWanted()
    assert (new.absorb_until, new.bound, new.absorbing) == (None, 702, None)


def test_a_prepared_summary_whose_extension_is_due_is_queued() -> None:
    """Its extension due: queued (the extension is the background compaction)."""
    fields = {"estimate": 700, "prepared": "s-1", "extension": True}
    assert measured_verdict(PressureMemo(), measure(**fields))[1] == Queued(priority=-0.7)


def test_a_prepared_summary_that_absorbs_releases_until_the_next_look() -> None:
    """Its extension not due: absorbing noted, released until a step above, below the threshold."""
    measured = measure(estimate=700, prepared="s-1", extension=False)
    new, verdict = measured_verdict(PressureMemo(since=3, looked=(1, 2)), measured)
    assert verdict == Released(until=700 + STEP)
    assert new.absorbing == ("s-1", 700, 700 + STEP)
    assert (new.absorb_until, new.looked, new.bound) == (700 + STEP, None, 703)


def test_a_summary_found_to_absorb_is_not_measured_again_within_a_step() -> None:
    """Within a step of the last look, the same summary is released to the next look unasked."""
    memo = PressureMemo(absorbing=("s-1", 700, 800))
    new, verdict = measured_verdict(memo, measure(estimate=700 + STEP - 1, prepared="s-1"))
    assert verdict == Released(until=700 + STEP)
    assert new.absorbing == ("s-1", 700, 800)


def test_a_step_past_the_last_look_asks_again() -> None:
    """A full step past the last look (or another summary) asks for the extension again."""
    memo = PressureMemo(absorbing=("s-1", 700, 800))
    assert measured_verdict(memo, measure(estimate=700 + STEP, prepared="s-1"))[1] == (
        ExtensionWanted()
    )
    assert measured_verdict(memo, measure(estimate=750, prepared="s-2"))[1] == ExtensionWanted()


def test_past_the_threshold_the_first_look_notes_the_pace_start() -> None:
    """Past the threshold, a first look is at the target and notes (estimate, told)."""
    memo = PressureMemo(since=0, told=5000)
    measured = measure(estimate=1200, prepared="s-1", extension=False)
    new, verdict = measured_verdict(memo, measured)
    assert verdict == Released(until=1200 + STEP)
    assert new.looked == (1200, 5000)


def test_past_the_threshold_the_next_look_is_paced() -> None:
    """Past the threshold, the next look is where the pace reaches the target (<= 4 steps)."""
    memo = PressureMemo(absorbing=("s-1", 1150, 1250), told=6000, looked=(1000, 5000))
    new, verdict = measured_verdict(memo, measure(estimate=1200, prepared="s-1"))
    # The target 1250 is 50 more; the view grew 200 for 1000 told: 250 told on from the bound.
    assert verdict == Released(until=1200 + 250)
    assert new.looked == (1200, 6000)
    memo = PressureMemo(absorbing=("s-1", 1150, 1250), told=6000, looked=(1199, 5000))
    new, verdict = measured_verdict(memo, measure(estimate=1200, prepared="s-1"))
    assert verdict == Released(until=1200 + 4 * STEP)  # 1 per 1000 told: capped at 4 steps
    memo = PressureMemo(absorbing=("s-1", 1150, 1250), told=5001, looked=(1000, 5000))
    new, verdict = measured_verdict(memo, measure(estimate=1200, prepared="s-1"))
    assert verdict == Released(until=1250)  # paced below the target: at the target


def test_past_the_threshold_a_flat_view_waits_the_whole_gap() -> None:
    """A view that did not grow since the last look is looked at 4 steps of appends on."""
    memo = PressureMemo(absorbing=("s-1", 1150, 1250), told=6000, looked=(1200, 5000), since=9)
    new, verdict = measured_verdict(memo, measure(estimate=1200, prepared="s-1"))
    assert verdict == Released(until=1209 + 4 * STEP)
    assert new.absorb_until == 1209 + 4 * STEP


def test_past_the_threshold_nothing_told_since_looks_at_the_target() -> None:
    """With no tokens told since the last look (the view flat), no pace: the look is at the
    target."""
    memo = PressureMemo(absorbing=("s-1", 1150, 1250), told=5000, looked=(1200, 5000))
    new, verdict = measured_verdict(memo, measure(estimate=1200, prepared="s-1"))
    assert verdict == Released(until=1250)
    assert new.looked == (1200, 5000)


def test_past_the_threshold_without_a_bound_looks_at_the_target() -> None:
    """With the bound unknown (since None) the look is at the target and no pace is kept."""
    memo = PressureMemo(absorbing=("s-1", 1150, 1250), told=6000, looked=(1150, 5000), since=None)
    new, verdict = measured_verdict(memo, measure(estimate=1200, prepared="s-1"))
    assert verdict == Released(until=1250)
    assert new.looked is None
