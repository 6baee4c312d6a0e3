"""LangChain v1 create_agent with LedgerMiddleware, LangGraph create_react_agent with LedgerHooks.

The model is a scripted chat model (langchain_core's BaseChatModel); tools, graphs, checkpointers
and the ledger are real. The graph's own state keeps every message; the model sees the bounded
view, compacted in the middle of the conversation.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import msgspec
import pytest
from cli_helpers import run
from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_fakes import ScriptedChatModel, add, report
from langgraph.checkpoint.memory import InMemorySaver

from ctxledger import Config, Host, Message
from ctxledger.domain import CharTokenizer, summary_message
from ctxledger.integrations.langchain import LedgerHooks, LedgerMiddleware, to_messages
from ctxledger.testing.processes import child_process, kill

CONFIG = Config(context_window=3000, compression_threshold=0.8, min_retain_rounds=2)
CHILD = Path(__file__).with_name("langchain_child.py")
TOKENS = CharTokenizer()


def _question(turn: int) -> HumanMessage:
    return HumanMessage(f"Turn {turn}: add {turn} and 1, then report on {turn}. " + "please " * 50)


def _pairs_intact(messages: list[Message]) -> bool:
    open_calls: set[str] = set()
    for message in messages:
        if message.role == "tool":
            if message.tool_call_id not in open_calls:
                return False
            open_calls.discard(message.tool_call_id)
        elif open_calls:
            return False
        open_calls |= {call.id for call in message.tool_calls}
    return not open_calls


def _system_only_first(messages: list[BaseMessage]) -> bool:
    kinds = [isinstance(message, SystemMessage) for message in messages]
    return kinds == sorted(kinds, reverse=True)


def _check_run(
    host: Host, session_id: str, received: list[list[BaseMessage]], state: list[BaseMessage]
) -> None:
    """Bounded, paired model inputs; a compaction in the middle; the ledger holds the graph's
    messages; every served view verifies."""
    session = host.session(session_id)
    inputs = [to_messages(messages) for messages in received]
    assert max(TOKENS.count_messages(m) for m in inputs) <= CONFIG.context_window
    assert all(_pairs_intact(m) for m in inputs)
    assert TOKENS.count_messages(session.history()) > 2 * CONFIG.context_window
    summaries = {summary_message(c).content for c in session.checkpoints()}  # + fact block
    with_summary = [i for i, m in enumerate(received) if any(x.content in summaries for x in m)]
    assert with_summary and 0 < with_summary[0] < len(received) - 1  # compacted mid-way
    assert all(isinstance(x, HumanMessage) for m in received for x in m if x.content in summaries)
    assert all(_system_only_first(m) for m in received)  # no system message after another
    assert any(x.content == "[Previous: used report]" for m in received for x in m)  # masked
    assert session.history() == [m.with_seq(i) for i, m in enumerate(to_messages(state), 1)]


def test_create_agent_with_the_middleware(tmp_path: Path) -> None:
    """create_agent: the graph keeps every message, the model gets the bounded view."""
    model = ScriptedChatModel(received=[])
    with Host.open(tmp_path / "db", config=CONFIG) as host:
        agent = create_agent(
            model, [add, report], middleware=[LedgerMiddleware(host)], checkpointer=InMemorySaver()
        )
        config: Any = {"configurable": {"thread_id": "t1"}}
        for turn in range(1, 17):
            state = agent.invoke({"messages": [_question(turn)]}, config)
        assert len(state["messages"]) == 16 * 5  # untouched: question, calls, 2 results, answer
        _check_run(host, "t1", model.received, state["messages"])
    assert run("verify", "--db", tmp_path / "db").exit_code == 0


@pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10")
def test_create_react_agent_with_the_hooks(tmp_path: Path) -> None:
    """create_react_agent: pre_model_hook hands llm_input_messages, the state stays whole."""
    from langgraph.prebuilt import create_react_agent

    model = ScriptedChatModel(received=[])
    with Host.open(tmp_path / "db", config=CONFIG) as host:
        hooks = LedgerHooks(host.session("agent"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # create_react_agent is deprecated in favour of v1's
            agent = create_react_agent(
                model,
                [add, report],
                pre_model_hook=hooks.pre_model_hook,
                post_model_hook=hooks.post_model_hook,
                checkpointer=InMemorySaver(),
            )
        config: Any = {"configurable": {"thread_id": "t1"}}
        for turn in range(1, 17):
            state = agent.invoke({"messages": [_question(turn)]}, config)
        assert len(state["messages"]) == 16 * 5
        _check_run(host, "agent", model.received, state["messages"])
    assert run("verify", "--db", tmp_path / "db").exit_code == 0


def test_async_middleware(tmp_path: Path) -> None:
    """ainvoke goes through awrap_model_call with the same result."""
    import asyncio

    model = ScriptedChatModel(received=[])
    with Host.open(tmp_path / "db", config=CONFIG) as host:
        agent = create_agent(model, [add, report], middleware=[LedgerMiddleware(host.session("s"))])
        state = asyncio.run(agent.ainvoke({"messages": [_question(1)]}))
        assert host.session("s").history() == [
            m.with_seq(i) for i, m in enumerate(to_messages(state["messages"]), 1)
        ]


def test_a_host_needs_a_thread_id(tmp_path: Path) -> None:
    """Without a thread_id there is no session to pick: a clear error."""
    with Host.open(tmp_path / "db") as host:
        agent = create_agent(
            ScriptedChatModel(received=[]), [add], middleware=[LedgerMiddleware(host)]
        )
        with pytest.raises(ValueError, match="thread_id"):
            agent.invoke({"messages": [_question(1)]})


def test_sigkill_and_a_new_process_continue_the_conversation(tmp_path: Path) -> None:
    """The graph's memory dies with the process; the ledger gives the next one the conversation."""
    db, inputs = tmp_path / "db", tmp_path / "inputs.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with child_process(
        [sys.executable, CHILD, db, "1", "6", inputs, "--kill-at", "6"], stderr=None, env=env
    ) as child:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith("KILLME"):
                break
        else:
            pytest.fail(f"the child ended before turn 6's tool ran (exit {child.wait()})")
        assert kill(child) == -signal.SIGKILL
    out = subprocess.run(
        [sys.executable, str(CHILD), db, "7", "14", inputs],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    ).stdout
    assert "DONE 14" in out
    records = [json.loads(line) for line in inputs.read_text().splitlines()]
    inputs_by_turn = [
        (r["turn"], [msgspec.convert(m, Message) for m in r["input"]]) for r in records
    ]
    assert max(TOKENS.count_messages(m) for _, m in inputs_by_turn) <= CONFIG.context_window
    assert all(_pairs_intact(m) for _, m in inputs_by_turn)
    first_after = next(m for turn, m in inputs_by_turn if turn == 7)
    assert any(m.content.startswith("Turn 6:") for m in first_after)  # from before the kill
    assert any(m.role == "tool" and m.content.startswith("[interrupted") for m in first_after)
    with Host.open(db) as host:
        assert host.session("t1").checkpoints()
    assert run("verify", "--db", db).exit_code == 0


