"""The demo's host process: one :class:`~ctxledger.Host` driving many agent sessions from threads.

``ctxledger demo`` starts it as a child (``python -m ctxledger.tooling.demo_worker PLAN.json``)
so that it
can SIGKILL it mid-run. Each thread plays one agent: it appends what the agent appends (the
assistant message with its tool calls, then the tool results), asks for the model view before each
model call, and reports the provider's usage. After each step it prints, flushed::

    ack <session> <step> <through_seq> <view_hash> <waited_seconds>

only once ``prepare_step`` returned, so every acknowledged message is durable. A restarted worker
resumes each session where its log ends: a step cut in half by the kill is skipped (recovery
answered its tool calls as interrupted) and the agent carries on with the next one.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import msgspec

from ctxledger._logging import log_to_stderr
from ctxledger.actors.host import Host, HostOptions
from ctxledger.actors.session import Session
from ctxledger.config import Config
from ctxledger.errors import ContextOverflowError
from ctxledger.messages import Message
from ctxledger.tooling.timeline import split_steps
from ctxledger.tooling.traces import read_trace
from ctxledger.tooling.workload import iter_agent_steps

__all__ = ["AgentPlan", "Plan", "agent_steps", "main", "resume_step", "strip_seq"]

#: The error the simulated provider answers when a step is planned to overflow its context.
PROMPT_TOO_LONG = {
    "status_code": 413,
    "error": {
        "type": "request_too_large",
        "message": "prompt is too long: the request exceeds the context window",
    },
}
#: The focus a planned manual compaction asks for.
MANUAL_FOCUS = "keep the public API signatures and the failing test names"


class AgentPlan(msgspec.Struct, frozen=True, kw_only=True):
    """One agent of the demo.

    Attributes:
        session_id: Its session.
        steps: Steps to run (model calls).
        seed: Workload seed (synthetic agents).
        trace: Trace file to replay instead of the workload.
        manual_at: From this step on it asks for a manual compaction with a focus, until one is
            made.
        reactive_at: From this step on the simulated provider rejects the first prompt over
            half the threshold as too long.
    """

    session_id: str
    steps: int
    seed: int | None = None
    trace: str | None = None
    manual_at: int | None = None
    reactive_at: int | None = None

    @property
    def source(self) -> str:
        """``workload`` or ``trace``."""
        return "trace" if self.trace else "workload"


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the worker needs: the log folder, the Config and the agents."""

    db: str
    config: Config
    agents: tuple[AgentPlan, ...]

    def save(self, path: Path) -> None:
        """Write the plan as JSON."""
        path.write_bytes(msgspec.json.encode(self))

    @classmethod
    def load(cls, path: Path) -> Plan:
        """Read a plan written by :meth:`save`."""
        return msgspec.json.decode(path.read_bytes(), type=cls)


def agent_steps(agent: AgentPlan) -> list[list[Message]]:
    """Return the agent's conversation, one list of messages per model call."""
    if agent.trace is not None:
        return list(split_steps(read_trace(agent.trace)))[: agent.steps]
    assert agent.seed is not None
    return list(iter_agent_steps(agent.seed, steps=agent.steps))


def strip_seq(message: Message) -> Message:
    """Return ``message`` without its seq, to compare history with the planned conversation."""
    return msgspec.structs.replace(message, seq=None)


def resume_step(steps: Sequence[Sequence[Message]], history: Sequence[Message]) -> int:
    """Return the index of the first step not yet in ``history``.

    Synthesised ``interrupted`` results do not count; a step cut short by a crash (its assistant
    message appended, its tool results not) counts as done, since recovery answered its calls.
    """
    appended = sum(1 for message in history if not message.metadata.get("synthetic"))
    total = 0
    for index, step in enumerate(steps):
        if total >= appended:
            return index
        total += len(step)
    return len(steps)


class _Out:
    """Whole lines to stdout from many threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def line(self, *parts: object) -> None:
        text = " ".join(map(str, parts)) + "\n"
        with self._lock:
            sys.stdout.write(text)
            sys.stdout.flush()


def drive(session: Session, agent: AgentPlan, out: _Out) -> None:
    """Play ``agent`` on ``session`` from where its log ends to its last step.

    The planned manual compaction is asked for at ``manual_at`` and again at each later step
    until one is made (a compaction needs enough history past the last cut). The simulated
    provider rejects the first prompt from ``reactive_at`` on that fills over half the threshold.
    """
    steps = agent_steps(agent)
    reasons = {checkpoint.reason for checkpoint in session.checkpoints()}
    manual_done = "manual" in reasons
    reactive_done = "prompt_too_long" in reasons
    for index in range(resume_step(steps, session.history()), len(steps)):
        step = steps[index]
        head, rest = step[0], step[1:]
        if head.tool_calls and rest:
            session.append(head)  # the model's answer is durable before the tools run
            session.append_many(rest)
        else:
            session.append_many(step)
        waited = 0.0  # seconds this step waited on a summariser (CompactionResult.waited_seconds)
        if agent.manual_at is not None and index >= agent.manual_at and not manual_done:
            manual = session.compact(MANUAL_FOCUS)
            manual_done, waited = manual.compacted, waited + manual.waited_seconds
        # prepare_step's compaction, run apart so that its result (and wait) can be read; the
        # view served next is the same, since it compacts only when still due.
        waited += session.compact_if_needed().waited_seconds
        view = session.prepare_step()
        if (
            agent.reactive_at is not None
            and index >= agent.reactive_at
            and not reactive_done
            and view.view_tokens * 2 >= session.config.threshold_tokens
        ):
            try:
                reactive = session.reactive_compact(PROMPT_TOO_LONG)
                reactive_done, waited = reactive.compacted, waited + reactive.waited_seconds
            except ContextOverflowError:
                reactive_done = True  # a real agent would fail this step; the demo moves on
            view = session.build_model_view()
        session.record_usage(view.view_tokens)
        out.line("ack", agent.session_id, index, view.through_seq, view.view_hash, f"{waited:.6f}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the plan given as the only argument; return the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m ctxledger.tooling.demo_worker PLAN.json", file=sys.stderr)
        return 2
    log_to_stderr(logging.WARNING)
    plan = Plan.load(Path(args[0]))
    out = _Out()
    failures: list[BaseException] = []

    def run(agent: AgentPlan) -> None:
        try:
            drive(host.session(agent.session_id), agent, out)
        except BaseException as exc:
            failures.append(exc)
            raise

    options = HostOptions(max_active_sessions=len(plan.agents))
    with Host.open(plan.db, config=plan.config, options=options) as host:
        threads = [
            threading.Thread(target=run, args=(agent,), name=f"agent-{agent.session_id}")
            for agent in plan.agents
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if failures:
        return 1
    out.line("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
