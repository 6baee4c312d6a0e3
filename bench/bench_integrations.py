"""Integration overhead (issue 18): what ctxledger adds to one agent turn of each framework.

One *turn* is one user message: the scripted model calls a tool, the tool runs, the model
answers (two model calls, each reporting its usage, as providers do). Each variant runs the same
turns in one conversation; the table gives the median and p90 wall time per turn and the
median's difference to the framework's own in-memory history, which is the overhead the
integration adds.

* OpenAI Agents SDK, ``Runner.run`` per turn: ``SQLiteSession(":memory:")`` (the SDK's in-memory
  session) against ``LedgerSession`` (the view read once per run) and ``LedgerSession`` with
  ``run_config()`` (the view on every model call).
* LangChain ``create_agent`` with ``InMemorySaver``, without and with ``LedgerMiddleware``.

The drop-ins record a step (the new messages and the view for the next model call) with
``Session.step``, one commit (issue 28). The variants marked "step split" run the same drop-ins
on a session whose ``step`` is ``append_many`` then ``prepare_step`` (two commits, as they
recorded a step before), so that both are measured side by side under the same load.

ctxledger runs with durability ``sync`` (every append and served view on disk before it returns)
and, to tell CPU from fsync, ``none``. The model, the tools and the conversation are identical
across variants, so the difference is the integration's work.

The variant marked "on the domain alone" runs ``LedgerMiddleware`` on a session whose commands
go straight to a :class:`ctxledger.testing.DomainSession` (the same decisions and views, with no
log, no codec, no actors and no fsync): the middleware's own work (its conversions, its
bookkeeping) and the domain's, interleaved with the others under the same load. Under
``sync`` it gives the middleware's floor in the same run: whatever runtime records a turn's
four commits costs at least that, plus three more commits' fsyncs above one commit.

Usage::

    .venv/bin/python bench/bench_integrations.py            # 300 turns per variant
    .venv/bin/python bench/bench_integrations.py --turns 50
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast
from uuid import uuid4

import lmdb
import structlog
from agents import (
    Agent,
    ModelResponse,
    Runner,
    SQLiteSession,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.models.interface import Model
from agents.testing import assistant_message, function_call
from bench_args import positive_int
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from ctxledger import Config, Host, HostOptions, Message, ModelView, Session, ToolCall
from ctxledger.integrations.langchain import LedgerMiddleware
from ctxledger.integrations.openai_agents import LedgerSession
from ctxledger.testing import DomainSession

CONFIG = Config(context_window=128_000)
SDK_BASE = "SDK SQLiteSession(':memory:')"
LANGCHAIN_BASE = "LangChain create_agent + InMemorySaver"
#: The ctxledger variants, each on a host of its own.
LEDGER = (
    "SDK LedgerSession",
    "SDK LedgerSession + run_config()",
    "SDK LedgerSession + run_config(), step split",
    "LangChain + LedgerMiddleware",
    "LangChain + LedgerMiddleware, step split",
)
#: The middleware on a session with no runtime under it (see the module doc).
LANGCHAIN_DOMAIN = "LangChain + LedgerMiddleware on the domain alone"
QUESTION = "Look up the build status of the service and summarise what failed. " * 3
OUTPUT = "step 12 of 40: compiling module, warnings: 0 " * 10


@function_tool
def status_sdk(service: str) -> str:
    """Return the build status of a service."""
    return OUTPUT


@tool
def status(service: str) -> str:
    """Return the build status of a service."""
    return OUTPUT


class SdkModel(Model):
    """Calls the tool for a user message, answers after its output."""

    async def get_response(  # type: ignore[override]
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        last = input[-1] if isinstance(input, list) else {}
        if last.get("type") == "function_call_output":
            output = [assistant_message("The build failed in step 12.", item_id=uuid4().hex)]
        else:
            output = [function_call("status_sdk", {"service": "api"}, call_id=uuid4().hex)]
        # The usage a provider reports with every answer (run_config() records it).
        prompt = len(str(input)) // 3
        usage = Usage(requests=1, input_tokens=prompt, output_tokens=12, total_tokens=prompt + 12)
        return ModelResponse(output=output, usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class ChatModel(BaseChatModel):
    """The same script for LangChain."""

    @property
    def _llm_type(self) -> str:
        return "bench"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ChatModel:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        if messages[-1].type == "tool":
            reply = AIMessage("The build failed in step 12.")
        else:
            call = {"name": "status", "args": {"service": "api"}, "id": uuid4().hex}
            reply = AIMessage("", tool_calls=[call])
        # The usage a provider reports with every answer (the middleware records it).
        prompt = sum(len(str(m.content)) for m in messages) // 3 + 4 * len(messages)
        reply.usage_metadata = {
            "input_tokens": prompt,
            "output_tokens": 12,
            "total_tokens": prompt + 12,
        }
        return ChatResult(generations=[ChatGeneration(message=reply)])


class SplitStep(Session):
    """A session whose ``step`` is ``append_many`` then ``prepare_step``: the same events and
    views as ``Session.step``, in two commits (how the drop-ins recorded a step before it)."""

    def step(
        self, messages: Sequence[Message] = (), pending: str = "", *, usage: object = None
    ) -> ModelView:
        self.append_many(messages, usage=usage)
        return self.prepare_step(pending)

    async def astep(
        self, messages: Sequence[Message] = (), pending: str = "", *, usage: object = None
    ) -> ModelView:
        await self.aappend_many(messages, usage=usage)
        return await self.aprepare_step(pending)


class DomainBacked(Session):
    """A session handle whose commands are a :class:`DomainSession`'s: what the middleware
    calls, decided and served by the domain alone (no log, no codec, no actors, no fsync)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(cast(Any, None), session_id)  # no host: every call below overrides
        self.domain = DomainSession(CONFIG, session_id=session_id)

    def step(
        self, messages: Sequence[Message] = (), pending: str = "", *, usage: object = None
    ) -> ModelView:
        return self.domain.step(messages, pending, usage=usage)

    def append_many(self, messages: Sequence[Message], *, usage: object = None) -> list[int]:
        return self.domain.append_many(messages, usage=usage)

    def record_usage(self, *args: Any, **kwargs: Any) -> None:
        self.domain.record_usage(*args, **kwargs)

    def current_messages(self, limit: int | None = None) -> list[Message]:
        return self.domain.current_messages(limit)

    def prepare_step(self, pending: str = "", *, defer_record: bool = False) -> ModelView:
        return self.domain.prepare_step(pending, defer_record=defer_record)

    def reactive_compact(self, error: object = None) -> Any:
        return self.domain.reactive_compact(error)


