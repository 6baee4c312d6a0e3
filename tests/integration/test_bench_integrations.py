"""bench/bench_integrations.py runs end to end, and its floor is the middleware's own work;
bench/bench_view_hash.py runs.

The bench measures; nothing here checks a timing. What is checked is that every variant ran
and has its row, that the variant "on the domain alone" drives ``LedgerMiddleware`` through
exactly the commands a host session gets (so the floor it gives is the middleware's work on the
same turns), and that the floor line's verdict follows from the run's figures.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest
from bench_helpers import load_bench, run_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    """bench/bench_integrations.py as a module."""
    return load_bench("bench_integrations")


def test_a_short_run_prints_every_variant_and_the_floor() -> None:
    result = run_bench("bench_integrations.py", "--turns", "3", timeout=600)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for durability in ("'sync'", "'none'"):
        assert f"ctxledger durability {durability}" in out
    rows = [line for line in out.splitlines() if line.startswith("| LangChain + LedgerMiddleware")]
    assert len(rows) == 6  # three variants, under both durabilities
    domain_rows = [row for row in rows if "on the domain alone" in row]
    assert len(domain_rows) == 2
    assert all(row.split("|")[5].strip() == "—" for row in domain_rows)  # no log: no commits
    # (the first turn also creates the session: a commit more over three turns)
    assert re.search(r"the least above one commit by its contract: 3\.\d more commits", out)


def test_the_domain_alone_gets_the_commands_a_host_session_gets(
    bench: ModuleType, tmp_path: Path
) -> None:
    """The same turns through the middleware on a host session and on the domain alone record
    the same history and serve the same views (the domain makes every decision the host does)."""
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from ctxledger import Host
    from ctxledger.integrations.langchain import LedgerMiddleware

    domain = bench.DomainBacked("lc")
    with Host.open(tmp_path / "db", config=bench.CONFIG) as host:
        session = host.session("lc")
        for source in (session, domain):
            agent = create_agent(
                bench.ChatModel(),
                [bench.status],
                middleware=[LedgerMiddleware(source)],
                checkpointer=InMemorySaver(),
            )
            for _ in range(3):
                agent.invoke(
                    {"messages": [HumanMessage(bench.QUESTION)]},
                    {"configurable": {"thread_id": "t"}},
                )
        assert len(session.history()) == 12  # a question, a call, its result, an answer
        # The tool call ids are the model's (random): compare what the ids do not change.
        shown = [(m.role, m.content, m.name) for m in session.history()]
        assert shown == [(m.role, m.content, m.name) for m in domain.domain.history()]
        served = [v.estimated_tokens for v in _views(host.log, "lc")]
        assert len(served) == 6  # one view per model call
        assert served == [e.estimated_tokens for e in _domain_views(domain)]


def _views(log: object, session_id: str) -> list[object]:
    from ctxledger.events import ViewServed

    return [r.event for r in log.read(session_id) if isinstance(r.event, ViewServed)]  # type: ignore[attr-defined]


def _domain_views(domain: object) -> list[object]:
    from ctxledger.events import ViewServed

    return [e for e in domain.domain.events if isinstance(e, ViewServed)]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("own_ms", "verdict"), [(0.20, "out of reach"), (0.05, "within reach")])
def test_the_floor_line_adds_the_other_commits_fsyncs_to_the_own_work(
    bench: ModuleType, own_ms: float, verdict: str
) -> None:
    """Four commits at 0.3 ms each: three more fsyncs (0.9 ms) above one commit, plus the
    middleware's own work on the domain alone (its median paired difference to no ledger)."""
    base = [0.010] * 5
    times = {bench.LANGCHAIN_BASE: base, bench.LANGCHAIN_DOMAIN: [t + own_ms / 1000 for t in base]}
    commits = {bench.LEDGER[3]: 4.0}
    line = bench.floor_line(commits, 0.0003, times, turns=2)
    assert "3.0 more commits' fsync floor (0.90 ms)" in line
    assert f"{own_ms:+.2f} ms a turn over no ledger" in line
    assert f"= {0.9 + own_ms:.2f} ms" in line
    assert line.endswith(f"is {verdict} in this run")


def test_bench_view_hash_prints_a_row_per_size() -> None:
    """bench/bench_view_hash.py runs (a smoke run: three repetitions per size)."""
    result = run_bench("bench_view_hash.py", "--reps", "3")
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if re.match(r"\| \d+ \|", line)]
    assert [int(line.split("|")[1]) for line in rows] == [8, 16, 32, 64, 128, 256, 512]
    assert all(len(line.split("|")) == 6 for line in rows)  # three figures a row
