"""LedgerMiddleware with the real ChatAnthropic and ChatOpenAI: roles, usage, reactive retries.

The chat models, their message conversion and their SDK clients are real; the provider is a
local HTTP server (the clients are the part that speaks HTTP). Any warning fails a test
(``filterwarnings = error``), so langchain-anthropic's "non-leading SystemMessage was moved"
warning would too.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import anthropic
import pytest
from cli_helpers import run
from langchain.agents import create_agent
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import AIMessage, HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from ctxledger import Config, ContextOverflowError, Host, Message, Session
from ctxledger.domain import parse_usage, summary_message
from ctxledger.events import UsageReported
from ctxledger.integrations.langchain import LedgerMiddleware
from fake_llm_server import CannedResponse, FakeLLMServer

SYSTEM = "You are a careful coding agent."
SMALL = Config(  # no background compaction: what each attempt does depends on nothing else
    context_window=3000, compression_threshold=0.8, min_retain_rounds=2, prepare_threshold=0
)
THREAD: Any = {"configurable": {"thread_id": "t1"}}
ANTHROPIC_USAGE = {
    "input_tokens": 300,
    "output_tokens": 12,
    "cache_read_input_tokens": 1500,
    "cache_creation_input_tokens": 200,
}
TOO_LONG = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 210184 tokens > 200000 maximum",
    },
}


def _anthropic_body(text: str) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": ANTHROPIC_USAGE,
    }


def _openai_body(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "local",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {
            "prompt_tokens": 2100,
            "completion_tokens": 9,
            "total_tokens": 2109,
            "prompt_tokens_details": {"cached_tokens": 1024},
        },
    }


def _claude(server: FakeLLMServer) -> ChatAnthropic:
    return ChatAnthropic(  # type: ignore[call-arg]
        model="claude-test", base_url=server.url, api_key="-", max_retries=0
    )


def _history(session: Session) -> None:
    """Rounds enough to compact at SMALL's window, and a system message appended late."""
    for turn in range(30):
        session.append_many(
            [
                Message.user(f"question {turn}: " + "details " * 40),
                Message.assistant(f"answer {turn}: " + "because " * 40),
            ]
        )
    session.append(Message.system("From now on, answer in French."))


def _reports(session: Session) -> list[tuple[int, int, int, int]]:
    events = (record.event for record in session._host.log.read(session.id))
    return [
        (e.prompt_tokens, e.completion_tokens, e.cached_tokens, e.cache_write_tokens)
        for e in events
        if isinstance(e, UsageReported)
    ]


def test_claude_gets_the_summary_user_side_and_its_usage_is_recorded(tmp_path: Path) -> None:
    """ChatAnthropic after a compaction: the top-level system is the system prompt alone, the
    summary and the late system message are user-side text, no warning; the answer's usage
    (cache reads and writes) is recorded as record_usage records Anthropic's own usage."""
    with FakeLLMServer() as server, Host.open(tmp_path / "db", config=SMALL) as host:
        server.respond(body=_anthropic_body("Corrigé."))
        _history(host.session("t1"))
        agent = create_agent(
            _claude(server), system_prompt=SYSTEM, middleware=[LedgerMiddleware(host)]
        )
        state = agent.invoke({"messages": [HumanMessage("Fix the failing test")]}, THREAD)
        session = host.session("t1")
        (post,) = [r.json for r in server.requests if r.method == "POST"]
        checkpoint = session.checkpoints()[-1]
        assert state["messages"][-1].content == "Corrigé."
        assert post["system"] in (SYSTEM, [{"type": "text", "text": SYSTEM}])
        user_text = [
            block["text"]
            for turn in post["messages"]
            if turn["role"] == "user"
            for block in (turn["content"] if isinstance(turn["content"], list) else [])
            if block.get("type") == "text"
        ]
        assert summary_message(checkpoint).content in user_text
        assert "From now on, answer in French." in user_text
        assert post["messages"][-1]["role"] == "user"
        expected = parse_usage(ANTHROPIC_USAGE)
        assert _reports(session) == [
            (
                expected.prompt_tokens,
                expected.completion_tokens,
                expected.cached_tokens,
                expected.cache_write_tokens,
            )
        ]
        assert _reports(session)[0] == (2000, 12, 1500, 200)
        assert session.usage().calls == 1
    assert run("verify", "--db", tmp_path / "db").exit_code == 0


def test_openai_gets_one_leading_system_message_and_cached_usage(tmp_path: Path) -> None:
    """ChatOpenAI after a compaction: only the first message is a system message; the usage,
    cached tokens included, is recorded."""
    with FakeLLMServer() as server, Host.open(tmp_path / "db", config=SMALL) as host:
        server.respond(body=_openai_body("Fixed."))
        _history(host.session("t1"))
        model = ChatOpenAI(
            model="local", base_url=server.openai_base_url, api_key="-", max_retries=0
        )  # type: ignore[arg-type]
        agent = create_agent(model, system_prompt=SYSTEM, middleware=[LedgerMiddleware(host)])
        agent.invoke({"messages": [HumanMessage("Fix the failing test")]}, THREAD)
        session = host.session("t1")
        (post,) = [r.json for r in server.requests if r.method == "POST"]
        roles = [message["role"] for message in post["messages"]]
        assert roles[0] == "system" and "system" not in roles[1:]
        assert post["messages"][0]["content"] == SYSTEM
        summary = summary_message(session.checkpoints()[-1]).content
        assert {"role": "user", "content": summary} in post["messages"]
        assert _reports(session) == [(2100, 9, 1024, 0)]


