"""The budget actor folds the committed batches into each session's token pressure and owns the
decision to prepare a summary ahead of need (issue 28): driven here with real messages, its
answers collected by a real actor standing for the history actor."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

import pykka
import pytest

from ctxledger import Message
from ctxledger.actors.background import credit_left
from ctxledger.actors.budget import BudgetActor, appended_tokens
from ctxledger.actors.live import Live
from ctxledger.actors.messages import (
    BackgroundEnded,
    Committed,
    Forgotten,
    Measure,
    Measured,
    Prepare,
    Release,
    Settled,
    Settling,
)
from ctxledger.domain import CharTokenizer
from ctxledger.domain._pressure import Measurement
from ctxledger.events import Event, MessageAppended, UsageReported, ViewServed

_WAIT = 30.0  # only a hang reaches it


class Owner(pykka.ThreadingActor):
    """Stands for the history actor: keeps every message budget sends it, in order."""

    def __init__(self, inbox: queue.Queue[Any]) -> None:
        super().__init__()
        self.inbox = inbox

    def on_receive(self, message: Any) -> None:
        self.inbox.put(message)


class Rig:
    """A budget actor and the owner it answers; the batches cost what the history actor counts
    at 3 characters a token (``appended_tokens``)."""

    def __init__(self, max_running: int = 2) -> None:
        self.received: queue.Queue[Any] = queue.Queue()
        self.owner: Any = Owner.start(self.received)
        self.budget = BudgetActor.start(max_running)

    def tell(self, message: object) -> None:
        self.budget.tell(message)

    def append(
        self, session_id: str, seq: int, chars: int, *, pressure: bool = True, told: int = 0
    ) -> None:
        """Publish an append of ``chars`` characters (``told``: the history actor's running
        total of tokens told, this batch included)."""
        message = Message.user("x" * chars).with_seq(seq)
        events: tuple[Event, ...] = (MessageAppended(message=message),)
        cost = appended_tokens(events, CharTokenizer())
        self.tell(Committed(session_id, events, self.owner, pressure, told=told, cost=cost))

    def next(self) -> Any:
        return self.received.get(timeout=_WAIT)

    def quiet(self, session_id: str) -> None:
        """Assert budget sent nothing more for the session (its Settled comes next)."""
        self.tell(Settling(session_id, self.owner))
        assert self.next() == Settled(session_id)


@pytest.fixture
def rig() -> Iterator[Rig]:
    made = Rig()
    try:
        yield made
    finally:
        made.budget.stop()
        made.owner.stop()


def _blocked(until: int, last_seq: int) -> Measurement:
    return Measurement(blocked_until=until, last_seq=last_seq)


def _measured(rig: Rig, session_id: str, estimate: int, **fields: Any) -> Measured:
    base: dict[str, Any] = {"last_seq": 10, "threshold": 1000, "prepare": 850}
    base.update(fields)
    measurement = Measurement(estimate=estimate, **base)
    return Measured(session_id=session_id, owner=rig.owner, measurement=measurement)


def test_an_unknown_bound_is_measured_and_appends_below_it_are_not(rig: Rig) -> None:
    """The first pressure batch is measured; appends that keep the bound below the prepare
    point cost no message; the one that lifts it over is measured again."""
    rig.append("s", 10, 30)
    assert rig.next() == Measure("s")
    rig.tell(_measured(rig, "s", 500))
    assert rig.next() == Release("s", 350)  # credit: the room below the prepare point
    rig.append("s", 11, 300)  # +101 tokens: bound 601
    rig.append("s", 12, 600)  # +201 tokens: bound 802
    rig.quiet("s")
    rig.append("s", 13, 300)  # bound 903 >= 850
    assert rig.next() == Measure("s")


def test_any_event_but_an_append_or_a_served_view_drops_the_bound(rig: Rig) -> None:
    """A usage report makes the bound unknown: the next pressure batch is measured even though
    the appends alone would stay below the prepare point."""
    rig.append("s", 10, 30)
    assert rig.next() == Measure("s")
    rig.tell(_measured(rig, "s", 100))
    assert rig.next() == Release("s", 750)
    served = ViewServed(through_seq=10, estimated_tokens=100, view_hash="h")
    rig.tell(Committed("s", (served,), rig.owner, False, cost=0))
    rig.append("s", 11, 30)
    rig.quiet("s")  # a served view keeps the bound
    usage = UsageReported(prompt_tokens=900, completion_tokens=1)
    rig.tell(Committed("s", (usage,), rig.owner, True))
    assert rig.next() == Measure("s")


def test_batches_folded_while_measuring_count_in_the_bound_after(rig: Rig) -> None:
    """The measure may have been taken before a batch that arrived meanwhile: the bound after it
    counts that batch again (an upper bound), and an event that drops the bound meanwhile
    leaves it unknown."""
    rig.append("s", 10, 30)
    assert rig.next() == Measure("s")
    rig.append("s", 11, 900)  # +301 tokens while measuring
    rig.tell(_measured(rig, "s", 500))
    assert rig.next() == Release("s", 49)  # 850 - (500 + 301)
    rig.append("s", 12, 150)  # bound 500 + 301 + 51 = 852 >= 850
    assert rig.next() == Measure("s")
    usage = UsageReported(prompt_tokens=10, completion_tokens=1)
    rig.tell(Committed("s", (usage,), rig.owner, False))
    rig.tell(_measured(rig, "s", 100))
    assert rig.next() == Release("s")
    rig.append("s", 13, 3)  # the bound is unknown after the usage report: measured
    assert rig.next() == Measure("s")


def test_appends_kept_back_within_the_credit_count_in_the_bound(rig: Rig) -> None:
    """The tokens of the appends the history actor kept back within its credit ride on the
    next batch it publishes: budget adds them to the bound as if it had seen each."""
    rig.append("s", 10, 30)
    assert rig.next() == Measure("s")
    rig.tell(_measured(rig, "s", 500))
    assert rig.next() == Release("s", 350)
    events: tuple[Event, ...] = (MessageAppended(message=Message.user("x").with_seq(40)),)
    rig.tell(Committed("s", events, rig.owner, True, 300, cost=1))  # bound 500 + 300 + 1
    rig.quiet("s")
    rig.tell(Committed("s", events, rig.owner, True, 48, cost=1))  # 801 + 48 + 1 = 850
    assert rig.next() == Measure("s")


def test_a_release_echoes_the_totals_of_the_last_batch_folded(rig: Rig) -> None:
    """The credit is reckoned on the batches budget has folded: the Release names the last one
    (its running totals), so that the history actor takes off what it published after it."""
    events: tuple[Event, ...] = (MessageAppended(message=Message.user("x" * 30).with_seq(10)),)
    rig.tell(Committed("s", events, rig.owner, True, told=11, told_unknown=2, cost=11))
    assert rig.next() == Measure("s")
    rig.tell(Committed("s", events, rig.owner, True, told=22, told_unknown=2, cost=11))
    rig.tell(_measured(rig, "s", 500))
    assert rig.next() == Release("s", 339, 22, 2)  # 850 - (500 + 11)


def test_the_credit_left_takes_off_what_was_published_after_budget_reckoned_it() -> None:
    """A batch published before the Release arrived but folded by budget after it reckoned
    the credit is added to budget's bound: the history actor takes its tokens off the credit,
    grants none after a batch that may have changed the estimate otherwise, and none on totals
    that are not this state's."""
    live = Live("s")
    live.told, live.told_unknown = 300, 1
    assert credit_left(live, Release("s", 500, 300, 1)) == 500  # nothing published since
    assert credit_left(live, Release("s", 500, 231, 1)) == 431  # 69 tokens on their way
    assert credit_left(live, Release("s", 50, 231, 1)) == 0  # spent already
    assert credit_left(live, Release("s", 500, 300, 0)) == 0  # a usage report on its way
    assert credit_left(live, Release("s", 500, 400, 1)) == 0  # totals of an earlier state


