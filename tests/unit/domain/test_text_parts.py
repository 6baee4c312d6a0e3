"""The paths and error lines of a part of a text, read from the whole's, are the part's own."""

from __future__ import annotations

import random

import msgspec
from tests.conftest import trace_files

from ctxledger.domain import _fact_extract as fx
from ctxledger.domain import _paths
from ctxledger.domain import extract as ex
from ctxledger.domain._text_parts import (
    error_lines_between,
    keep_cut_errors,
    keep_cut_paths,
    paths_between,
)
from ctxledger.domain.digest import summary_input
from ctxledger.messages import Message, ToolCall
from ctxledger.tooling.traces import read_trace

_PIECES = [
    "\n", "\n", " ", "  ", "src/app.py", "/usr/lib/x", "a/", "b/b.py", "--- ", "+++ ", "diff ",
    "https:", "//h.org/x", "<", "</", ":", "ValueError: bad", "Error", "E   ", "FAILED",
    "Traceback (most recent call last)", "    at f()", "No such file or directory", "x",
    "KeyError", "error: x", "3 failed", "é", ".py", "ftp:", "setup.py", "$ ls -la", "$ ",
    "tests/t.py::test_a", "test_b", "run()", "a.b()", "12 ms", "3.5%", "40 tokens", "`x_y`",
]


def _texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 60))) for _ in range(count)]


def _cuts(text: str, rng: random.Random) -> list[tuple[int, int]]:
    cuts = [(0, len(text))]
    for _ in range(6):
        start = rng.randint(0, len(text))
        cuts.append((start, rng.randint(start, len(text))))
    return cuts


def test_parts_of_generated_texts_give_their_own_paths_and_error_lines() -> None:
    """Every part of a generated text gives what reading it alone gives."""
    rng = random.Random(3)
    compared = 0
    for text in _texts(3_000, seed=2):
        for start, end in _cuts(text, rng):
            part = text[start:end]
            assert paths_between(text, start, end) == list(ex.paths(part))
            assert error_lines_between(text, start, end) == ex.error_lines(
                part, viewer=False, limit=None
            )
            compared += 1
    assert compared == 21_000


def test_parts_of_generated_messages_give_their_own_facts() -> None:
    """Every part of a generated tool result or assistant text gives its own facts."""
    rng = random.Random(5)
    call = ToolCall("c1", "bash", '{"command": "pytest tests/t.py::test_a"}')
    for index, text in enumerate(_texts(2_000, seed=6)):
        if index % 2:
            message = Message.tool(text, "c1", "bash").with_seq(3)
        else:
            message = Message.assistant(text, [call] if index % 4 else []).with_seq(3)
        for start, end in _cuts(text, rng):
            part = msgspec.structs.replace(message, content=text[start:end])
            assert fx.part_facts(message, start, end) == fx.extract_facts([part], keep=False)


def test_parts_of_the_traces_messages_give_their_own_facts() -> None:
    """The middle of each real tool result and assistant text (as the digest cuts them)
    gives its own facts."""
    rng = random.Random(4)
    compared = 0
    for trace in trace_files():
        for message in read_trace(trace):
            if message.role not in ("tool", "assistant") or len(message.content) < 2_000:
                continue
            message = message.with_seq(7)
            for start, end in _cuts(message.content, rng):
                part = msgspec.structs.replace(message, content=message.content[start:end])
                assert fx.part_facts(message, start, end) == fx.extract_facts([part], keep=False)
                compared += 1
    assert compared > 1_000


def test_the_paths_kept_for_cut_messages_are_theirs() -> None:
    """The paths the digest keeps for each message it cut, made from the whole content's, are
    the cut message's own, with where each starts."""
    checked = 0
    for trace in trace_files():
        messages = [message.with_seq(n) for n, message in enumerate(read_trace(trace), 1)]
        for limit in (300, 1_000):
            for given, cut in zip(messages, summary_input(messages, limit), strict=True):
                kept = _paths._kept.peek(cut.content)
                if cut.content != given.content and kept is not None:
                    assert kept == _paths.read_path_runs(cut.content)
                    checked += 1
    assert checked > 500


def test_the_error_lines_kept_for_cut_messages_are_theirs() -> None:
    """What the digest keeps as the error scan of a tool result it cut, made from the whole
    content's, is the cut message's own scan."""
    checked = 0
    for trace in trace_files():
        messages = [message.with_seq(n) for n, message in enumerate(read_trace(trace), 1)]
        for limit in (300, 1_000):
            for given, cut in zip(messages, summary_input(messages, limit), strict=True):
                kept = ex.kept_error_scan(cut.content)
                if cut.content != given.content and kept is not None:
                    assert kept == ex._read_scan(cut.content)
                    checked += 1
    assert checked > 300


def test_cut_generated_texts_keep_their_own_paths_and_error_lines() -> None:
    """Any head, facts block and tail of a generated text keep the cut text's own paths and
    error scan (tracebacks whose reading crosses the cuts included)."""
    rng = random.Random(8)
    blocks = ["[... x:\nValueError: y\npath: src/a.py\n...]\n", "...]\n", "  at g()\nZ\n"]
    for text in _texts(3_000, seed=9):
        ex.error_scan(text)  # the whole text's, read before the cut as the digest reads it
        head_end = rng.randint(1, len(text))
        tail_start = rng.randint(head_end, len(text))
        block = rng.choice(blocks)
        cut = text[:head_end] + "\n" + block + text[tail_start:]
        keep_cut_paths(cut, text, head_end, block, tail_start)
        keep_cut_errors(cut, text, head_end, block, tail_start)
        assert _paths.path_runs(cut) == _paths.read_path_runs(cut)
        assert ex.error_scan(cut) == ex._read_scan(cut)
