"""A scripted chat model for the LangChain tests (langchain_core's BaseChatModel interface).

For a human message it calls both tools at once, for tool results it answers in text. It records
every message list it is given.
"""

from __future__ import annotations

from typing import Any, cast
from uuid import uuid4

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from pydantic import Field


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def report(topic: str) -> str:
    """Write a long report on a topic."""
    return f"Report on {topic}: " + "lorem ipsum dolor sit amet " * 24


class ScriptedChatModel(BaseChatModel):
    """Calls ``add`` and ``report`` for a human message, answers in text after tool results.

    Call ids are random, so that a process started again never repeats one.
    """

    received: list[list[BaseMessage]] = Field(default_factory=list)
    turn: int = 0
    #: The ``usage_metadata`` of every answer (None: the answers report no usage).
    usage: dict[str, Any] | None = None

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.received.append(list(messages))
        last = messages[-1]
        if last.type == "tool":
            reply = AIMessage(content=f"Turn {self.turn} is done. " + "The report says so. " * 8)
        else:
            self.turn += 1
            reply = AIMessage(
                content="",
                tool_calls=[
                    {"name": "add", "args": {"a": self.turn, "b": 1}, "id": f"add-{uuid4().hex}"},
                    {
                        "name": "report",
                        "args": {"topic": f"t{self.turn}"},
                        "id": f"rep-{uuid4().hex}",
                    },
                ],
            )
        if self.usage is not None:
            reply.usage_metadata = cast(Any, dict(self.usage))
        return ChatResult(generations=[ChatGeneration(message=reply)])