def test_a_due_session_is_prepared_and_the_slots_are_rationed(rig: Rig) -> None:
    """Two background summaries at once: a third due session waits for a slot, then gets it."""
    for name in ("a", "b", "c"):
        rig.append(name, 10, 30)
        assert rig.next() == Measure(name)
        rig.tell(_measured(rig, name, 900))
        if name != "c":
            assert rig.next() == Prepare(name)
    rig.quiet("c")  # queued, no slot free
    rig.tell(BackgroundEnded("a"))
    assert rig.next() == Prepare("c")


def test_after_a_background_summary_the_next_append_is_measured(rig: Rig) -> None:
    """The history actor tells budget nothing of a session while its background summary runs:
    once it has ended, budget knows no bound and measures at the next pressure batch, however
    small."""
    rig.append("s", 10, 30)
    assert rig.next() == Measure("s")
    rig.tell(_measured(rig, "s", 900))
    assert rig.next() == Prepare("s")
    rig.tell(BackgroundEnded("s"))
    rig.append("s", 40, 3)
    assert rig.next() == Measure("s")


def test_the_closest_to_its_threshold_is_prepared_first() -> None:
    """With the one slot taken, the queued session nearest its threshold gets it next."""
    rig = Rig(max_running=1)
    try:
        rig.append("busy", 10, 30)
        assert rig.next() == Measure("busy")
        rig.tell(_measured(rig, "busy", 900))
        assert rig.next() == Prepare("busy")
        for name, estimate in (("far", 860), ("near", 990)):
            rig.append(name, 10, 30)
            assert rig.next() == Measure(name)
            rig.tell(_measured(rig, name, estimate))
        rig.quiet("near")
        rig.tell(BackgroundEnded("busy"))
        assert rig.next() == Prepare("near")
        rig.tell(Forgotten("near"))  # its state left the host: the slot is free again
        assert rig.next() == Prepare("far")
    finally:
        rig.budget.stop()
        rig.owner.stop()


