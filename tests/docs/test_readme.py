"""The README's code runs: the quickstart against a fake LLM endpoint, the event-log example."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ctxledger import replay
from ctxledger.events import UsageReported
from ctxledger.storage import LmdbEventLog
from fake_llm_server import CannedResponse, FakeLLMServer

README = Path(__file__).resolve().parents[2] / "README.md"
_BLOCK = re.compile(r"(<!-- readme-test: run -->\n)?```python\n(.*?)```", re.DOTALL)


def _blocks() -> list[tuple[bool, str]]:
    """Every python block of the README, and whether it is marked to be run."""
    return [(bool(marker), code) for marker, code in _BLOCK.findall(README.read_text("utf-8"))]


def _runnable() -> list[str]:
    return [code for run, code in _blocks() if run]


def test_readme_has_eight_runnable_examples() -> None:
    """The quickstart, the two framework, the event-log, the PostgreSQL, the property-testing,
    the DomainSession and the compaction-inspection examples are marked to be run."""
    assert len(_runnable()) == 8


def test_quickstart_is_at_most_20_lines() -> None:
    """The quickstart fits in 20 lines."""
    assert len(_runnable()[0].splitlines()) <= 20


def test_framework_examples_are_at_most_15_lines() -> None:
    """"With the OpenAI Agents SDK" and "With LangChain" each fit in 15 lines."""
    text = README.read_text("utf-8")
    for heading, index in (("### With the OpenAI Agents SDK", 1), ("### With LangChain", 2)):
        section = text[text.index(heading) :]
        assert _runnable()[index] in section[: section.index("\n### ", 1)]
        assert len(_runnable()[index].splitlines()) <= 15


@pytest.mark.parametrize("index", range(len(_blocks())))
def test_every_python_block_compiles(index: int) -> None:
    """Every python block of the README is valid Python."""
    compile(_blocks()[index][1], f"README.md block {index}", "exec")


def test_quickstart_runs_an_agent_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The quickstart talks to an OpenAI-compatible endpoint, keeps every message and says what
    it did; run twice, it continues the session with one system message at its head."""
    monkeypatch.chdir(tmp_path)
    printed: list[list[str]] = []
    with FakeLLMServer(reply="I fixed it.") as server:
        monkeypatch.setenv("LLM_BASE_URL", server.openai_base_url)
        for _ in range(2):
            namespace: dict[str, object] = {"__name__": "readme"}
            exec(compile(_runnable()[0], "README quickstart", "exec"), namespace)
            namespace["llm"].close()  # type: ignore[attr-defined]
            printed.append(capsys.readouterr().out.splitlines())
        posts = [r for r in server.requests if r.method == "POST"]
    assert [r.path for r in posts] == ["/v1/chat/completions"] * 4
    assert posts[1].json["messages"][-1] == {"role": "user", "content": "Add a regression test"}
    roles = [[m["role"] for m in post.json["messages"]] for post in posts]
    assert all(r[0] == "system" and "system" not in r[1:] for r in roles)
    history = replay.rebuild(tmp_path / "agent-db", "agent-7").history
    assert [m.role for m in history] == ["system"] + ["user", "assistant"] * 4
    with LmdbEventLog.open(tmp_path / "agent-db", readonly=True) as log:
        reports = [r.event for r in log.read("agent-7") if isinstance(r.event, UsageReported)]
    assert [(u.prompt_tokens, u.completion_tokens) for u in reports] == [(1, 1)] * 4
    where = f"0 compactions; the log is in {tmp_path / 'agent-db'}"
    assert printed[0][-1] == printed[1][-1] == where
    sent = [len(post.json["messages"]) for post in posts]
    assert [line.split()[1] for run in printed for line in run[:2]] == [str(n) for n in sent]
    assert printed[0][:2] == _example_output()[:2]  # the README shows the first run's output


def _example_output() -> list[str]:
    """The lines of the text block after the quickstart."""
    text = README.read_text("utf-8")
    after = text[text.index("It prints what it sends") :]
    block = after[after.index("```text\n") + 8 :]
    return block[: block.index("\n```")].splitlines()


