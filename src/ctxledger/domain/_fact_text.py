"""What prose and commands give the facts besides paths: test ids, calls, numbers and the
commands of ``$`` lines (:mod:`ctxledger.domain._fact_extract` reads them).

Each is a regular expression's matches, found so that the search skips most of the text at C
speed: from a literal (``test_``, ``()``, ``$ ``) or a digit, rather than from a lookbehind or a
word boundary tried at every character.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ctxledger.domain._text_memo import TextMemo

__all__ = [
    "PROSE_KINDS",
    "READ_PROSE_KINDS",
    "Found",
    "calls",
    "dollar_commands",
    "numbers",
    "prose_finds",
    "test_ids",
]

# A pytest node id, or a test function's name (not a test file's stem: "tests/test_x.py").
# Either starts where a run of [\w./-] starts (the lookbehinds: the search then tries each run
# once, not from each of its characters); a text without ".py::" can only hold the second kind,
# which is found from its literal "test_" at C speed (:func:`test_ids`).
_TEST_ID = re.compile(
    r"(?<![\w./-])[\w./-]*\w\.py::[\w\[\]:.,/=+-]*[\w\]]|(?<![\w./-])test_\w+(?!\w|\.\w)"
)
_TEST_NAME = re.compile(r"test_(?<![\w./-]test_)\w+(?!\w|\.\w)")
_CALL = re.compile(r"\b[A-Za-z_][\w.]*\w\(\)")
_DOTTED_RUN = re.compile(r"[\w.]*")
# A number starts at a digit that follows no name character or dot: the lookbehind comes after
# the first digit, so that the search skips to digits at C speed.
_NUMBER = re.compile(
    r"\d(?<![\w.]\d)\d*(?:[.,]\d+)?[ \t]?(?:%|(?:ms|s|sec|secs|seconds?|min|mins|minutes?|h"
    r"|hours?|days?|[KMGT]i?B|bytes?|tokens?|chars?|characters?|lines?|px|[kMG]Hz|x)\b)"
)
_DOLLAR = re.compile(r"^\$ (\S.*)$", re.MULTILINE)


def test_ids(text: str) -> list[str]:
    """The pytest node ids and test function names in ``text``, in order."""
    return [match.group() for match in _test_id_matches(text)]


def _test_id_matches(text: str) -> list[re.Match[str]]:
    if ".py::" in text:
        return list(_TEST_ID.finditer(text))
    if "test_" in text:
        return list(_TEST_NAME.finditer(text))
    return []


def calls(text: str) -> list[str]:
    """The calls without arguments in ``text`` (``run()``, ``self.save()``), in order."""
    return [match.group() for match in _call_matches(text)]


def _call_matches(text: str) -> list[re.Match[str]]:
    # Each ends at a "()" after a name character; it is searched for from the start of the run
    # of name characters and dots before it (a run holds no parenthesis, so a match ends at the
    # first "()" and the next run starts after it: these are the matches of one search).
    found: list[re.Match[str]] = []
    paren = text.find("()")
    while paren != -1:
        before = text[paren - 1] if paren else ""
        if before.isalnum() or before == "_":
            match = _CALL.search(text, _run_start(text, paren), paren + 2)
            if match is not None:
                found.append(match)
        paren = text.find("()", paren + 2)
    return found


def _run_start(text: str, end: int) -> int:
    """Where the run of name characters and dots that ends at ``end`` starts."""
    size = 128
    while True:
        low = max(0, end - size)
        back = _DOTTED_RUN.match(text[low:end][::-1]).end()  # type: ignore[union-attr]
        if back < end - low or low == 0:
            return end - back
        size *= 8


def numbers(text: str) -> list[str]:
    """The numbers with a unit in ``text`` (``12 ms``, ``3.5%``, ``40 tokens``), in order."""
    return [match.group() for match in _NUMBER.finditer(text)]


def dollar_commands(text: str) -> list[str]:
    """The commands of the lines of ``text`` that start with ``$ ``, in order."""
    return [match.group(1) for match in _DOLLAR.finditer(text)] if "$ " in text else []


#: What a kind of find gives in a text: where each found one starts, and its text.
Found = tuple[tuple[int, ...], tuple[str, ...]]


def _found(matches: list[re.Match[str]], group: int = 0) -> Found:
    return tuple(m.start() for m in matches), tuple(m.group(group) for m in matches)


def _read_finds(text: str) -> tuple[Found, Found, Found, Found]:
    dollars = list(_DOLLAR.finditer(text)) if "$ " in text else []
    return (
        _found(dollars, 1),
        _found(_test_id_matches(text)),
        _found(_call_matches(text)),
        _found(list(_NUMBER.finditer(text))),
    )


def prose_finds(text: str) -> tuple[Found, Found, Found, Found]:
    """The commands of ``$`` lines, the test ids, the calls and the numbers of ``text``, with
    where each starts (each is found on one line), kept by the text: the fact reads of a long
    message find what the summary's input read of it (:mod:`ctxledger.domain._text_parts`)."""
    return _kept(text)


_kept = TextMemo(_read_finds, size=4096, chars=2_000_000)


def _prose_kind(kind: int) -> Callable[[str], Found]:
    def found(text: str) -> Found:
        return prose_finds(text)[kind]

    return found


#: Each kind of :func:`prose_finds` on its own, as a function of the text.
PROSE_KINDS = tuple(_prose_kind(kind) for kind in range(4))


def _read_kind(kind: int) -> Callable[[str], Found]:
    def found(text: str) -> Found:
        return _read_finds(text)[kind]

    return found


#: The kinds of :data:`PROSE_KINDS`, read now and not kept (for parts of a text read once).
READ_PROSE_KINDS = tuple(_read_kind(kind) for kind in range(4))