def ledger_session(host: Host, session_id: str, split: bool) -> Session:
    """``host.session(session_id)``, as a :class:`SplitStep` when ``split``."""
    session = host.session(session_id)
    return SplitStep(host, session_id) if split else session


def sdk_turn(variant: str, host: Host | None, split: bool = False) -> Callable[[], None]:
    """One ``Runner.run`` per call on a conversation of its own."""
    agent = Agent(name="ops", instructions="Help.", model=SdkModel(), tools=[status_sdk])
    loop = asyncio.new_event_loop()
    if host is None:
        session: Any = SQLiteSession("bench", ":memory:")
        run_config = None
    else:
        session = LedgerSession(ledger_session(host, f"sdk-{variant}", split))
        run_config = session.run_config() if variant == "filter" else None
    return lambda: loop.run_until_complete(
        Runner.run(agent, QUESTION, session=session, run_config=run_config)
    )


def langchain_turn(
    host: Host | None, split: bool = False, domain: bool = False
) -> Callable[[], None]:
    """One ``invoke`` per call on a thread of its own (``domain``: the middleware on a
    :class:`DomainBacked` session, ``host`` unused)."""
    if domain:
        middleware = [LedgerMiddleware(DomainBacked("lc"))]
    else:
        middleware = [] if host is None else [LedgerMiddleware(ledger_session(host, "lc", split))]
    agent = create_agent(ChatModel(), [status], middleware=middleware, checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "bench"}}
    return lambda: agent.invoke({"messages": [HumanMessage(QUESTION)]}, config)


def count_commits(host: Host) -> list[int]:
    """Count the writes ``host`` submits to its log (one durable commit each when turns run alone).

    A turn runs alone, so every submitted write is a group of its own: one commit, one fsync
    under durability ``sync``. The counter wraps the log's ``submit`` on this instance only.
    """
    counter = [0]
    submit = host.log.submit

    def counted(*args: Any, **kwargs: Any) -> Any:
        counter[0] += 1
        return submit(*args, **kwargs)

    host.log.submit = counted  # type: ignore[method-assign]
    return counter


