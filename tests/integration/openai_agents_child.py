"""A child process for the OpenAI Agents SDK tests: an agent with two tools on a LedgerSession.

    python openai_agents_child.py DB FIRST LAST INPUTS [--kill-at TURN]

runs user turns FIRST..LAST (one ``Runner.run`` each) against :class:`FakeModel`, a scripted
model behind the SDK's own ``Model`` interface: for a user message it calls both tools in
parallel, for tool outputs it answers in text. Every model input is appended to INPUTS (JSON
lines). With ``--kill-at`` the ``report`` tool of that turn prints ``KILLME`` and waits, so that
the parent kills the process with SIGKILL in the middle of a run.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import structlog
from agents import Agent, ModelResponse, Runner, Usage, function_tool, set_tracing_disabled
from agents.models.interface import Model
from agents.testing import assistant_message, function_call

from ctxledger import Config, Host
from ctxledger.integrations.openai_agents import LedgerSession

CONFIG = Config(context_window=3000, compression_threshold=0.8, min_retain_rounds=2)
KILL_AT: int | None = None
TURN = 0


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@function_tool
def report(topic: str) -> str:
    """Write a long report on a topic."""
    if TURN == KILL_AT:
        print("KILLME", flush=True)
        time.sleep(120)
    return f"Report on {topic}: " + "lorem ipsum dolor sit amet " * 24


class FakeModel(Model):
    """Scripted replies through the SDK's model interface; records every input it is given."""

    def __init__(self, inputs: Path) -> None:
        self.inputs = inputs
        self.calls = 0

    async def get_response(  # type: ignore[override]
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        with self.inputs.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"turn": TURN, "input": items}, default=str) + "\n")
        self.calls += 1
        last = items[-1]
        if last.get("type") == "function_call_output":
            text = f"Turn {TURN} is done. " + "The report says lorem ipsum. " * 8
            output = [assistant_message(text, item_id=f"msg-{TURN}")]
        else:
            output = [
                function_call("add", {"a": TURN, "b": 1}, call_id=f"call-add-{TURN}"),
                function_call("report", {"topic": f"topic {TURN}"}, call_id=f"call-rep-{TURN}"),
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover
        raise NotImplementedError


async def main(db: Path, first: int, last: int, inputs: Path) -> None:
    global TURN
    set_tracing_disabled(True)
    structlog.configure(logger_factory=structlog.stdlib.LoggerFactory())  # quiet: stdlib logging
    agent = Agent(name="clerk", instructions="Help.", model=FakeModel(inputs), tools=[add, report])
    with Host.open(db, config=CONFIG) as host:
        session = LedgerSession(host.session("agent"))
        for TURN in range(first, last + 1):
            result = await Runner.run(
                agent,
                f"Turn {TURN}: add {TURN} and 1, then report on topic {TURN}. " + "please " * 50,
                session=session,
                run_config=session.run_config(),
            )
            print(f"DONE {TURN} {result.final_output[:20]}", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--kill-at" in args:
        at = args.index("--kill-at")
        KILL_AT = int(args[at + 1])
        del args[at : at + 2]
    asyncio.run(main(Path(args[0]), int(args[1]), int(args[2]), Path(args[3])))
