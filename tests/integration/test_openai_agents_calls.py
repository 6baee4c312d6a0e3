"""Model calls of an OpenAI Agents SDK run on a LedgerSession: usage, reactive retries, roles.

The SDK and its ``Runner`` are real; the model is the SDK's own ``ScriptedModel``, or its
``OpenAIChatCompletionsModel`` talking HTTP to a local fake server (the openai client is the
part that speaks HTTP).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import openai
import pytest
from agents import (
    Agent,
    Model,
    ModelProvider,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from cli_helpers import run
from openai.types.responses.response_usage import InputTokensDetails

from ctxledger import (
    BudgetExceededError,
    Config,
    ContextOverflowError,
    Host,
    Message,
    Pricing,
    Session,
)
from ctxledger.events import UsageReported, ViewServed
from ctxledger.integrations.openai_agents import LedgerSession
from fake_llm_server import CannedResponse, FakeLLMServer

set_tracing_disabled(True)
SMALL = Config(  # no background compaction: what each attempt does depends on nothing else
    context_window=3000, compression_threshold=0.8, min_retain_rounds=2, prepare_threshold=0
)
TOO_LONG = {
    "error": {
        "message": "This model's maximum context length is 3000 tokens. However, your messages "
        "resulted in 5120 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


def _usage(prompt: int, completion: int, cached: int = 0, written: int = 0) -> Usage:
    details = InputTokensDetails(cached_tokens=cached, cache_write_tokens=written)
    return Usage(
        requests=1,
        input_tokens=prompt,
        output_tokens=completion,
        total_tokens=prompt + completion,
        input_tokens_details=details,
    )


def _reports(session: Session) -> list[tuple[int, int, int, int, int]]:
    log = session._host.log
    return [
        (e.prompt_tokens, e.completion_tokens, e.cached_tokens, e.cache_write_tokens, e.through_seq)
        for e in (r.event for r in log.read(session.id))
        if isinstance(e, UsageReported)
    ]


def _history(session: Session, count: int = 30) -> None:
    """Rounds enough for a few compactions at SMALL's window."""
    for turn in range(count):
        session.append_many(
            [
                Message.user(f"question {turn}: " + "details " * 40),
                Message.assistant(f"answer {turn}: " + "because " * 40),
            ]
        )


def test_usage_is_recorded_once_per_call_as_record_usage_would(tmp_path: Path) -> None:
    """Each model call's usage (cached and cache-write tokens too) lands as one report, the
    same reports, totals, cost and estimate as a session fed by record_usage by hand."""
    model = ScriptedModel(
        [
            ModelStep(
                output=[assistant_message("one", item_id="m1")], usage=_usage(1200, 40, 800, 100)
            ),
            ModelStep(
                output=[assistant_message("two", item_id="m2")], usage=_usage(1500, 60, 1100)
            ),
        ]
    )
    agent = Agent(name="clerk", instructions="Help.", model=model)
    with Host.open(tmp_path / "db", config=Config(context_window=32_000)) as host:
        session = LedgerSession(host.session("sdk"))

        async def runs() -> None:
            for task in ("first", "second"):
                await Runner.run(agent, task, session=session, run_config=session.run_config())

        asyncio.run(runs())
        twin = host.session("twin")
        for task, answer, counts in (
            ("first", "one", (1200, 40, 800, 100)),
            ("second", "two", (1500, 60, 1100, 0)),
        ):
            twin.append(Message.user(task))
            twin.prepare_step()
            twin.record_usage(
                counts[0], counts[1], cached_tokens=counts[2], cache_write_tokens=counts[3]
            )
            twin.append(Message.assistant(answer))
        ledger = session.ledger
        assert (
            _reports(ledger) == _reports(twin) == [(1200, 40, 800, 100, 1), (1500, 60, 1100, 0, 3)]
        )
        assert ledger.usage() == twin.usage() and ledger.usage().calls == 2
        pricing = Pricing.preset("anthropic-sonnet")
        assert ledger.cost(pricing) == twin.cost(pricing) > 0
        assert ledger.prepare_step().estimated_tokens == twin.prepare_step().estimated_tokens


