"""The loss audit on constructed sessions whose summaries drop known facts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ctxledger import Config, InvalidCheckpointError, Message, ToolCall
from ctxledger.domain import audit_checkpoint
from ctxledger.summarizers.base import SummaryRequest
from ctxledger.testing import DomainSession

CONFIG = Config(
    context_window=4000, min_retain_rounds=1, micro_keep_recent=1000, fact_index_chars=0
)


def _drop_round(n: int) -> Any:
    """A summariser that repeats every fact of the request but those of round ``n``."""

    def summarize(request: SummaryRequest) -> str:
        lines = []
        for message in request.messages:
            text = message.content
            for call in message.tool_calls:
                text += " " + json.loads(call.arguments)["command"]
            if f"_{n}." not in text and f"case {n} " not in text and f"round {n}:" not in text:
                lines.append(text)
        return "\n".join(lines)[: request.max_chars]

    return summarize


def _session(summarizer: Any, config: Config = CONFIG) -> DomainSession:
    session = DomainSession(config, summarizer=summarizer)
    session.append(Message.system("rules"))
    for n in range(6):
        call = ToolCall(f"c{n}", "bash", json.dumps({"command": f"pytest tests/test_{n}.py"}))
        session.append_many(
            [
                Message.user(f"round {n}: fix src/mod_{n}.py"),
                Message.assistant("ok", [call]),
                Message.tool(f"E   KeyError: case {n} missing", call.id, "bash"),
                Message.assistant("done"),
            ]
        )
    return session


def test_the_audit_reports_exactly_the_facts_the_summary_dropped() -> None:
    """A summary that drops round 1's facts: exactly those are lost, with their seqs."""
    session = _session(_drop_round(1))
    assert session.compact().compacted
    report = audit_checkpoint(session.state)
    lost = {(fact.kind, fact.text, fact.seq) for fact in report.lost}
    # round 1 is messages 6..9: user #6, call #7, result #8
    assert lost == {
        ("request", "round 1: fix src/mod_1.py", 6),
        ("path", "src/mod_1.py", 6),
        ("command", "pytest tests/test_1.py", 7),
        ("path", "tests/test_1.py", 7),
        ("error", "E KeyError: case 1 missing", 8),
    }
    assert report.counts["error"].lost == 1 and report.counts["error"].kept == 4
    assert report.counts["command"].facts == 5
    assert report.messages == 20 and report.first_seq == 1 and report.covers_through_seq == 21
    assert report.retention == len(report.kept) / report.facts


def test_the_fact_block_brings_the_dropped_facts_back() -> None:
    """The same summary with the fact block on loses nothing."""
    session = _session(_drop_round(1), CONFIG.replace(fact_index_chars=1000))
    assert session.compact().compacted
    report = audit_checkpoint(session.state)
    assert report.lost == () and report.facts > 0


def test_an_incremental_checkpoint_audits_only_what_it_newly_covered() -> None:
    """The second checkpoint's covered messages start at the first one's cut."""
    session = _session(_drop_round(99))
    assert session.compact().compacted
    first = session.state.active_checkpoint
    assert first is not None
    for n in range(6, 9):
        session.append_many(
            [Message.user(f"round {n}: fix src/mod_{n}.py"), Message.assistant("done")]
        )
    assert session.compact().compacted
    report = audit_checkpoint(session.state)
    assert report.previous_checkpoint_id == first.id
    assert report.first_seq == first.retain_from_seq
    assert all(fact.seq >= first.retain_from_seq for fact in (*report.kept, *report.lost))


def test_no_checkpoint_no_audit() -> None:
    """A session without a checkpoint has nothing to audit."""
    with pytest.raises(InvalidCheckpointError, match="no checkpoint"):
        audit_checkpoint(_session(_drop_round(1)).state)
