"""ExtractiveSummarizer on the real agent traces in ../shared/traces: size and fact retention.

Retention is measured the way the quality benchmark does it: each trace is compacted in chunks
of about 48,000 characters (the chunk size of a 32,000-token window), each chunk summarised
with the previous summary merged, and the facts of each chunk are looked up in the summary that
follows it. Facts are found with patterns of this test, independent of the summariser's own.

Measured with ``max_chars=6000``: paths named by the user, the assistant or a tool call 99.6 %;
first lines of shell commands 97.5 % (whole multi-line commands 77 %: a 40-line heredoc does not
fit a summary); error lines of tool output 87 %; every path in the chunk including tool output
(``ls -R``, tracebacks, diffs) 60 %, which is bounded by room: one chunk can list 300 paths.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator

import pytest

from ctxledger.messages import Message
from ctxledger.summarizers import ExtractiveSummarizer, SummaryRequest

pytestmark = pytest.mark.traces

MAX_CHARS = 6000
CHUNK_CHARS = 48_000
PATH = re.compile(
    r"(?:\.{0,2}/)?(?:[\w.-]+/)+[\w.-]+\.[A-Za-z]\w{0,4}\b"
    r"|\b[\w-]+\.(?:py|js|ts|json|md|txt|toml|yaml|yml|cfg|sh|html|rst)\b"
)
ERROR_LINE = re.compile(r"^\s*(?:[\w.]+(?:Error|Exception)(?::.*)?|FAILED .*)$", re.MULTILINE)
CONTENT_KEYS = {"content", "file_text", "new_str", "old_str"}

summarize = ExtractiveSummarizer()


def numbered(messages: list[Message]) -> list[Message]:
    """Give a trace's messages the seqs a session would."""
    return [message.with_seq(index + 1) for index, message in enumerate(messages)]


def chunks(messages: list[Message]) -> Iterator[list[Message]]:
    """Split messages into consecutive runs of about CHUNK_CHARS characters."""
    current: list[Message] = []
    size = 0
    for message in messages:
        current.append(message)
        size += len(message.content) + sum(len(call.arguments) for call in message.tool_calls)
        if size >= CHUNK_CHARS:
            yield current
            current, size = [], 0
    if current:
        yield current


def facts(chunk: list[Message]) -> dict[str, set[str]]:
    """The facts of a chunk a summary should keep, by kind."""
    found: dict[str, set[str]] = {"acted": set(), "all": set(), "commands": set(), "errors": set()}
    for message in chunk:
        paths = set(PATH.findall(message.content))
        found["all"] |= paths
        if message.role in ("user", "assistant"):
            found["acted"] |= paths
        if message.role == "tool":
            found["errors"] |= {line.strip()[:200] for line in ERROR_LINE.findall(message.content)}
        for call in message.tool_calls:
            arguments = json.loads(call.arguments)
            for key, value in arguments.items():
                if isinstance(value, str) and key not in CONTENT_KEYS:
                    found["acted"] |= set(PATH.findall(value))
                    found["all"] |= set(PATH.findall(value))
            command = arguments.get("command")
            if not isinstance(command, str) or not command.strip():
                continue
            if not (command.isidentifier() and "path" in arguments):  # not an editor's verb
                found["commands"].add(command.strip().split("\n")[0][:80])
    return found


@pytest.fixture(scope="module")
def retention(traces: dict[str, list[Message]]) -> dict[str, float]:
    """The share of each kind of fact found in the summary that follows its chunk."""
    kept: dict[str, int] = {}
    total: dict[str, int] = {}
    for messages in traces.values():
        previous = None
        for chunk in chunks(numbered(messages)):
            summary = summarize(
                SummaryRequest.of(chunk, previous_summary=previous, max_chars=MAX_CHARS)
            )
            for kind, items in facts(chunk).items():
                kept[kind] = kept.get(kind, 0) + sum(item in summary for item in items)
                total[kind] = total.get(kind, 0) + len(items)
            previous = summary
    return {kind: kept[kind] / total[kind] for kind in total}


def test_every_trace_fits_the_budget(traces: dict[str, list[Message]]) -> None:
    """A whole trace summarised at once stays within max_chars and is never empty."""
    for name, messages in traces.items():
        summary = summarize(SummaryRequest.of(numbered(messages), max_chars=MAX_CHARS))
        assert 0 < len(summary) <= MAX_CHARS, name


def test_every_trace_keeps_its_first_request(traces: dict[str, list[Message]]) -> None:
    """The first user request (the task) opens the User requests section of every trace."""
    for name, messages in traces.items():
        first = next((m for m in numbered(messages) if m.role == "user"), None)
        if first is None:
            continue
        summary = summarize(SummaryRequest.of(numbered(messages), max_chars=MAX_CHARS))
        opening = first.content.strip().split("\n")[0][:60]
        assert f"## User requests\n- [#{first.seq}] {opening}" in summary, name


@pytest.mark.parametrize(
    ("kind", "floor"),
    [("acted", 0.95), ("commands", 0.95), ("errors", 0.8), ("all", 0.55)],
)
def test_fact_retention_across_chunked_compactions(
    retention: dict[str, float], kind: str, floor: float
) -> None:
    """Paths the agent used and commands it ran survive compaction (>= 95 %; see the module)."""
    assert retention[kind] >= floor, retention


def test_chained_summaries_are_deterministic(traces: dict[str, list[Message]]) -> None:
    """Summarising a trace chunk by chunk twice gives the same final bytes."""

    def final(run: Callable[[SummaryRequest], str]) -> list[str]:
        results = []
        for messages in traces.values():
            previous = None
            for chunk in chunks(numbered(messages)):
                previous = run(SummaryRequest.of(chunk, previous_summary=previous))
            results.append(previous or "")
        return results

    assert final(summarize) == final(ExtractiveSummarizer())