def test_a_prompt_too_long_is_compacted_and_the_call_made_again(tmp_path: Path) -> None:
    """Claude refuses once: the middleware compacts, calls again with the smaller view, and the
    graph's state and the ledger hold the turn once."""
    with FakeLLMServer() as server, Host.open(tmp_path / "db", config=SMALL) as host:
        server.queue(
            CannedResponse(status=400, body=TOO_LONG),
            CannedResponse(body=_anthropic_body("Fixed.")),
        )
        _history(host.session("t1"))
        agent = create_agent(
            _claude(server),
            system_prompt=SYSTEM,
            middleware=[LedgerMiddleware(host)],
            checkpointer=InMemorySaver(),
        )
        state = agent.invoke({"messages": [HumanMessage("Fix the failing test")]}, THREAD)
        posts = [r.json for r in server.requests if r.method == "POST"]
        assert len(posts) == 2
        assert len(json.dumps(posts[1]["messages"])) < len(json.dumps(posts[0]["messages"]))
        assert [type(m) for m in state["messages"]] == [HumanMessage, AIMessage]
        session = host.session("t1")
        assert [c.reason for c in session.checkpoints()].count("prompt_too_long") == 1
        contents = [m.content for m in session.history()]
        assert contents.count("Fix the failing test") == 1 and contents.count("Fixed.") == 1
        assert len(_reports(session)) == 1
    assert run("verify", "--db", tmp_path / "db").exit_code == 0


def test_a_prompt_still_too_long_raises_and_leaves_no_answer(tmp_path: Path) -> None:
    """Claude keeps refusing: ContextOverflowError from its error after the allowed attempts;
    the graph's state holds the question once and no answer."""
    with (
        FakeLLMServer(status=400, body=TOO_LONG) as server,
        Host.open(tmp_path / "db", config=SMALL) as host,
    ):
        _history(host.session("t1"))
        agent = create_agent(
            _claude(server),
            system_prompt=SYSTEM,
            middleware=[LedgerMiddleware(host)],
            checkpointer=InMemorySaver(),
        )
        with pytest.raises(ContextOverflowError, match="reactive compaction") as refused:
            agent.invoke({"messages": [HumanMessage("Fix the failing test")]}, THREAD)
        assert isinstance(refused.value.__cause__, anthropic.BadRequestError)
        session = host.session("t1")
        made = [c for c in session.checkpoints() if c.reason == "prompt_too_long"]
        posts = [r for r in server.requests if r.method == "POST"]
        assert len(posts) == len(made) + 1
        messages = agent.get_state(THREAD).values["messages"]
        assert [m.content for m in messages] == ["Fix the failing test"]
        assert session.history()[-1].content == "Fix the failing test" and _reports(session) == []


def test_the_async_middleware_retries_too(tmp_path: Path) -> None:
    """ainvoke: the same compaction and second call, through awrap_model_call."""
    with FakeLLMServer() as server, Host.open(tmp_path / "db", config=SMALL) as host:
        server.queue(
            CannedResponse(status=400, body=TOO_LONG),
            CannedResponse(body=_anthropic_body("Fixed.")),
        )
        _history(host.session("t1"))
        agent = create_agent(
            _claude(server), system_prompt=SYSTEM, middleware=[LedgerMiddleware(host)]
        )
        state = asyncio.run(agent.ainvoke({"messages": [HumanMessage("Fix it")]}, THREAD))
        assert state["messages"][-1].content == "Fixed."
        assert len([r for r in server.requests if r.method == "POST"]) == 2
        session = host.session("t1")
        assert [c.reason for c in session.checkpoints()].count("prompt_too_long") == 1
        assert _reports(session) == [(2000, 12, 1500, 200)]


def test_other_errors_pass_through(tmp_path: Path) -> None:
    """An error that is no prompt too long reaches the caller unchanged; nothing compacts."""
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    with (
        FakeLLMServer(status=529, body=overloaded) as server,
        Host.open(tmp_path / "db", config=SMALL) as host,
    ):
        agent = create_agent(_claude(server), middleware=[LedgerMiddleware(host)])
        with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
            agent.invoke({"messages": [HumanMessage("hi")]}, THREAD)
        assert host.session("t1").checkpoints() == []
        assert len([r for r in server.requests if r.method == "POST"]) == 1


def test_the_hooks_record_each_answers_usage_once(tmp_path: Path) -> None:
    """create_react_agent with LedgerHooks: the post-model hook and the next pre-model hook both
    see the answer; its usage is recorded once, before it."""
    import warnings

    from langchain_core.language_models import GenericFakeChatModel
    from langgraph.prebuilt import create_react_agent

    from ctxledger.integrations.langchain import LedgerHooks

    usage: Any = {
        "input_tokens": 800,
        "output_tokens": 20,
        "total_tokens": 820,
        "input_token_details": {"cache_read": 500, "cache_creation": 100},
    }
    answers = iter([AIMessage("one", usage_metadata=usage), AIMessage("two", usage_metadata=usage)])
    with Host.open(tmp_path / "db") as host:
        hooks = LedgerHooks(host.session("s"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # create_react_agent is deprecated in favour of v1's
            agent = create_react_agent(
                GenericFakeChatModel(messages=answers),
                [],
                pre_model_hook=hooks.pre_model_hook,
                post_model_hook=hooks.post_model_hook,
                checkpointer=InMemorySaver(),
            )
        for question in ("first", "second"):
            agent.invoke({"messages": [HumanMessage(question)]}, THREAD)
        session = host.session("s")
        assert _reports(session) == [(800, 20, 500, 100)] * 2
        reported = [
            r.event.through_seq
            for r in session._host.log.read("s")
            if isinstance(r.event, UsageReported)
        ]
        assert [m.content for m in session.history()] == ["first", "one", "second", "two"]
        assert reported == [1, 3]  # each measured the prompt that ends before its answer