def test_the_token_cap_stops_the_next_run(tmp_path: Path) -> None:
    """With max_total_tokens reached by recorded usage, the next run is refused before any
    model call."""
    model = ScriptedModel(
        [
            ModelStep(output=[assistant_message("one", item_id="m1")], usage=_usage(900, 200)),
            ModelStep(output=[assistant_message("two", item_id="m2")], usage=_usage(900, 200)),
        ]
    )
    agent = Agent(name="clerk", instructions="Help.", model=model)
    with Host.open(tmp_path / "db", config=Config(max_total_tokens=1000)) as host:
        session = LedgerSession(host.session("sdk"))
        asyncio.run(Runner.run(agent, "first", session=session, run_config=session.run_config()))
        with pytest.raises(BudgetExceededError, match="1,100 tokens"):
            asyncio.run(
                Runner.run(agent, "second", session=session, run_config=session.run_config())
            )
    assert len(model.calls) == 1 and model.remaining_steps == 1


def _chat_body(text: str, prompt: int, cached: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "local",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": 7,
            "total_tokens": prompt + 7,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }


def _http_agent(server: FakeLLMServer) -> tuple[Agent[Any], openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(base_url=server.openai_base_url, api_key="-", max_retries=0)
    model = OpenAIChatCompletionsModel(model="local", openai_client=client)
    return Agent(name="coder", instructions="You are a careful coding agent.", model=model), client


def test_a_prompt_too_long_is_compacted_and_the_call_sent_again(tmp_path: Path) -> None:
    """A context_length_exceeded answer over HTTP: the run compacts, sends the smaller view,
    succeeds, and stores the turn once in the ledger and in the SDK's session."""
    with FakeLLMServer() as server, Host.open(tmp_path / "db", config=SMALL) as host:
        server.queue(
            CannedResponse(status=400, body=TOO_LONG),
            CannedResponse(body=_chat_body("Fixed it.", 2100, 1024)),
        )
        ledger = host.session("sdk")
        _history(ledger)
        session = LedgerSession(ledger)
        agent, client = _http_agent(server)

        async def turn() -> Any:
            try:
                return await Runner.run(
                    agent, "Fix the failing test", session=session, run_config=session.run_config()
                )
            finally:
                await client.close()

        result = asyncio.run(turn())
        sent = [r.json["messages"] for r in server.requests if r.method == "POST"]
        assert result.final_output == "Fixed it." and len(sent) == 2
        assert len(json.dumps(sent[1])) < len(json.dumps(sent[0]))
        for messages in sent:
            roles = [m["role"] for m in messages]
            assert roles[0] == "system" and "system" not in roles[1:]
            assert messages[-1] == {"role": "user", "content": "Fix the failing test"}
        made = [c for c in ledger.checkpoints() if c.reason == "prompt_too_long"]
        assert len(made) == 1
        contents = [m.content for m in ledger.history()]
        assert contents.count("Fix the failing test") == 1 and contents.count("Fixed it.") == 1
        tail = asyncio.run(session.get_items(limit=2))
        assert [item.get("role") for item in tail] == ["user", "assistant"]
        assert _reports(ledger) == [(2100, 7, 1024, 0, 61)]
    assert run("verify", "--db", tmp_path / "db").exit_code == 0


def test_a_prompt_still_too_long_raises_context_overflow(tmp_path: Path) -> None:
    """A provider that keeps refusing: one more call than compactions, then
    ContextOverflowError from the provider's error, naming what was tried; no answer stored."""
    with (
        FakeLLMServer(status=400, body=TOO_LONG) as server,
        Host.open(tmp_path / "db", config=SMALL) as host,
    ):
        ledger = host.session("sdk")
        _history(ledger)
        session = LedgerSession(ledger)
        agent, client = _http_agent(server)

        async def turn() -> Any:
            try:
                return await Runner.run(
                    agent, "Fix the failing test", session=session, run_config=session.run_config()
                )
            finally:
                await client.close()

        with pytest.raises(ContextOverflowError, match="since the last append") as refused:
            asyncio.run(turn())
        assert isinstance(refused.value.__cause__, openai.BadRequestError)
        made = [c for c in ledger.checkpoints() if c.reason == "prompt_too_long"]
        posts = [r for r in server.requests if r.method == "POST"]
        assert len(posts) == len(made) + 1 and made
        assert f"{len(made)} compacted" in str(refused.value)
        contents = [m.content for m in ledger.history()]
        assert contents.count("Fix the failing test") == 1
        assert ledger.history()[-1].role == "user" and _reports(ledger) == []


def test_a_streamed_call_is_retried_and_its_usage_recorded(tmp_path: Path) -> None:
    """Runner.run_streamed: a rejection before the first event is compacted and streamed again;
    the completed response's usage is recorded."""
    refusal = openai.BadRequestError(
        "Error code: 400 - context_length_exceeded",
        response=_response(400),
        body=TOO_LONG["error"],
    )
    model = ScriptedModel(
        [
            ModelStep.raise_error(refusal),
            ModelStep(output=[assistant_message("streamed", item_id="m1")], usage=_usage(900, 20)),
        ]
    )
    agent = Agent(name="clerk", instructions="Help.", model=model)
    with Host.open(tmp_path / "db", config=SMALL) as host:
        ledger = host.session("sdk")
        _history(ledger)
        session = LedgerSession(ledger)

        async def turn() -> str:
            result = Runner.run_streamed(
                agent, "go on", session=session, run_config=session.run_config()
            )
            async for _ in result.stream_events():
                pass
            return str(result.final_output)

        assert asyncio.run(turn()) == "streamed"
        calls = model.calls
        assert [call.streamed for call in calls] == [True, True]
        assert len(json.dumps(calls[1].input)) < len(json.dumps(calls[0].input))
        assert [c.reason for c in ledger.checkpoints()].count("prompt_too_long") == 1
        assert [r[:2] for r in _reports(ledger)] == [(900, 20)]


def _response(status: int) -> Any:
    import httpx

    return httpx.Response(status, request=httpx.Request("POST", "http://127.0.0.1/v1/responses"))


def test_other_errors_pass_through_untouched(tmp_path: Path) -> None:
    """An error that is not a prompt too long reaches the caller as it is, nothing compacted."""
    model = ScriptedModel([ModelStep.raise_error(RuntimeError("the model is down"))])
    agent = Agent(name="clerk", instructions="Help.", model=model)
    with Host.open(tmp_path / "db", config=SMALL) as host:
        ledger = host.session("sdk")
        _history(ledger)
        session = LedgerSession(ledger)
        with pytest.raises(RuntimeError, match="the model is down"):
            asyncio.run(Runner.run(agent, "go", session=session, run_config=session.run_config()))
        assert all(c.reason != "prompt_too_long" for c in ledger.checkpoints())
        assert len(model.calls) == 1


class _Provider(ModelProvider):
    def __init__(self, model: Model) -> None:
        self.model = model
        self.names: list[str | None] = []

    def get_model(self, model_name: str | None) -> Model:
        self.names.append(model_name)
        return self.model


def test_the_model_and_settings_are_those_the_sdk_would_use(tmp_path: Path) -> None:
    """An agent naming its model gets it from the run's provider, with the name's default
    settings, exactly as without the ledger."""
    plain, ledgered = (
        ScriptedModel([[assistant_message("a", item_id="m1")]]),
        ScriptedModel([[assistant_message("b", item_id="m2")]]),
    )
    agent = Agent(name="clerk", instructions="Help.", model="gpt-5-mini")
    with Host.open(tmp_path / "db") as host:
        session = LedgerSession(host.session("sdk"))
        ours, theirs = _Provider(ledgered), _Provider(plain)
        asyncio.run(Runner.run(agent, "hi", run_config=RunConfig(model_provider=theirs)))
        asyncio.run(
            Runner.run(
                agent, "hi", session=session, run_config=session.run_config(model_provider=ours)
            )
        )
    assert ours.names == theirs.names == ["gpt-5-mini"]
    assert ledgered.calls[0].model_settings == plain.calls[0].model_settings
    assert plain.calls[0].model_settings != ModelSettings()  # the name's defaults mattered


def test_no_system_message_follows_another_item(tmp_path: Path) -> None:
    """A developer message added mid-conversation reaches the model as a user message; the
    leading one stays a system-side message."""
    items: list[Any] = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "developer", "content": "Answer in French from now on."},
        {"role": "user", "content": "how are you?"},
    ]
    with Host.open(tmp_path / "db") as host:
        session = LedgerSession(host.session("sdk"))

        async def script() -> tuple[Any, Any]:
            await session.add_items(items)
            return await session.get_items(), await session.get_items(limit=5)

        view, raw = asyncio.run(script())
    assert [item["role"] for item in view] == ["developer", "user", "assistant", "user", "user"]
    assert view[3]["content"] == "Answer in French from now on."
    assert raw == items  # the SDK's own reads stay verbatim


