"""A deterministic, built-in workload: synthetic coding-agent conversations of realistic sizes.

The demo and the benchmarks drive sessions with it. Every conversation is a function of its
seed alone (one ``random.Random(seed)`` per conversation, no global state) and is prefix-stable:
the first N steps are the same whatever number of steps is asked for. All text is made here from
templates and seeded choices (module and function names, error types, line numbers); nothing is
copied from real traces.

Each seed gets a small fictional Python project (a package of 4-6 subpackages with 3-6 modules
each, whose source is generated on first use) and an agent working on it. The mix:

============  ==========================================================================
step          what is appended before the agent would call the model
============  ==========================================================================
first         the system prompt (tools, rules, repository layout: ~3.3 KB) + a user request
agent step    an assistant message (observations, sometimes a numbered plan, the intent:
              200-1,600 chars with its calls) with one tool call, or with 2-4 parallel
              ``read_file``/``grep`` calls (15% of steps), then one result per call
turn end      after 2-40 agent steps (median 9): a final assistant reply naming the changed
              files and the test command, then a new user request (a fifth paste a CI log)
============  ==========================================================================

Tool calls and their results, measured over seeds 0-9 with 1,000 steps each (sizes in chars,
every result clipped to 200 B - 40 KB):

==============  ======  ========  ========  ===============================================
tool            share   p50       p90       result
==============  ======  ========  ========  ===============================================
``read_file``    33%    2.3 K     5.7 K     numbered listing of a module or a line range
``grep``         23%    1.0 K     3.1 K     ``path:line:text`` matches of a function name
``bash``         22%    0.5 K     1.9 K     ``ls -la(R)``, ``find``, ``git status/diff/log``,
                                            ``wc -l``, ``sed -n``, ``pip install -e .``,
                                            ``python -c`` ending in a traceback
``run_tests``    12%    3.5 K     13.6 K    a pytest session: progress lines, failures with
                                            tracebacks into ``src/`` and ``E`` lines, summary
``edit_file``    10%    0.9 K     2.0 K     edit summary and the edited lines; the call
                                            carries the old and new code
==============  ======  ========  ========  ===============================================

Early steps of a turn lean to ``grep``/``read_file``, late steps to ``edit_file``/``run_tests``.
Message sizes (content plus tool-call names and arguments, as the budget counts them; the
text is ASCII, so characters are bytes) run from ~200 B to 40 KB: :func:`workload_stats` prints
the distribution of any generated list.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ctxledger.domain.tokenizer import message_chars
from ctxledger.messages import Message, ToolCall
from ctxledger.tooling import _workload_repo as repo
from ctxledger.tooling import _workload_speech as speech

__all__ = [
    "MAX_MESSAGE_CHARS",
    "MIN_MESSAGE_CHARS",
    "WorkloadStats",
    "generate_conversation",
    "iter_agent_steps",
    "take_messages",
    "workload_stats",
]

#: Every generated message is at least this long (content plus tool-call names and arguments).
MIN_MESSAGE_CHARS = 200
#: No generated message is longer than this (content plus tool-call names and arguments).
MAX_MESSAGE_CHARS = 40_000

# (tool, weight of single calls, median result chars, log-normal sigma). Parallel steps add
# read_file and grep calls on top; the module docstring gives the resulting measured shares.
_TOOLS = (
    ("read_file", 0.20, 2500, 0.9),
    ("bash", 0.30, 1000, 1.0),
    ("grep", 0.10, 1000, 0.9),
    ("edit_file", 0.20, 900, 0.6),
    ("run_tests", 0.20, 3000, 1.1),
)
# Weights by phase of a turn: exploring, changing, checking.
_PHASE_WEIGHTS = {
    "explore": (5, 3, 5, 0.5, 1),
    "change": (3, 2, 1, 4, 1.5),
    "check": (1, 3, 0.5, 1.5, 4),
}
_PARALLEL_SHARE = 0.15


def _sized(rng: random.Random, median: float, sigma: float) -> int:
    """Draw a target size from a log-normal around ``median``, clipped to the message range."""
    size = int(median * math.exp(rng.gauss(0.0, sigma)))
    return max(MIN_MESSAGE_CHARS, min(size, MAX_MESSAGE_CHARS))


def _turn_length(rng: random.Random) -> int:
    """Agent steps in one user turn: 2-40, median about 10 (a skewed, long-tailed draw)."""
    return max(2, min(40, round(10 * math.exp(rng.gauss(0.0, 0.6)))))


class _Agent:
    """Produces the steps of one seeded conversation, endlessly."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.project = repo.Project(seed, self.rng)
        self._ids = itertools.count(1)
        self._tools = [name for name, *_ in _TOOLS]
        self._shape = {name: (median, sigma) for name, _, median, sigma in _TOOLS}
        self._weights = {
            phase: [share * w for (_, share, *_), w in zip(_TOOLS, weights, strict=True)]
            for phase, weights in _PHASE_WEIGHTS.items()
        }

    def steps(self) -> Iterator[list[Message]]:
        rng = self.rng
        first = [
            Message.system(speech.system_prompt(self.project, rng)),
            Message.user(speech.user_request(self.project, rng)),
        ]
        yield first
        while True:
            turn = _turn_length(rng)
            for index in range(turn - 1):
                progress = index / max(1, turn - 2)
                phase = "explore" if progress < 0.35 else "change" if progress < 0.7 else "check"
                yield self._agent_step(phase)
            yield [
                Message.assistant(speech.final_reply(self.project, rng)),
                Message.user(speech.user_request(self.project, rng)),
            ]

    def _agent_step(self, phase: str) -> list[Message]:
        rng = self.rng
        if rng.random() < _PARALLEL_SHARE:
            tools = [rng.choice(("read_file", "grep")) for _ in range(rng.randint(2, 4))]
        else:
            tools = rng.choices(self._tools, self._weights[phase])
        calls, results = [], []
        for tool in tools:
            budget = _sized(rng, *self._shape[tool])
            arguments, output = repo.TOOL_OUTPUTS[tool](self.project, rng, budget)
            call = ToolCall(f"call_{next(self._ids)}", tool, json.dumps(arguments))
            calls.append(call)
            results.append(Message.tool(output[:MAX_MESSAGE_CHARS], call.id, tool))
        own = sum(len(call.name) + len(call.arguments) for call in calls)
        thought = speech.thought(
            self.project, rng, tools, calls[0].arguments, MIN_MESSAGE_CHARS - own
        )
        return [Message.assistant(thought, calls), *results]


