"""The facts of a summary's covered messages are read before its checkpoint needs them.

A checkpoint's fact block reads every message it newly covers, on the history actor, while the
step that activates the summary waits. They are read ahead on the compaction thread that made
the summary: always for a foreground summary, and for one prepared in the background while the
host serves few sessions (:class:`~ctxledger.actors.fact_warming.FactWarming`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxledger import Config, Host, HostOptions
from ctxledger.actors import fact_warming
from ctxledger.actors.fact_warming import FactWarming
from ctxledger.domain import CompactionPlan, _fact_extract
from ctxledger.events import CheckpointCreated, SummaryPrepared
from ctxledger.tooling.workload import take_messages

CONFIG = Config(context_window=16_000, min_retain_rounds=1)


def _activation_reads(path: Path, reads: list[tuple[str, int]]) -> list[str]:
    """Grow one session, each background summary finished before the next message, until a
    step makes a checkpoint from a prepared summary; the threads that read facts in that step."""
    with Host.open(path, config=CONFIG, options=HostOptions(summary_processes=0)) as host:
        session = host.session("s")
        for message in take_messages(0, 600):
            session.append(message)
            session.wait_background()
            reads.clear()
            session.prepare_step()
            made = [r.event for r in host.log.read("s") if isinstance(r.event, CheckpointCreated)]
            if made:
                assert made[0].prepared, "the first checkpoint was not a prepared summary"
                return [thread for thread, _ in reads]
    raise AssertionError("no checkpoint in 600 messages")


def test_a_lone_session_finds_the_facts_of_its_prepared_summary_read(
    tmp_path: Path, fact_reads: list[tuple[str, int]]
) -> None:
    on_history = [
        name for name in _activation_reads(tmp_path / "db", fact_reads) if "History" in name
    ]
    assert on_history == []


def test_with_many_sessions_the_activation_reads_them(
    tmp_path: Path, fact_reads: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fact_warming, "FEW_SESSIONS", 0)  # as if the host served many
    on_history = [
        name for name in _activation_reads(tmp_path / "db", fact_reads) if "History" in name
    ]
    assert len(on_history) > 20


def test_a_session_only_appended_to_has_nothing_read_ahead(
    tmp_path: Path, fact_reads: list[tuple[str, int]]
) -> None:
    """An import (appends, never a view served) activates no prepared summary: the summaries
    prepared ahead for it are made, and no fact of theirs is kept."""
    with Host.open(
        tmp_path / "db", config=CONFIG, options=HostOptions(summary_processes=0)
    ) as host:
        session = host.session("s")
        for message in take_messages(0, 300):
            session.append(message)
            session.wait_background()
        prepared = [r.event for r in host.log.read("s") if isinstance(r.event, SummaryPrepared)]
    assert len(prepared) >= 2, "no summary was prepared ahead"
    assert _fact_extract._memo.entries == {}


def _plan(fact_chars: int) -> CompactionPlan:
    covered = tuple(take_messages(1, 6))
    return CompactionPlan(
        reason="threshold_exceeded", retain_from_seq=7, covers_through_seq=6, covered=covered,
        previous_summary=None, previous_checkpoint_id=None, focus=None, max_chars=400,
        chunk_chars=20_000, estimated_tokens=900, threshold=800, target_tokens=500,
        planned_tokens=500, fact_chars=fact_chars,
    )  # fmt: skip


def test_background_summaries_are_warmed_while_the_latest_jobs_come_from_few_sessions() -> None:
    warming = FactWarming()
    plan = _plan(300)
    assert not warming.wanted("a", _plan(0), background=False)  # no block: nothing to read
    assert warming.wanted("a", plan, background=False)  # foreground: always
    assert warming.wanted("a", plan, background=True)
    assert warming.wanted("b", plan, background=True)
    assert not warming.wanted("c", plan, background=True)  # a third session
    assert warming.wanted("x", plan, background=False)
    for _ in range(fact_warming.RECENT_JOBS - 2):
        assert not warming.wanted("a", plan, background=True)  # "b" and "c" still among them
    assert warming.wanted("a", plan, background=True)  # "b" has left the latest jobs
    assert not warming.wanted("a", plan, background=True, served=False)  # appended to only
    assert warming.wanted("a", plan, background=False, served=False)