def test_each_model_call_is_one_commit_with_its_new_messages(tmp_path: Path) -> None:
    """Before each model call the middleware appends the new messages and serves the view in
    one commit (Session.step); the answer is one more: a turn of two calls is four commits, and
    each call gets the view that ends with the messages just recorded."""
    model = ScriptedChatModel(received=[])
    with Host.open(tmp_path / "db", config=Config(prepare_threshold=0)) as host:
        session = host.session("s")
        submitted: list[int] = []
        submit = host.log.submit

        def counted(*args: Any, **kwargs: Any) -> Any:
            submitted.append(len(args[1]))
            return submit(*args, **kwargs)

        host.log.submit = counted  # type: ignore[method-assign]
        middleware, memory = [LedgerMiddleware(session)], InMemorySaver()
        agent = create_agent(model, [add, report], middleware=middleware, checkpointer=memory)
        config: Any = {"configurable": {"thread_id": "t1"}}
        for turn in range(1, 4):
            before = len(submitted)
            state = agent.invoke({"messages": [_question(turn)]}, config)
            # The first call's batch: the question and the view served; the answer; the second
            # call's: the two tool results and the view; the answer.
            assert submitted[before:] == [2, 1, 3, 1]
        assert [received[-1].type for received in model.received] == ["human", "tool"] * 3
        history = session.history()
        assert [m.content for m in history] == [m.content for m in to_messages(state["messages"])]


def test_an_answer_and_its_usage_are_one_commit(tmp_path: Path) -> None:
    """With a model that reports usage, the answer and its usage (recorded just before it) are
    one commit: a turn of two calls is four commits, as without usage, not six."""
    usage = {"input_tokens": 900, "output_tokens": 30, "total_tokens": 930}
    model = ScriptedChatModel(received=[], usage=usage)
    with Host.open(tmp_path / "db", config=Config(prepare_threshold=0)) as host:
        session = host.session("s")
        batches: list[list[str]] = []
        host._observe_commits(lambda _id, records: batches.append([_name(r) for r in records]))
        agent = create_agent(model, [add, report], middleware=[LedgerMiddleware(session)])
        config: Any = {"configurable": {"thread_id": "t1"}}
        for turn in range(1, 4):
            before = len(batches)
            agent.invoke({"messages": [_question(turn)]}, config)
            asked, answered, results, answered_again = batches[before:]
            assert asked == ["MessageAppended", "ViewServed"]
            assert results == ["MessageAppended", "MessageAppended", "ViewServed"]
            for answer in (answered, answered_again):  # the calibration may ride with the usage
                assert answer[0] == "UsageReported" and answer[-1] == "MessageAppended"
                assert answer.count("MessageAppended") == 1
        reported = [r.event.through_seq for r in host.log.read("s") if _name(r) == "UsageReported"]
        # Each measured the prompt that ends just before its answer (the question, the results).
        assert reported == [1, 4, 6, 9, 11, 14]
        assert session.usage().calls == 6


def _name(record: Any) -> str:
    return type(record.event).__name__


def test_a_bad_usage_count_is_logged_and_the_answer_recorded(tmp_path: Path) -> None:
    """An answer whose usage the session refuses (a negative count) is recorded without it, in
    one commit, and the refusal is logged: the answer is good, a bad count must not lose it."""
    from log_capture import capture_logs

    usage = {"input_tokens": -5, "output_tokens": 30, "total_tokens": 25}
    model = ScriptedChatModel(received=[], usage=usage)
    with Host.open(tmp_path / "db", config=Config(prepare_threshold=0)) as host:
        session = host.session("s")
        agent = create_agent(model, [add, report], middleware=[LedgerMiddleware(session)])
        with capture_logs(this_thread=True) as logs:
            state = agent.invoke(
                {"messages": [_question(1)]}, {"configurable": {"thread_id": "t1"}}
            )
        assert [m.content for m in session.history()] == [
            m.content for m in to_messages(state["messages"])
        ]
        assert not any(_name(r) == "UsageReported" for r in host.log.read("s"))
        refused = [e for e in logs if e["event"] == "usage_not_recorded"]
        assert len(refused) == 2 and refused[0]["session_id"] == "s"
