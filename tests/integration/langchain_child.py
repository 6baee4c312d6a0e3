"""A child process for the LangChain tests: ``create_agent`` with LedgerMiddleware on a host.

    python langchain_child.py DB FIRST LAST INPUTS [--kill-at TURN]

runs user turns FIRST..LAST on thread ``t1`` (the graph's memory is an ``InMemorySaver``, lost
with the process; the ledger keeps the conversation) against :class:`ScriptedChatModel`; every
message list the model receives is appended to INPUTS (JSON lines). With ``--kill-at`` the
``report`` tool of that turn prints ``KILLME`` and waits for SIGKILL.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import structlog
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langchain_fakes import ScriptedChatModel, add
from langgraph.checkpoint.memory import InMemorySaver

from ctxledger import Config, Host
from ctxledger.integrations.langchain import LedgerMiddleware, to_messages

CONFIG = Config(context_window=3000, compression_threshold=0.8, min_retain_rounds=2)
KILL_AT: int | None = None
TURN = 0


@tool
def report(topic: str) -> str:
    """Write a long report on a topic."""
    if TURN == KILL_AT:
        print("KILLME", flush=True)
        time.sleep(120)
    return f"Report on {topic}: " + "lorem ipsum dolor sit amet " * 24


class RecordingModel(ScriptedChatModel):
    """Appends every message list it receives to a file, as ctxledger messages."""

    inputs: str = ""

    def _generate(self, messages, stop=None, run_manager=None, **kw):  # type: ignore[no-untyped-def]
        with open(self.inputs, "a", encoding="utf-8") as out:
            record = [msgspec_json(m) for m in to_messages(messages)]
            out.write(json.dumps({"turn": TURN, "input": record}) + "\n")
        return super()._generate(messages, stop, run_manager, **kw)


def msgspec_json(message):  # type: ignore[no-untyped-def]
    import msgspec

    return msgspec.to_builtins(message)


def main(db: Path, first: int, last: int, inputs: Path) -> None:
    global TURN
    structlog.configure(logger_factory=structlog.stdlib.LoggerFactory())
    model = RecordingModel(received=[], inputs=str(inputs))
    with Host.open(db, config=CONFIG) as host:
        agent = create_agent(
            model, [add, report], middleware=[LedgerMiddleware(host)], checkpointer=InMemorySaver()
        )
        config = {"configurable": {"thread_id": "t1"}}
        for TURN in range(first, last + 1):
            text = f"Turn {TURN}: add {TURN} and 1, then report on topic {TURN}. " + "please " * 50
            state = agent.invoke({"messages": [HumanMessage(text)]}, config)
            print(f"DONE {TURN} {len(state['messages'])}", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--kill-at" in args:
        at = args.index("--kill-at")
        KILL_AT = int(args[at + 1])
        del args[at : at + 2]
    main(Path(args[0]), int(args[1]), int(args[2]), Path(args[3]))