def _absorbing(rig: Rig) -> None:
    """Session "s" at 900 tokens with summary "p1" prepared, found to absorb the growth (the
    next look at 900 + (1000 - 850) // 4 = 937)."""
    rig.append("s", 10, 30)
    assert rig.next() == Measure("s")
    rig.tell(_measured(rig, "s", 900, prepared="p1"))
    assert rig.next() == Measure("s", extension=True)
    rig.tell(_measured(rig, "s", 900, prepared="p1", extension=False))
    # A credit up to the next look: the appends below it need not even be published.
    assert rig.next() == Release("s", 37)


def test_a_prepared_summary_is_extended_only_when_due(rig: Rig) -> None:
    """With a usable prepared summary budget asks whether its extension is due; while the view
    grows less than a quarter of the gap above that look, it does not ask again, and the
    appends within it are not even measured (a measure drafts the whole view: on a long
    session never served, one per append made each append cost the whole history). The next
    look asks at once whether the extension is due (one round trip, not two)."""
    _absorbing(rig)
    rig.append("s", 11, 30)  # the bound 910, under the next look at 900 + (1000 - 850) // 4
    rig.append("s", 12, 60)  # 930
    rig.quiet("s")
    rig.append("s", 13, 30)  # 940: past the next look
    assert rig.next() == Measure("s", extension=True, extension_from=937)
    rig.tell(_measured(rig, "s", 940, prepared="p1", extension=True))
    assert rig.next() == Prepare("s")


def _told_append(rig: Rig, seq: int, told: int) -> int:
    """Append 30 characters (11 tokens) as the history actor publishes them: with its running
    total of tokens told; return the new total."""
    rig.append("s", seq, 30, told=told + 11)
    return told + 11


def test_past_the_threshold_the_absorbing_look_is_paced_by_the_view_growth(rig: Rig) -> None:
    """Past the threshold (a session not being served: an import), masking can keep the view
    flat while the bound grows by every append; the next look at a prepared summary that
    absorbs the growth comes at the pace the view grew since the last look, at most the gap
    between the prepare point and the threshold (4 steps of 37) of appends on."""
    told = _told_append(rig, 10, 0)
    assert rig.next() == Measure("s")
    rig.tell(_measured(rig, "s", 1200, prepared="p1"))
    assert rig.next() == Measure("s", extension=True)
    rig.tell(_measured(rig, "s", 1200, prepared="p1", extension=False))
    assert rig.next() == Release("s", 37, 11, 0)  # the first look there: exactly a step on
    for seq in range(11, 14):
        told = _told_append(rig, seq, told)  # the bound 1211, 1222, 1233
    rig.quiet("s")
    told = _told_append(rig, 14, told)  # 1244: past the look at 1237
    assert rig.next() == Measure("s", extension=True, extension_from=1237)
    # The view grew 4 tokens while 44 were appended: 33 more would take 363 appended tokens,
    # more than the gap: the next look is 148 on (it was 33 on, 1237 - 1204, before pacing).
    # Under 1237 the extension was not measured: not needed.
    rig.tell(_measured(rig, "s", 1204, prepared="p1"))
    assert rig.next() == Release("s", 148, told, 0)
    for seq in range(15, 28):
        told = _told_append(rig, seq, told)  # 13 appends: the bound 1204 + 143
    rig.quiet("s")
    told = _told_append(rig, 28, told)  # 1358 >= 1352
    assert rig.next() == Measure("s", extension=True, extension_from=1237)
    # The view grew 26 while 154 were appended: the 7 left to the look at 1237 should take
    # 41 appended tokens at that pace; the next look is there, within the gap.
    rig.tell(_measured(rig, "s", 1230, prepared="p1"))
    assert rig.next() == Release("s", 41, told, 0)


