"""The HTTP summarisers against a real HTTP server on 127.0.0.1 speaking each API's shape."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ctxledger.messages import Message, ToolCall
from ctxledger.summarizers import AnthropicSummarizer, OpenAIChatSummarizer, SummaryRequest
from ctxledger.summarizers._http import HttpSummarizer
from fake_llm_server import CannedResponse, FakeLLMServer
from log_capture import capture_logs

MakeSummarizer = Callable[..., HttpSummarizer]

PREVIOUS = "Summary of messages 1-4\n## User requests\n- [#2] port the parser to msgspec"
FOCUS = "keep the API signatures"


def _request(**changes: object) -> SummaryRequest:
    messages = [
        Message.user("Fix the failing test in tests/test_app.py").with_seq(5),
        Message.assistant(
            "I'll run the tests.", [ToolCall("call_1", "bash", '{"command": "pytest -x"}')]
        ).with_seq(6),
        Message.tool("FAILED tests/test_app.py::test_parse - KeyError: 'id'", "call_1", "bash")
        .with_seq(7),
    ]
    fields: dict[str, object] = {
        "messages": tuple(messages),
        "previous_summary": PREVIOUS,
        "focus": FOCUS,
        "max_chars": 2000,
    }
    fields.update(changes)
    return SummaryRequest(**fields)  # type: ignore[arg-type]


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    """A fake LLM server, stopped after the test."""
    with FakeLLMServer(reply="## Completed work\n- ran pytest -x") as fake:
        yield fake


@pytest.fixture
def openai(server: FakeLLMServer) -> Iterator[OpenAIChatSummarizer]:
    """An OpenAI-compatible summariser pointed at the fake server."""
    with OpenAIChatSummarizer(server.openai_base_url, "fake-gpt", api_key="sk-test") as client:
        yield client


@pytest.fixture
def anthropic(server: FakeLLMServer) -> Iterator[AnthropicSummarizer]:
    """An Anthropic summariser pointed at the fake server."""
    with AnthropicSummarizer("fake-claude", api_key="ak-test", base_url=server.url) as client:
        yield client


@pytest.fixture(params=["openai", "anthropic"])
def make(
    request: pytest.FixtureRequest, server: FakeLLMServer
) -> Iterator[MakeSummarizer]:
    """A factory of summarisers of either provider, pointed at the fake server and closed after."""
    made: list[HttpSummarizer] = []

    def factory(**options: object) -> HttpSummarizer:
        client: HttpSummarizer
        if request.param == "openai":
            client = OpenAIChatSummarizer(
                server.openai_base_url, "fake-model", api_key="k", **options  # type: ignore[arg-type]
            )
        else:
            client = AnthropicSummarizer(
                "fake-model", api_key="k", base_url=server.url, **options  # type: ignore[arg-type]
            )
        made.append(client)
        return client

    yield factory
    for client in made:
        client.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- OpenAI-compatible ---------------------------------------------------------------------------


def test_openai_posts_to_chat_completions_with_bearer_key(
    openai: OpenAIChatSummarizer, server: FakeLLMServer
) -> None:
    """The OpenAI client POSTs {base_url}/chat/completions with a Bearer key and the model."""
    openai(_request())
    sent = server.requests[0]
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.json["model"] == "fake-gpt"
    assert sent.json["temperature"] == 0.0
    assert "max_tokens" not in sent.json


def test_openai_prompt_has_sections_previous_summary_focus_and_messages(
    openai: OpenAIChatSummarizer, server: FakeLLMServer
) -> None:
    """The system message asks for the structured sections; the user message holds the material."""
    openai(_request())
    system, user = server.requests[0].json["messages"]
    assert system["role"] == "system" and user["role"] == "user"
    for title in ("## Completed work", "## Current state and in-progress task",
                  "## Files and identifiers", "## Open problems", "## Decisions", "## Focus"):
        assert title in system["content"]
    assert PREVIOUS in user["content"]
    assert FOCUS in user["content"]
    assert "[#5 user] Fix the failing test in tests/test_app.py" in user["content"]
    assert '→ bash({"command": "pytest -x"})' in user["content"]
    assert "[#7 tool bash] FAILED tests/test_app.py::test_parse" in user["content"]


def test_openai_returns_the_reply(openai: OpenAIChatSummarizer) -> None:
    """The reply's message content is the summary."""
    assert openai(_request()) == "## Completed work\n- ran pytest -x"


