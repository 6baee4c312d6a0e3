"""How long a group commit waits for more requests (issue 28): as many as came back before, and
only while such waits end with a request more often than not."""

from __future__ import annotations

from ctxledger.storage._gathering import PAYS, PROBE_EVERY, Gathering


def test_a_group_expects_the_size_of_the_group_before_the_last() -> None:
    gathering = Gathering(0.0005, 0.002)
    assert gathering.expected() == 1
    gathering.committed(5)
    assert gathering.expected() == 1  # the last group's callers still wait for their answers
    gathering.committed(3)
    assert gathering.expected() == 5


def test_with_wake_at_once_the_last_group_and_the_queued_requests_are_expected() -> None:
    gathering = Gathering(0.0005, 0.002, wake_at_once=True)
    gathering.committed(4)
    gathering.queued = 2
    assert gathering.expected() == 6


def test_waits_that_end_with_a_request_keep_the_group_waiting() -> None:
    gathering = Gathering(0.0005, 0.002)
    for _ in range(100):
        assert gathering.worth_waiting()
        gathering.waited(arrived=True)
    # One empty-handed wait among requests that come back does not stop the waiting.
    gathering.waited(arrived=False)
    assert gathering.worth_waiting()


def test_waits_that_end_empty_handed_stop_and_are_probed_now_and_then() -> None:
    gathering = Gathering(0.0005, 0.002)
    misses = 0
    while gathering.worth_waiting():
        gathering.waited(arrived=False)
        misses += 1
        assert misses < 20
    assert gathering.paid < PAYS
    answers = [gathering.worth_waiting() for _ in range(3 * PROBE_EVERY - 1)]
    # One wait in PROBE_EVERY is made anyway (the first was declined above).
    assert answers.count(True) == 3
    assert all(answers[k] == ((k + 2) % PROBE_EVERY == 0) for k in range(len(answers)))


def test_callers_that_come_back_again_resume_the_waiting() -> None:
    gathering = Gathering(0.0005, 0.002)
    while gathering.worth_waiting():
        gathering.waited(arrived=False)
    hits = 0
    while gathering.paid < PAYS:  # each probe found a request: the share climbs back
        gathering.waited(arrived=True)
        hits += 1
    assert 0 < hits < 10
    assert all(gathering.worth_waiting() for _ in range(PROBE_EVERY))