def test_run_config_refuses_a_second_input_filter(tmp_path: Path) -> None:
    """run_config installs its own call_model_input_filter and says so."""
    with Host.open(tmp_path / "db") as host:
        session = LedgerSession(host.session("sdk"))
        with pytest.raises(ValueError, match="call_model_input_filter"):
            session.run_config(call_model_input_filter=lambda data: data.model_data)


@function_tool
def build_status(service: str) -> str:
    """Return the build status of a service."""
    return f"{service}: step 12 failed"


def test_the_items_and_the_next_calls_view_are_one_commit(tmp_path: Path) -> None:
    """With run_config(), add_items is a Session.step: the items the SDK stores and the view its
    next model call gets are one commit, that call is sent exactly that view (the items just
    stored at its end), and the ledger holds each item once."""
    script = []
    for turn in range(3):
        call = function_call("build_status", {"service": "api"}, call_id=f"c{turn}")
        script += [
            ModelStep(output=[call], usage=_usage(500 + turn, 10)),
            ModelStep(output=[assistant_message(f"done {turn}", item_id=f"m{turn}")]),
        ]
    model = ScriptedModel(script)
    agent = Agent(name="ops", instructions="Help.", model=model, tools=[build_status])
    with Host.open(tmp_path / "db", config=Config(prepare_threshold=0)) as host:
        ledger = host.session("sdk")
        session = LedgerSession(ledger)
        batches: list[int] = []
        submit = host.log.submit

        def counted(*args: Any, **kwargs: Any) -> Any:
            batches.append(len(args[1]))
            return submit(*args, **kwargs)

        host.log.submit = counted  # type: ignore[method-assign]
        per_run = []
        for turn in range(3):
            before = len(batches)
            task = f"task {turn}"
            asyncio.run(Runner.run(agent, task, session=session, run_config=session.run_config()))
            per_run.append(batches[before:])
        # The first run reads a view on its own (later runs start from the view the last answer
        # was stored with); then: the task and the first call's view; the first call's usage
        # report (with its calibration), the call it answered with, its output and the second
        # call's view; the answer and a view (its call reported no usage).
        assert per_run[0] == [1, 2, 5, 2]
        assert per_run[1] == per_run[2] == [2, 5, 2]
        ends = [call.input[-1] for call in model.calls]
        kinds = [item.get("type") or item.get("role") for item in ends]  # type: ignore[union-attr]
        assert kinds == ["user", "function_call_output"] * 3
        served = [r.event for r in host.log.read("sdk") if isinstance(r.event, ViewServed)]
        assert len(served) == 1 + 3 * 3  # a view per step, none served twice
        contents = [m.content for m in ledger.history()]
        assert contents.count("task 1") == 1 and contents.count("done 1") == 1
        assert _reports(ledger) == [(500, 10, 0, 0, 1), (501, 10, 0, 0, 5), (502, 10, 0, 0, 9)]
    assert run("verify", "--db", tmp_path / "db").exit_code == 0