def test_below_the_threshold_the_absorbing_look_stays_exact(rig: Rig) -> None:
    """Below the threshold the look is a step on from the last, in the view, whatever the pace
    of the appends (the session is being served: its summary must be ready in time)."""
    told = _told_append(rig, 10, 0)
    assert rig.next() == Measure("s")
    rig.tell(_measured(rig, "s", 900, prepared="p1"))
    assert rig.next() == Measure("s", extension=True)
    rig.tell(_measured(rig, "s", 900, prepared="p1", extension=False))
    assert rig.next() == Release("s", 37, 11, 0)
    for seq in range(11, 15):
        told = _told_append(rig, seq, told)
    assert rig.next() == Measure("s", extension=True, extension_from=937)
    rig.tell(_measured(rig, "s", 904, prepared="p1"))
    assert rig.next() == Release("s", 33, told, 0)  # 937 - 904: not paced


def test_a_batch_not_of_appends_alone_is_measured_within_the_absorbing_look(rig: Rig) -> None:
    """A usage report (or a checkpoint, a new prepared summary, a Config) drops the bound and
    the absorbing look: the next batch is measured; a measure that finds the same summary
    within the look releases it and quiets the appends that follow again."""
    _absorbing(rig)
    usage = UsageReported(prompt_tokens=900, completion_tokens=1)
    rig.tell(Committed("s", (usage,), rig.owner, True))
    assert rig.next() == Measure("s", extension=True, extension_from=937)
    rig.tell(_measured(rig, "s", 910, prepared="p1"))  # within the look: not measured
    assert rig.next() == Release("s", 27)  # a credit up to the look (937)
    rig.append("s", 11, 30)  # 920
    rig.quiet("s")
    rig.append("s", 12, 60)  # 940
    assert rig.next() == Measure("s", extension=True, extension_from=937)
    # Another summary, whose extension is not due: found to absorb, the next look a step on.
    rig.tell(_measured(rig, "s", 940, prepared="p2", extension=False))
    assert rig.next() == Release("s", 37)


def test_a_summary_that_cannot_be_ready_in_time_is_not_prepared(rig: Rig) -> None:
    """At the growth rate since the active checkpoint a summary would come after the
    threshold: none is prepared for that checkpoint's cycle."""
    rig.append("s", 10, 30)
    assert rig.next() == Measure("s")
    slow = {"active": "c1", "grown": 600, "seconds": 6.0, "summary_seconds": 10.0}
    rig.tell(_measured(rig, "s", 900, **slow))  # 100 tokens/s * 10 s > 100 left
    assert rig.next() == Release("s")
    rig.append("s", 11, 30)
    assert rig.next() == Measure("s")
    rig.tell(_measured(rig, "s", 900, active="c1"))  # judged late for c1 already
    assert rig.next() == Release("s")
    rig.append("s", 12, 30)
    assert rig.next() == Measure("s")
    rig.tell(_measured(rig, "s", 900, active="c2"))  # a new checkpoint's cycle, no rate known
    assert rig.next() == Prepare("s")


def test_blocked_and_off_sessions(rig: Rig) -> None:
    """A blocked session is not measured again before the seq it names; a session with
    background compaction off is forgotten (its next batch starts a fresh fold)."""
    rig.append("s", 10, 30)
    assert rig.next() == Measure("s")
    rig.tell(Measured(session_id="s", owner=rig.owner, measurement=_blocked(13, 10)))
    assert rig.next() == Release("s")
    rig.append("s", 11, 30)
    rig.append("s", 12, 30)
    rig.quiet("s")
    rig.append("s", 13, 30)
    assert rig.next() == Measure("s")
    rig.tell(Measured(session_id="s", owner=rig.owner, measurement=Measurement(off=True)))
    assert rig.next() == Release("s")
    rig.append("s", 14, 30)
    assert rig.next() == Measure("s")


