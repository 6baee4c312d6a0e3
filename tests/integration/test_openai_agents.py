"""The OpenAI Agents SDK on a LedgerSession: Runner.run with tools, compaction, SIGKILL, verify."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, SQLiteSession, set_tracing_disabled
from cli_helpers import run
from openai_agents_child import CONFIG, FakeModel, add, report

from ctxledger import Config, Host, InvalidSeqError
from ctxledger.domain import CharTokenizer, summary_message
from ctxledger.integrations.openai_agents import LedgerSession, items_to_messages
from ctxledger.testing.processes import child_process, kill

CHILD = Path(__file__).with_name("openai_agents_child.py")
UNMASKED = Config(context_window=10**6, micro_keep_recent=10**4)


def _child(*args: str | Path) -> AbstractContextManager[subprocess.Popen[str]]:
    return child_process(
        [sys.executable, CHILD, *args],
        stderr=None,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def _pairs_intact(items: list[dict[str, Any]]) -> bool:
    """Every output follows its call, and every call is answered, within one model input."""
    calls = [item["call_id"] for item in items if item.get("type") == "function_call"]
    seen: set[str] = set()
    for item in items:
        if item.get("type") == "function_call":
            seen.add(item["call_id"])
        elif item.get("type") == "function_call_output" and item["call_id"] not in seen:
            return False
    outputs = {item["call_id"] for item in items if item.get("type") == "function_call_output"}
    return set(calls) <= outputs


def _system_only_first(items: list[dict[str, Any]]) -> bool:
    """No system or developer message after another kind of item."""
    roles = [item.get("role") in ("system", "developer") for item in items]
    return roles == sorted(roles, reverse=True)


def test_runner_compacts_survives_sigkill_and_verifies(tmp_path: Path) -> None:
    """Bounded, tool-paired model inputs; a SIGKILLed run is continued by the next process."""
    db, inputs = tmp_path / "db", tmp_path / "inputs.jsonl"
    with _child(db, 1, 8, inputs, "--kill-at", 8) as child:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith("KILLME"):
                break
        else:
            pytest.fail(f"the child ended before turn 8's tool ran (exit {child.wait()})")
        assert kill(child) == -signal.SIGKILL
    with Host.open(db) as host:
        last = host.session("agent").current_messages(1)[0]
    assert last.role == "user" and last.content.startswith("Turn 8:")  # stored before the call

    with _child(db, 9, 20, inputs) as rerun:
        out, _ = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, out
    assert "DONE 20" in out

    records = [json.loads(line) for line in inputs.read_text().splitlines()]
    tokens = CharTokenizer()
    sizes = [tokens.count_messages(items_to_messages(r["input"])) for r in records]
    assert max(sizes) <= CONFIG.context_window
    assert all(_pairs_intact(r["input"]) for r in records)
    first_after_kill = next(r["input"] for r in records if r["turn"] == 9)
    assert any(str(i.get("content", "")).startswith("Turn 8:") for i in first_after_kill)
    with Host.open(db) as host:
        session = host.session("agent")
        history_tokens = tokens.count_messages(session.history())
        checkpoints = session.checkpoints()
    assert history_tokens > 2 * CONFIG.context_window and checkpoints
    summaries = {summary_message(c).content for c in checkpoints}  # summary + fact block
    shown = [i.get("content") for r in records for i in r["input"] if i.get("role") == "user"]
    assert summaries & set(shown)  # the model was handed the summaries, user-side
    assert all(_system_only_first(r["input"]) for r in records)
    outputs = [i.get("output") for r in records for i in r["input"]]
    assert "[Previous: used report]" in outputs  # old outputs reach the model masked
    result = run("verify", "--db", db)
    assert result.exit_code == 0 and "0 mismatches" in result.output, result.output


def test_pop_and_clear_match_the_sdks_own_session(tmp_path: Path) -> None:
    """Item by item, pop_item and clear_session do what SQLiteSession does, as events."""
    items: list[Any] = [
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "a", "name": "add", "arguments": "{}", "id": "fa"},
        {"type": "function_call", "call_id": "b", "name": "add", "arguments": "{}", "id": "fb"},
        {"type": "function_call_output", "call_id": "a", "output": "1"},
        {"type": "function_call_output", "call_id": "b", "output": "2"},
    ]

    async def script(session: Any) -> list[Any]:
        seen: list[Any] = []
        await session.add_items(items)
        for _ in range(3):  # an output, an output, then one of two parallel calls
            seen.append(await session.pop_item())
            seen.append(await session.get_items())
        await session.add_items([*items[3:], {"role": "assistant", "content": "ok"}])
        seen.append(await session.get_items())
        seen.append(await session.get_items(limit=2))
        await session.clear_session()
        seen.append(await session.get_items())
        seen.append(await session.pop_item())
        await session.add_items([{"role": "user", "content": "again"}])
        seen.append(await session.get_items())
        return seen

    with Host.open(tmp_path / "db", config=UNMASKED) as host:
        ours = asyncio.run(script(LedgerSession(host.session("s"))))
        # 4 appended, 1 put back by the third pop, 4 merged back by add_items, 1 after the clear:
        assert len(host.session("s").history()) == 10  # nothing was edited
    theirs = asyncio.run(script(SQLiteSession("s", ":memory:")))
    assert ours == theirs
    assert run("verify", "--db", tmp_path / "db").exit_code == 0


def test_pop_refuses_an_item_covered_by_a_summary(tmp_path: Path) -> None:
    """Once the newest shown item is summarised, pop_item raises and changes nothing."""
    small = Config(context_window=600, compression_threshold=0.5, min_retain_rounds=1)
    with Host.open(tmp_path / "db", config=small) as host:
        ledger = host.session("s")
        session = LedgerSession(ledger)

        async def script() -> None:
            for turn in range(6):
                await session.add_items([{"role": "user", "content": f"question {turn} " * 30}])
                await session.add_items([{"role": "assistant", "content": f"answer {turn} " * 30}])
                await session.get_items()
            while True:
                await session.pop_item()

        with pytest.raises(InvalidSeqError, match="covered by checkpoint"):
            asyncio.run(script())
        assert ledger.checkpoints()
        view = asyncio.run(session.get_items())
        summary = {"role": "user", "content": ledger.checkpoints()[-1].summary}
        assert summary in view and view[0]["content"].startswith("question 0")  # kept request
        assert view.index(summary) == 1  # where the view has it, after the kept request


def test_a_run_after_clear_sends_only_the_new_conversation(tmp_path: Path) -> None:
    """Runner.run on a cleared LedgerSession: the model sees only what came after the clear."""
    set_tracing_disabled(True)
    model = FakeModel(tmp_path / "inputs.jsonl")
    agent = Agent(name="clerk", instructions="Help.", model=model, tools=[add, report])
    with Host.open(tmp_path / "db", config=CONFIG) as host:
        session = LedgerSession(host.session("s"))

        async def script() -> None:
            await Runner.run(agent, "first conversation", session=session)
            await session.clear_session()
            await Runner.run(agent, "second conversation", session=session)

        asyncio.run(script())
    inputs = [json.loads(line)["input"] for line in model.inputs.read_text().splitlines()]
    assert inputs[2] == [{"role": "user", "content": "second conversation"}]