def test_openai_agents_example_runs_two_turns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Agents SDK example runs Runner.run twice on a LedgerSession; the second turn sees the
    first, and each call's usage is recorded."""
    monkeypatch.chdir(tmp_path)
    with FakeLLMServer(reply="I fixed it.") as server:
        monkeypatch.setenv("LLM_BASE_URL", server.openai_base_url)
        exec(compile(_runnable()[1], "README agents", "exec"), {"__name__": "readme"})
        posts = [r for r in server.requests if r.method == "POST"]
    assert [r.path for r in posts] == ["/v1/chat/completions"] * 2
    assert [m["content"] for m in posts[1].json["messages"][1:]] == [
        "Fix the failing test in tests/test_app.py",
        "I fixed it.",
        "Add a regression test",
    ]
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(" UsageTotals(")[0] for line in printed] == ["I fixed it."] * 2
    assert "calls=1" in printed[0] and "calls=2" in printed[1]
    history = replay.rebuild(tmp_path / "sdk-db", "agent-7").history
    assert [m.role for m in history] == ["user", "assistant", "user", "assistant"]
    assert replay.verify(tmp_path / "sdk-db").ok


def test_langchain_example_keeps_the_conversation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The LangChain example answers twice through ChatAnthropic (a local server in place of
    the API); the ledger holds both exchanges of the thread and the usage of both calls."""
    monkeypatch.chdir(tmp_path)
    with FakeLLMServer() as server:
        server.queue(CannedResponse(reply="Fixed."), CannedResponse(reply="Added."))
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "-")
        exec(compile(_runnable()[2], "README langchain", "exec"), {"__name__": "readme"})
        posts = [r.json for r in server.requests if r.method == "POST"]
    assert [post["system"] for post in posts] == ["You are a careful coding agent."] * 2
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(" UsageTotals(")[0] for line in printed] == ["Fixed.", "Added."]
    assert "calls=2" in printed[1]
    history = replay.rebuild(tmp_path / "lc-db", "user-42").history
    assert [m.content for m in history] == [
        "Fix the failing test in tests/test_app.py",
        "Fixed.",
        "Add a regression test",
        "Added.",
    ]
    assert replay.verify(tmp_path / "lc-db").ok


def test_event_log_example_prints_the_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The event-log example appends a batch and reads it back in order."""
    monkeypatch.chdir(tmp_path)
    exec(compile(_runnable()[3], "README event log", "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out.splitlines() == ["1 1 SessionOpened", "2 2 MessageAppended"]


@pytest.mark.postgres
def test_postgres_example_runs_a_host_on_postgres(
    pg_database: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The PostgreSQL example opens a host on the URI in CTXLEDGER_PG_DSN and appends there."""
    monkeypatch.setenv("CTXLEDGER_PG_DSN", pg_database)
    exec(compile(_runnable()[4], "README postgres", "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out.splitlines()[-1] == "Why does the nightly build fail?"
    history = replay.rebuild(pg_database, "ticket-4711").history
    assert [m.content for m in history] == ["Why does the nightly build fail?"]


def test_property_testing_example_collects_a_test_case() -> None:
    """The property-testing example builds a SessionMachine whose TestCase runs its rules."""
    from hypothesis import settings

    namespace: dict[str, object] = {"__name__": "readme"}
    exec(compile(_runnable()[5], "README property testing", "exec"), namespace)
    case = namespace["TestMyPolicy"]
    quick = settings(max_examples=2, stateful_step_count=8, deadline=None)
    case.settings = quick  # type: ignore[attr-defined]
    case("runTest").runTest()  # type: ignore[operator]


def test_domain_session_example_compacts_checks_and_reverts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The DomainSession example: views checked, a compaction at the threshold, then reverted
    to the one before it (ids from the kit's counter)."""
    namespace: dict[str, object] = {"__name__": "readme"}
    exec(compile(_runnable()[6], "README domain session", "exec"), namespace)
    session = namespace["session"]
    events, active, restored = capsys.readouterr().out.split()
    made = list(dict.fromkeys(c.id for c in session.checkpoints()))  # type: ignore[attr-defined]
    assert int(events) > 24 and len(made) >= 2
    assert active == made[-1] and restored == made[-2]


def test_inspection_example_audits_explains_recalls_and_reverts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The compaction-inspection example prints an audit, a placement, hits and a revert."""
    monkeypatch.chdir(tmp_path)
    exec(compile(_runnable()[7], "README inspection", "exec"), {"__name__": "readme"})
    lines = capsys.readouterr().out.splitlines()
    state = replay.rebuild(tmp_path / "audit-db", "agent-8")
    made = list(dict.fromkeys(checkpoint.id for checkpoint in state.checkpoints))
    assert lines[0].startswith(f"{made[-1]} [('path', ")
    assert lines[1].startswith("#4 is summarised: checkpoint ")
    assert lines[2].startswith("RecallHit(seq=6, role='tool'")
    assert lines[4].startswith("#8 assistant (bash), summarized:")
    assert lines[-1] == made[-2] == state.view.checkpoint_id