def iter_agent_steps(seed: int, *, steps: int | None = None) -> Iterator[list[Message]]:
    """Yield a seeded conversation one agent step at a time.

    A step is what an agent appends before it calls the model: the system prompt and the first
    user request; an assistant message with its tool calls and their results; or a final
    assistant reply and the next user request.

    Args:
        seed: Selects the conversation; equal seeds give equal conversations.
        steps: How many steps to yield; ``None`` yields forever.

    Yields:
        The messages of each step, in order (without seqs).
    """
    produced = _Agent(seed).steps()
    yield from produced if steps is None else itertools.islice(produced, steps)


def generate_conversation(seed: int, *, steps: int) -> list[Message]:
    """Generate the first ``steps`` steps of a seeded conversation as one list.

    Args:
        seed: Selects the conversation; equal seeds give equal conversations.
        steps: Number of agent steps (see :func:`iter_agent_steps`); each adds 1-5 messages.

    Returns:
        A valid conversation: every tool call is answered by the tool results right after it,
        and tool-call ids are unique.

    Raises:
        ValueError: ``steps`` is negative.
    """
    if steps < 0:
        raise ValueError(f"steps must be >= 0, not {steps}")
    return [message for step in iter_agent_steps(seed, steps=steps) for message in step]


def take_messages(seed: int, count: int) -> list[Message]:
    """Return the first ``count`` messages of a seeded conversation (for fixed-size benchmarks).

    The cut may fall inside a step, leaving the last tool calls unanswered (a pending step).

    Raises:
        ValueError: ``count`` is negative.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, not {count}")
    messages = itertools.chain.from_iterable(iter_agent_steps(seed))
    return list(itertools.islice(messages, count))


@dataclass(frozen=True)
class WorkloadStats:
    """Size statistics of a list of messages; ``str()`` gives a printable table.

    Attributes:
        messages: Number of messages.
        total_chars: Sum of :func:`ctxledger.domain.tokenizer.message_chars` over all messages.
        sizes: Per role (and ``"all"``), ``(count, min, p50, p90, p99, max)`` of message sizes.
        tool_calls: Calls per tool name.
        parallel_steps: Assistant messages carrying more than one tool call.
        user_turns: User messages.
    """

    messages: int
    total_chars: int
    sizes: dict[str, tuple[int, int, int, int, int, int]]
    tool_calls: dict[str, int]
    parallel_steps: int
    user_turns: int

    def __str__(self) -> str:
        rows = [f"{'role':<10}{'count':>8}{'min':>8}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}"]
        rows += [f"{role:<10}" + "".join(f"{value:>8,}" for value in row)
                 for role, row in self.sizes.items()]
        calls = ", ".join(f"{name} {count:,}" for name, count in sorted(self.tool_calls.items()))
        rows.append(f"{self.messages:,} messages, {self.total_chars:,} chars, "
                    f"{self.user_turns:,} user turns, {self.parallel_steps:,} parallel steps")
        rows.append(f"tool calls: {calls}")
        return "\n".join(rows)


def _percentile(ordered: Sequence[int], share: float) -> int:
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def workload_stats(messages: Sequence[Message]) -> WorkloadStats:
    """Summarise message sizes by role, tool calls by name, turns and parallel steps.

    Args:
        messages: Any messages, generated or read from a trace.

    Returns:
        The statistics; ``print()`` them for a table.
    """
    by_role: dict[str, list[int]] = {}
    for message in messages:
        by_role.setdefault(message.role, []).append(message_chars(message))
    by_role["all"] = [size for sizes in by_role.values() for size in sizes]
    summary = {}
    for role, sizes in by_role.items():
        ordered = sorted(sizes) or [0]
        summary[role] = (
            len(sizes), ordered[0], _percentile(ordered, 0.5), _percentile(ordered, 0.9),
            _percentile(ordered, 0.99), ordered[-1],
        )
    return WorkloadStats(
        messages=len(messages),
        total_chars=sum(by_role["all"]),
        sizes=summary,
        tool_calls=dict(Counter(c.name for m in messages for c in m.tool_calls)),
        parallel_steps=sum(1 for m in messages if len(m.tool_calls) > 1),
        user_turns=sum(1 for m in messages if m.role == "user"),
    )


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Print the size statistics of a workload.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=1000)
    options = parser.parse_args()
    print(workload_stats(generate_conversation(options.seed, steps=options.steps)))
