"""The fast extractors give exactly what the plain readings give.

`paths` reads each run of path characters once (a search per run, the shape of a run's text
kept), test ids are found from their literal where a text can only hold names, and the exit code
is found from a literal first letter. Each is checked here against the plain reading it
replaced, kept below as the reference: on generated texts made of the pieces that decide the
outcome, on the workload's messages and on the real traces.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.conftest import trace_files

from ctxledger.domain import _fact_text as ft
from ctxledger.domain import _paths as px
from ctxledger.domain import extract as ex
from ctxledger.tooling.workload import iter_agent_steps


def reference_paths(text: str) -> Iterator[str]:
    """`paths` as first written: every anchor found, each grown to its run of path characters."""
    end = 0
    for match in px._ANCHOR.finditer(text):
        anchor = match.start()
        if anchor < end:
            continue
        window = text[max(0, anchor - 256) : anchor][::-1]
        start = anchor - px._RUN.match(window).end()  # type: ignore[union-attr]
        end = px._RUN.match(text, anchor).end()  # type: ignore[union-attr]
        path = text[start:end].lstrip("@-").rstrip(".-")
        if (
            len(path) < 3
            or not px._LETTER.search(path)
            or "path/to/" in path
            or px._BLOB.search(path)
        ):
            continue
        before = text[start - 1] if start else ""
        if before == "<":
            continue
        if before == ":" and path.startswith("//"):
            scheme = px._SCHEME.search(text, max(0, start - 9), start)
            if scheme:
                yield scheme.group() + path
            continue
        if "/" not in path:
            if px._BARE_NAME.match(path):
                yield path
            continue
        if path[0] not in "/~." and not px._HAS_EXTENSION.search(path) and (
            path.count("/") < 2 or px._SED.search(path)
        ):
            continue
        if path.startswith(("a/", "b/")):
            line_start = text.rfind("\n", 0, start) + 1
            if text.startswith(("---", "+++", "diff "), line_start):
                path = px._DIFF_PREFIX.sub("", path)
        yield path


_REFERENCE_TEST_ID = re.compile(
    r"[\w./-]*\w\.py::[\w\[\]:.,/=+-]*[\w\]]|(?<![\w./-])test_\w+(?!\w|\.\w)"
)


def reference_test_ids(text: str) -> list[str]:
    if "test" in text or "::" in text:
        return [match.group() for match in _REFERENCE_TEST_ID.finditer(text)]
    return []


_REFERENCE_EXIT = re.compile(
    r"<returncode>(-?\d+)</returncode>|\b[Ee]xit (?:code|status):? ?(-?\d+)"
)


def reference_exit_code(output: str) -> int | None:
    match = _REFERENCE_EXIT.search(output, 0, 400) or _REFERENCE_EXIT.search(
        output, max(len(output) - 400, 0)
    )
    return None if match is None else int(match.group(1) or match.group(2))


_REFERENCE_ERROR_LINE = re.compile(
    r"[ \t]*(?:E[ \t]+)?(?:[A-Za-z_][\w.]*)?(?:Error|Exception)\b"
    r"|.*?(?:\w(?:Error|Exception): |\bFAILED\b|\bFAIL:|^ERROR\b|\bfatal:|^error:|\bpanic:|"
    r"Segmentation fault|"
    r"No such file or directory|command not found|Permission denied|timed out and has been"
    r"|Traceback \(most recent call last\)|\b[1-9]\d* (?:failed|errors?)\b)"
)


def reference_is_error_line(line: str) -> bool:
    return _REFERENCE_ERROR_LINE.match(line) is not None


_REFERENCE_CALL = re.compile(r"\b[A-Za-z_][\w.]*\w\(\)")
_REFERENCE_NUMBER = re.compile(
    r"(?<![\w.])\d+(?:[.,]\d+)?[ \t]?(?:%|(?:ms|s|sec|secs|seconds?|min|mins|minutes?|h|hours?"
    r"|days?|[KMGT]i?B|bytes?|tokens?|chars?|characters?|lines?|px|[kMG]Hz|x)\b)"
)
_REFERENCE_DOLLAR = re.compile(r"^\$ (\S.*)$", re.MULTILINE)


def reference_calls(text: str) -> list[str]:
    return [match.group() for match in _REFERENCE_CALL.finditer(text)]


def reference_numbers(text: str) -> list[str]:
    return [match.group() for match in _REFERENCE_NUMBER.finditer(text)]


def reference_dollar_commands(text: str) -> list[str]:
    return [match.group(1) for match in _REFERENCE_DOLLAR.finditer(text)]


_PATH_PIECES = [
    "/", ".py", ".txt", ".conf", "a/", "b/", "src/", "---", "+++ ", "diff ", "http:", "https://",
    "path/to/", "s/x/y/g", "~/", "./", "../", "<", ":", "@", "-", ".", "+", "ABCdef123", "x" * 31,
    "\n", " ", "é", "_", "and/or", "setup.py", "Django.conf",
]
_TEST_PIECES = [
    "a", "b.py", ".py::", "::", "test_", "x", "/", ".", "-", "[", "]", ":", ",", "=", "+", " ",
    "\n", "tests/", "_", "1", "ab.py::t-", "é",
]
_EXIT_PIECES = [
    "exit code 1", "Exit status: 2", "xExit code 3", "<returncode>-1</returncode>",
    "_exit code 4", " ", "e", "E", "exit", "\n", "Exit code:5", "é", "1", "xit code 6",
]


_ERROR_PIECES = [
    "Error", "Exception", "ValueError", "Error: ", "Exception: ", "E ", " ", "\t", "x", "_", ".",
    "FAIL", "FAILED", "FAIL:", "ERROR", "error:", "fatal:", "panic:", "Segmentation fault",
    "No such file or directory", "command not found", "Permission denied", "é",
    "timed out and has been", "Traceback (most recent call last)", "3", "0", " failed", " error",
    " errors", "s", ":",
]


_PROSE_PIECES = [
    "()", "(", ")", "a", "B", "_", ".", "1", "2.5", ",", "é", "x", " ", "\t", "\n", "$ ", "$",
    "ms", "s", "%", "KB", "tokens", "lines", "x" * 140, "run", "self.save", "..", "-",
]


def _texts(pieces: list[str], count: int, longest: int, seed: int) -> Iterator[str]:
    rng = random.Random(seed)
    for _ in range(count):
        yield "".join(rng.choice(pieces) for _ in range(rng.randint(1, longest)))


def _corpus() -> list[str]:
    texts: list[str] = []
    for seed in (1, 7):
        for step in iter_agent_steps(seed, steps=120):
            for message in step:
                texts.append(message.content)
                texts.extend(call.arguments for call in message.tool_calls)
    for trace in trace_files():
        texts.extend(trace.read_text(encoding="utf-8").split("\n"))
    return texts


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return _corpus()


def test_paths_match_the_reference_on_generated_texts() -> None:
    texts = list(_texts(_PATH_PIECES, 20_000, 30, seed=5))
    # Runs longer than the 256 characters a path is grown backwards by.
    rng = random.Random(6)
    for _ in range(200):
        texts.append("a" * rng.randint(200, 300) + rng.choice(["/x.py", ".py", "/b"]) + "cc")
        texts.append("/" * rng.randint(250, 600) + "ab.py")
    px._shapes.clear()
    px._kept.clear()  # every text read here, not found kept
    found = [list(ex.paths(text)) for text in texts]
    assert found == [list(reference_paths(text)) for text in texts]
    assert sum(map(len, found)) > 5_000  # the pieces make paths, not only misses


def test_paths_are_the_same_when_the_kept_shapes_are_emptied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(px, "_SHAPES_KEPT", 3)
    px._kept.clear()
    texts = list(_texts(_PATH_PIECES, 2_000, 20, seed=9))
    assert [list(ex.paths(text)) for text in texts] == [
        list(reference_paths(text)) for text in texts
    ]
    assert len(px._shapes) <= 3


def test_every_extension_anchors_a_run_as_the_plain_alternation_does() -> None:
    """An extension (whole, cut short or run on) after a dot anchors as in the plain pattern."""
    plain = re.compile(r"\.(?=(?:" + px._BARE_EXTENSIONS + r")\b)[\w.@~/-]*")
    words = px._BARE_EXTENSIONS.split("|") + px._EXTENSIONS.split("|")
    tails = ["", "x", "1", " ", "/", ".", "-", ")"]
    cuts = [word[:cut] for word in words for cut in range(len(word) + 1)]
    texts = [f"a.{cut}{tail}" for cut in cuts for tail in tails]
    texts += [f".{word.upper()} .{word}" for word in words]
    spans = [[m.span() for m in px._ANCHORED_RUN.finditer(t) if t[m.start()] == "."] for t in texts]
    assert spans == [[m.span() for m in plain.finditer(t)] for t in texts]
    assert sum(map(len, spans)) > 100


@given(st.lists(st.sampled_from(_PATH_PIECES), max_size=40).map("".join))
def test_paths_match_the_reference(text: str) -> None:
    assert list(ex.paths(text)) == list(reference_paths(text))


def test_test_ids_match_the_reference_on_generated_texts() -> None:
    texts = list(_texts(_TEST_PIECES, 40_000, 25, seed=3))
    found = [ft.test_ids(text) for text in texts]
    assert found == [reference_test_ids(text) for text in texts]
    assert sum(map(len, found)) > 5_000


def test_exit_codes_match_the_reference_on_generated_texts() -> None:
    texts = list(_texts(_EXIT_PIECES, 20_000, 8, seed=4))
    # Long outputs: the code is looked for in the first and the last 400 characters.
    texts += [text * 60 for text in _texts(_EXIT_PIECES, 500, 4, seed=8)]
    found = [ex.exit_code(text) for text in texts]
    assert found == [reference_exit_code(text) for text in texts]
    assert sum(code is not None for code in found) > 5_000


def test_the_corpus_gives_what_the_references_give(corpus: list[str]) -> None:
    assert [list(ex.paths(text)) for text in corpus] == [
        list(reference_paths(text)) for text in corpus
    ]
    assert [ft.test_ids(text) for text in corpus] == [
        reference_test_ids(text) for text in corpus
    ]
    assert [ex.exit_code(text) for text in corpus] == [
        reference_exit_code(text) for text in corpus
    ]


def test_error_line_check_matches_the_reference_on_generated_texts() -> None:
    """The error-line check (literals first, then a pattern) reads each line as the one regex."""
    lines = list(_texts(_ERROR_PIECES, 40_000, 8, seed=11))
    found = [ex._is_error_line(line) for line in lines]
    assert found == [reference_is_error_line(line) for line in lines]
    assert 5_000 < sum(found) < len(found) - 5_000


def test_the_corpus_lines_give_what_the_reference_error_check_gives(corpus: list[str]) -> None:
    """Every line of the corpus is read as an error line exactly when the regex says so."""
    lines = [line[:1000] for text in corpus for line in text.split("\n")]
    assert [ex._is_error_line(line) for line in lines] == [
        reference_is_error_line(line) for line in lines
    ]


def test_calls_numbers_and_dollar_commands_match_the_reference_on_generated_texts() -> None:
    """Calls found from their "()", numbers from a digit and "$" lines behind a literal check
    are the matches of the plain patterns."""
    texts = list(_texts(_PROSE_PIECES, 30_000, 30, seed=12))
    rng = random.Random(13)
    texts += ["a" * rng.randint(100, 1200) + "." * rng.randint(0, 2) + "b()" for _ in range(100)]
    found = [(ft.calls(t), ft.numbers(t), ft.dollar_commands(t)) for t in texts]
    assert found == [
        (reference_calls(t), reference_numbers(t), reference_dollar_commands(t)) for t in texts
    ]
    assert sum(len(calls) for calls, _, _ in found) > 2_000
    assert sum(len(numbers) for _, numbers, _ in found) > 1_000
    assert sum(len(commands) for _, _, commands in found) > 1_000


def test_the_corpus_gives_the_reference_calls_numbers_and_commands(corpus: list[str]) -> None:
    """The workload's and the traces' texts give the plain patterns' calls, numbers and $ lines."""
    assert [(ft.calls(t), ft.numbers(t), ft.dollar_commands(t)) for t in corpus] == [
        (reference_calls(t), reference_numbers(t), reference_dollar_commands(t)) for t in corpus
    ]