def commit_floor(samples: int = 300) -> float:
    """Median seconds of one small durable LMDB write transaction (the fsync a commit costs)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = lmdb.open(tmp, map_size=1 << 26, sync=True, metasync=True)
        value = b"x" * 1024
        times = []
        for n in range(samples):
            started = time.perf_counter()
            with env.begin(write=True) as txn:
                txn.put(n.to_bytes(8, "big"), value)
            times.append(time.perf_counter() - started)
        env.close()
    return statistics.median(times)


def domain_turns(turns: int) -> list[float]:
    """Seconds a turn of the middleware's four recordings takes in the domain alone.

    The same turn as :func:`langchain_turn` records (``step([user])``, ``append_many([call])``,
    ``step([tool output])``, ``append_many([answer])``, as ``LedgerMiddleware`` calls them),
    driven through :class:`ctxledger.testing.DomainSession`: the decisions and views those
    commands need, with no log, no codec and no actors. Whatever records them costs at least
    this on top of its commits (the middleware's floor beside its fsyncs).
    """
    session = DomainSession(CONFIG, session_id="lc")
    times = []
    for turn in range(turns):
        call = ToolCall(id=f"call-{turn}", name="status", arguments='{"service": "api"}')
        started = time.perf_counter()
        session.step([Message(role="user", content=QUESTION)])
        session.append_many([Message(role="assistant", content="", tool_calls=(call,))])
        session.step([Message(role="tool", content=OUTPUT, tool_call_id=call.id, name="status")])
        session.append_many([Message(role="assistant", content="The build failed in step 12.")])
        times.append(time.perf_counter() - started)
    return times


def run(turns: int, durability: str) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Turns of every variant, interleaved (one of each in turn), so that load hits all alike.

    Returns the per-turn times and, per ctxledger variant, its log commits per turn.
    """
    with tempfile.TemporaryDirectory() as tmp:
        hosts = [
            Host.open(
                Path(tmp) / name,
                config=CONFIG,
                options=HostOptions(durability=durability),  # type: ignore[arg-type]
            )
            for name in LEDGER
        ]
        counters = [count_commits(host) for host in hosts]
        variants = {
            SDK_BASE: sdk_turn("sqlite", None),
            LEDGER[0]: sdk_turn("ledger", hosts[0]),
            LEDGER[1]: sdk_turn("filter", hosts[1]),
            LEDGER[2]: sdk_turn("filter", hosts[2], split=True),
            LANGCHAIN_BASE: langchain_turn(None),
            LEDGER[3]: langchain_turn(hosts[3]),
            LEDGER[4]: langchain_turn(hosts[4], split=True),
            LANGCHAIN_DOMAIN: langchain_turn(None, domain=True),
        }
        times: dict[str, list[float]] = {name: [] for name in variants}
        try:
            for _ in range(turns):
                for name, turn in variants.items():
                    started = time.perf_counter()
                    turn()
                    times[name].append(time.perf_counter() - started)
        finally:
            for host in hosts:
                host.close()
    commits = {name: c[0] / turns for name, c in zip(LEDGER, counters, strict=True)}
    return times, commits


def floor_line(
    commits: dict[str, float], floor: float, times: dict[str, list[float]], turns: int
) -> str:
    """The middleware's floor by its contract, from this run's figures.

    A turn is its commits (each model call's new messages with the view, then its answer,
    durable before the tool it calls runs), so above one commit it costs at least the other
    commits' fsyncs, plus its own work on the domain alone (the ``LANGCHAIN_DOMAIN`` variant:
    its conversions and the domain's decisions, interleaved with the others, no runtime).
    The domain's decisions alone (:func:`domain_turns`, no LangChain) are printed beside it.
    """
    others = commits[LEDGER[3]] - 1
    fsyncs = others * floor * 1000
    own = _paired(times[LANGCHAIN_DOMAIN], times[LANGCHAIN_BASE])
    domain = statistics.median(domain_turns(turns)) * 1000
    least = fsyncs + own
    verdict = "out of reach" if least > 1 else "within reach"
    return (
        f"\n{LEDGER[3]}, the least above one commit by its contract: {others:.1f} more "
        f"commits' fsync floor ({fsyncs:.2f} ms) + the middleware's own work on the domain "
        f"alone (its conversions and the domain's decisions, no log and no actors: "
        f"{own:+.2f} ms a turn over no ledger; the domain's decisions alone, DomainSession, "
        f"{domain:.2f} ms) = {least:.2f} ms: the target (at most +1 ms above one commit) is "
        f"{verdict} in this run"
    )


def _paired(times: list[float], base: list[float]) -> float:
    return statistics.median(a - b for a, b in zip(times, base, strict=True)) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=positive_int, default=300, help="turns per variant (300)")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    set_tracing_disabled(True)
    print(f"{args.turns} turns per variant, interleaved (a tool call and an answer per turn)")
    for durability in ("sync", "none"):
        floor = commit_floor()
        times, commits = run(args.turns, durability)
        print(f"\nctxledger durability {durability!r}", end="")
        if durability == "sync":
            print(
                f"; one durable 1 KiB LMDB commit (the fsync floor), median: {floor * 1000:.3f} ms"
            )
        print("\n")
        print(
            "| variant | median ms/turn | p90 ms/turn | overhead ms/turn (median of pairs)"
            " | commits/turn | fsync floor ms/turn | above one commit's floor ms |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
        bases = {"SDK": SDK_BASE, "Lan": LANGCHAIN_BASE}
        for name, values in times.items():
            base = bases[name[:3]]
            median = statistics.median(values) * 1000
            p90 = sorted(values)[int(len(values) * 0.9)] * 1000
            overhead = None if name == base else _paired(values, times[base])
            extra = "—" if overhead is None else f"{overhead:+.2f}"
            per_turn = commits.get(name)
            counted = "—" if per_turn is None else f"{per_turn:.1f}"
            needed = above = "—"
            if per_turn is not None and durability == "sync":
                needed = f"{per_turn * floor * 1000:.2f}"
            if overhead is not None and durability == "sync":
                above = f"{overhead - floor * 1000:+.2f}"  # the target: at most +1 ms
            print(
                f"| {name} | {median:.2f} | {p90:.2f} | {extra} | {counted} | {needed} | {above} |"
            )
        if durability == "sync":
            print(floor_line(commits, floor, times, args.turns))


if __name__ == "__main__":
    main()