def test_a_usage_held_for_its_answer_is_recorded_before_anything_else(tmp_path: Path) -> None:
    """A call's usage (``hold_usage``, what run_config's model calls) waits for its answer's
    add_items; whatever this session records first (another call's usage, a pop, a clear, a
    view of its own, ``record_usage``) records it alone before it, in order; a report the
    session refuses is logged and records nothing; ``record_usage`` records at once."""
    with Host.open(tmp_path / "db", config=Config(prepare_threshold=0)) as host:
        ledger = host.session("sdk")
        session = LedgerSession(ledger)

        def names() -> list[str]:
            return [type(r.event).__name__ for r in host.log.read("sdk")][1:]

        async def drive() -> None:
            await session.add_items([{"role": "user", "content": "hi"}])
            await session.hold_usage(_usage(300, 5))
            assert "UsageReported" not in names()  # held for the answer
            await session.hold_usage(_usage(310, 6))  # a second call: the first goes alone
            assert names().count("UsageReported") == 1
            await session.add_items([assistant_message("hello", item_id="m1")])  # type: ignore[list-item]
            await session.hold_usage(_usage(320, 7))
            await session.pop_item()
            await session.hold_usage(_usage(-1, 7))  # refused: logged, nothing held
            await session.clear_session()
            await session.hold_usage(_usage(330, 8))
            await session.get_items()
            await session.hold_usage(_usage(340, 9))
            await session.record_usage(_usage(350, 9))  # now: after the one held
            assert names()[-2:] == ["UsageReported", "UsageReported"]

        asyncio.run(drive())
        assert [(p, t) for p, _c, _k, _w, t in _reports(ledger)] == [
            (300, 1), (310, 1), (320, 2), (330, 2), (340, 2), (350, 2)
        ]  # fmt: skip
        order = [n for n in names() if n != "TokenizerCalibrated"]
        assert order[:5] == [
            "MessageAppended", "UsageReported", "UsageReported", "MessageAppended",
            "UsageReported",
        ]  # fmt: skip
        # The view get_items() served is recorded with the session's next write (defer_record).
        assert order[5:] == [
            "MessageRetracted", "HistoryCleared", "UsageReported", "ViewServed", "UsageReported",
            "UsageReported",
        ]  # fmt: skip