def test_a_measure_of_a_forgotten_session_is_released(rig: Rig) -> None:
    """The state left its history actor while budget measured it: the measure is answered
    Release all the same, so nothing waits on a verdict that would never come."""
    rig.append("s", 10, 30)
    assert rig.next() == Measure("s")
    rig.tell(Forgotten("s"))
    rig.tell(_measured(rig, "s", 900))
    assert rig.next() == Release("s")


def test_settled_follows_every_measure_sent_before(rig: Rig) -> None:
    """Settling is answered after the Measure of a batch budget folded before it (FIFO), so a
    history actor waiting for the session to settle sees that a summary may be due."""
    rig.append("s", 10, 30)
    rig.tell(Settling("s", rig.owner))
    assert rig.next() == Measure("s")
    assert rig.next() == Settled("s")


def test_a_look_within_the_step_of_a_new_summary_asks_for_its_extension(rig: Rig) -> None:
    """The extension is measured only from the view a step above the last look; a measure
    under it that finds another summary prepared (its extension not measured) asks again."""
    _absorbing(rig)
    usage = UsageReported(prompt_tokens=900, completion_tokens=1)
    rig.tell(Committed("s", (usage,), rig.owner, True))
    assert rig.next() == Measure("s", extension=True, extension_from=937)
    rig.tell(_measured(rig, "s", 910, prepared="p2"))  # under 937: not measured
    assert rig.next() == Measure("s", extension=True)
    rig.tell(_measured(rig, "s", 910, prepared="p2", extension=True))
    assert rig.next() == Prepare("s")


def test_a_batch_costs_its_characters_at_the_sessions_own_ratio() -> None:
    """The bound grows at the ratio the session counts with: a calibrated tokenizer's (more
    tokens a character than the host's ``chars // 3``), none for a tokenizer that does not
    count characters."""
    from ctxledger.domain.calibration import CalibratedTokenizer

    class Words:
        def count_text(self, text: str) -> int:
            return len(text.split())

    events: tuple[Event, ...] = (MessageAppended(message=Message.user("x" * 300).with_seq(1)),)
    assert appended_tokens(events, CharTokenizer()) == 101  # 300 // 3 + one a message
    assert appended_tokens(events, CalibratedTokenizer(1.5)) == 201
    assert appended_tokens(events, Words()) is None  # type: ignore[arg-type]
    served = ViewServed(through_seq=1, estimated_tokens=100, view_hash="h")
    assert appended_tokens((served,), Words()) == 0  # type: ignore[arg-type]
    assert appended_tokens((*events, UsageReported(prompt_tokens=9)), CharTokenizer()) is None


def _usage_step(rig: Rig, seq: int, *, served_through: int, estimate: int) -> None:
    """Publish a step's batch with a usage report: the report, one append, the served view."""
    events: tuple[Event, ...] = (
        UsageReported(prompt_tokens=700, completion_tokens=1, through_seq=seq - 1),
        MessageAppended(message=Message.user("x" * 30).with_seq(seq)),
        ViewServed(through_seq=served_through, estimated_tokens=estimate, view_hash="h"),
    )
    rig.tell(Committed("s", events, rig.owner, True, cost=appended_tokens(events, CharTokenizer())))


def test_a_step_that_ends_with_its_view_needs_no_measure(rig: Rig) -> None:
    """A usage report in a step's batch drops the bound, but the view the step served last is a
    measure: below the prepare point nothing is asked of the history actor; at or over it, or
    when the view is not of every message budget knows, the session is measured."""
    rig.append("s", 10, 30)
    assert rig.next() == Measure("s")
    rig.tell(_measured(rig, "s", 500))
    assert rig.next() == Release("s", 350)
    _usage_step(rig, 11, served_through=11, estimate=820)  # bound 820 < 850
    rig.quiet("s")
    rig.append("s", 12, 30)  # + 11: bound 831, still below
    rig.quiet("s")
    _usage_step(rig, 13, served_through=13, estimate=860)  # 860 >= 850: measured
    assert rig.next() == Measure("s")
    rig.tell(_measured(rig, "s", 600, last_seq=13))
    assert rig.next() == Release("s", 250)
    _usage_step(rig, 14, served_through=12, estimate=610)  # a view of older messages
    assert rig.next() == Measure("s")