def test_openai_sends_max_tokens_and_extra_headers_when_given(server: FakeLLMServer) -> None:
    """max_tokens goes into the body and extra_headers onto the request."""
    with OpenAIChatSummarizer(
        server.openai_base_url, "m", max_tokens=321, extra_headers={"X-Route": "summaries"}
    ) as client:
        client(_request())
    sent = server.requests[0]
    assert sent.json["max_tokens"] == 321
    assert sent.headers["x-route"] == "summaries"


def test_openai_key_defaults_to_the_environment(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without api_key, $OPENAI_API_KEY is sent."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    with OpenAIChatSummarizer(server.openai_base_url, "m") as client:
        client(_request())
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-env"


def test_openai_sends_no_authorization_without_a_key(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local server without a key gets no Authorization header."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with OpenAIChatSummarizer(server.openai_base_url, "m") as client:
        client(_request())
    assert "authorization" not in server.requests[0].headers


def test_openai_reads_content_given_as_text_parts(
    openai: OpenAIChatSummarizer, server: FakeLLMServer
) -> None:
    """Content sent as a list of text parts is joined."""
    server.respond(body={"choices": [{"message": {"content": [
        {"type": "text", "text": "part one, "}, {"type": "text", "text": "part two"}]}}]})
    assert openai(_request()) == "part one, part two"


# --- Anthropic -----------------------------------------------------------------------------------


def test_anthropic_posts_to_messages_with_key_and_version(
    anthropic: AnthropicSummarizer, server: FakeLLMServer
) -> None:
    """The Anthropic client POSTs {base_url}/v1/messages with x-api-key and anthropic-version."""
    anthropic(_request())
    sent = server.requests[0]
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    assert sent.headers["x-api-key"] == "ak-test"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.json["model"] == "fake-claude"


def test_anthropic_prompt_puts_instructions_in_system_and_material_in_the_user_turn(
    anthropic: AnthropicSummarizer, server: FakeLLMServer
) -> None:
    """Instructions are the top-level system text; previous summary and focus are in the turn."""
    anthropic(_request())
    body = server.requests[0].json
    assert "## Open problems" in body["system"]
    [turn] = body["messages"]
    assert turn["role"] == "user"
    assert PREVIOUS in turn["content"] and FOCUS in turn["content"]
    assert "KeyError: 'id'" in turn["content"]


def test_anthropic_derives_max_tokens_from_max_chars(
    anthropic: AnthropicSummarizer, server: FakeLLMServer
) -> None:
    """Without max_tokens, a third of max_chars plus slack is requested (the API needs one)."""
    anthropic(_request(max_chars=3000))
    assert server.requests[0].json["max_tokens"] == 1064


def test_anthropic_returns_the_text_blocks(
    anthropic: AnthropicSummarizer, server: FakeLLMServer
) -> None:
    """The text blocks of content are the summary; other blocks are skipped."""
    server.respond(body={"content": [
        {"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "## Decisions\n- x"}]})
    assert anthropic(_request()) == "## Decisions\n- x"


def test_anthropic_key_defaults_to_the_environment(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without api_key, $ANTHROPIC_API_KEY is sent."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "ak-from-env")
    with AnthropicSummarizer("m", base_url=server.url) as client:
        client(_request())
    assert server.requests[0].headers["x-api-key"] == "ak-from-env"


# --- both: answers, failures and timeouts --------------------------------------------------------


def test_answer_longer_than_max_chars_is_cut(make: MakeSummarizer, server: FakeLLMServer) -> None:
    """An answer longer than max_chars is cut to it."""
    server.respond("- item\n" * 100)
    summary = make()(_request(max_chars=50))
    assert summary is not None and 0 < len(summary) <= 50


def _own(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The summariser's log lines (the calls here run on the test's thread, and only its lines
    are captured: a host left by an earlier test may still log from its own threads, say a
    summary it abandoned finishing; ``compaction_finished`` did, once, under two CPU hogs)."""
    return [e for e in logs if str(e["event"]).startswith("summarizer_")]


@pytest.mark.parametrize("status", [500, 429, 401])
def test_http_error_status_returns_none_and_logs(
    make: MakeSummarizer, server: FakeLLMServer, status: int
) -> None:
    """An HTTP error status gives None and a warning naming the status."""
    server.respond(status=status, body={"error": {"message": "try later"}})
    with capture_logs(this_thread=True) as logs:
        assert make()(_request()) is None
    [event] = _own(logs)
    assert event["event"] == "summarizer_http_error"
    assert event["status"] == status and event["log_level"] == "warning"


def test_malformed_json_returns_none_and_logs(make: MakeSummarizer, server: FakeLLMServer) -> None:
    """A 200 whose body is not JSON gives None and a warning."""
    server.respond(body=b"{not json")
    with capture_logs(this_thread=True) as logs:
        assert make()(_request()) is None
    assert [e["event"] for e in _own(logs)] == ["summarizer_bad_response"]


@pytest.mark.parametrize("body", [{}, {"choices": [], "content": []}, [1, 2], {"content": "x"}])
def test_missing_fields_return_none(
    make: MakeSummarizer, server: FakeLLMServer, body: object
) -> None:
    """A JSON answer without the text where the API puts it gives None."""
    server.respond(body=body)  # type: ignore[arg-type]
    with capture_logs(this_thread=True) as logs:
        assert make()(_request()) is None
    assert [e["event"] for e in _own(logs)] == ["summarizer_bad_response"]


def test_empty_answer_returns_none(make: MakeSummarizer, server: FakeLLMServer) -> None:
    """A blank answer is no summary."""
    server.respond("   \n")
    with capture_logs(this_thread=True) as logs:
        assert make()(_request()) is None
    assert [e["event"] for e in _own(logs)] == ["summarizer_empty_answer"]


def test_slow_response_past_the_timeout_returns_none(
    make: MakeSummarizer, server: FakeLLMServer
) -> None:
    """A response slower than the client's timeout gives None and a timeout warning."""
    server.respond(delay=1.0)
    with capture_logs(this_thread=True) as logs:
        assert make(timeout=0.3)(_request()) is None
    [event] = _own(logs)
    assert event["event"] == "summarizer_timeout" and event["timeout"] == 0.3


def test_connection_refused_returns_none(make: MakeSummarizer) -> None:
    """Nothing listening on the port gives None and a warning."""
    client = make()
    client.url = f"http://127.0.0.1:{_free_port()}/v1/messages"
    with capture_logs(this_thread=True) as logs:
        assert client(_request()) is None
    [event] = _own(logs)
    assert event["event"] == "summarizer_request_failed" and "ConnectError" in event["error"]


def test_unusable_url_returns_none(make: MakeSummarizer) -> None:
    """A URL httpx cannot use (an unsupported scheme) gives None and a warning."""
    client = make()
    client.url = "ftp://127.0.0.1/v1/messages"
    with capture_logs(this_thread=True) as logs:
        assert client(_request()) is None
    assert [e["event"] for e in _own(logs)] == ["summarizer_request_failed"]


def test_client_is_reused_across_calls(make: MakeSummarizer, server: FakeLLMServer) -> None:
    """One summariser serves many requests; a transient error does not break the next call."""
    client = make()
    server.queue(CannedResponse(status=503, body="busy"))
    assert client(_request()) is None
    assert client(_request()) == "## Completed work\n- ran pytest -x"
    assert len(server.requests) == 2


def test_closed_summarizer_returns_none(make: MakeSummarizer, server: FakeLLMServer) -> None:
    """After close(), a call gives None without sending anything."""
    client = make()
    client.close()
    with capture_logs(this_thread=True) as logs:
        assert client(_request()) is None
    assert [e["event"] for e in _own(logs)] == ["summarizer_closed"]
    assert server.requests == []


def test_zero_max_chars_sends_nothing(make: MakeSummarizer, server: FakeLLMServer) -> None:
    """With no room for a summary, nothing is asked and the answer is empty."""
    assert make()(_request(max_chars=0)) == ""
    assert server.requests == []


def test_repr_does_not_show_the_key(make: MakeSummarizer) -> None:
    """repr() names the endpoint and model, never the API key."""
    text = repr(make())
    assert "fake-model" in text and "'k'" not in text and "Bearer" not in text
