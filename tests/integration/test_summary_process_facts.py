"""A summary worker process also reads the facts of the messages its summary covers, when asked.

The checkpoint's fact block reads every message the checkpoint newly covers, on the history
actor, when a prepared summary is activated. When the host reads them ahead
(:mod:`ctxledger.actors.fact_warming`) and the summary is made in a worker process, the worker
reads them beside the summary and the host keeps them
(:func:`ctxledger.domain.facts.remember_reads`): no thread of the host reads them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ctxledger import Message
from ctxledger.actors.summary_process import SummaryProcesses
from ctxledger.domain import CompactionPlan, _fact_extract
from ctxledger.domain._fact_runs import Runs
from ctxledger.domain.facts import extract_facts
from ctxledger.summarizers import ExtractiveSummarizer
from ctxledger.tooling.workload import take_messages


def _plan(messages: list[Message], fact_chars: int = 2_000) -> CompactionPlan:
    last = messages[-1].seq or 0
    return CompactionPlan(
        reason="threshold_exceeded", retain_from_seq=last + 1, covers_through_seq=last,
        covered=tuple(messages), previous_summary=None, previous_checkpoint_id=None, focus=None,
        max_chars=4_000, chunk_chars=200_000, estimated_tokens=10_000, threshold=9_000,
        target_tokens=6_000, planned_tokens=6_000, fact_chars=fact_chars,
    )  # fmt: skip


@pytest.fixture
def workers() -> Iterator[SummaryProcesses]:
    processes = SummaryProcesses(1)
    try:
        assert processes.take() is None  # the first job starts a worker
        with processes._lock:
            processes._promote(None)  # ready
        assert processes.available, "no worker process could start here"
        yield processes
    finally:
        processes.close()


@pytest.mark.parametrize("reads", [True, False])
def test_the_host_keeps_the_facts_a_worker_read_when_asked(
    workers: SummaryProcesses, fact_reads: list[tuple[str, int]], reads: bool
) -> None:
    messages = list(take_messages(2, 60))
    run = workers.take()
    assert run is not None
    assert run(_plan(messages), ExtractiveSummarizer(), reads)
    assert fact_reads == []  # the summary's input is made in the worker
    facts = extract_facts(messages)
    assert len(fact_reads) == (0 if reads else len(messages))
    # What each message gives, and all their facts (a chain of such jobs is answered from them).
    assert len(_fact_extract._memo.entries) == len(messages)
    if reads:
        _fact_extract._memo.runs = Runs()
        assert extract_facts(messages) == facts
        assert fact_reads == []  # what each message gives was kept too
    _fact_extract._memo = _fact_extract._Memo()
    assert extract_facts(messages) == facts  # the same facts as read here


def test_no_facts_are_read_for_a_plan_without_a_block(
    workers: SummaryProcesses, fact_reads: list[tuple[str, int]]
) -> None:
    messages = list(take_messages(2, 60))
    run = workers.take()
    assert run is not None
    assert run(_plan(messages, fact_chars=0), ExtractiveSummarizer(), True)
    assert _fact_extract._memo.entries == {}
