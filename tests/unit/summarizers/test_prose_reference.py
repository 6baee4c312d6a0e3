"""The summariser's fast prose readers give what the plain patterns give."""

from __future__ import annotations

import random
import re

from ctxledger.summarizers import _prose

_REFERENCE_ISSUE_WORD = re.compile(r"(?:[Ii]ssue|PR|[Tt]icket)[ \t]+#?\d+\b")

def reference_hits(text: str) -> list[tuple[int, int, int, str]]:
    """`_hits` as first written: a search per trigger."""
    lower = text.lower()
    hits = []
    for source, triggers in ((lower, _prose._TRIGGERS), (text, _prose._CASED_TRIGGERS)):
        for phrase, kind in triggers:
            bounded = phrase[-1] != " "
            position = source.find(phrase)
            while position != -1:
                end = position + len(phrase)
                if not bounded or (
                    (position == 0 or not _prose._is_word(source[position - 1]))
                    and (end == len(source) or not _prose._is_word(source[end]))
                ):
                    hits.append((position, _prose._KIND_ORDER[kind], end, kind))
                position = source.find(phrase, end)
    hits.sort()
    return hits


_PIECES = [
    "Issue", "issue", "ssue", "PR", "P", "R", "Ticket", "ticket", "icket", " ", "\t", "#", "1",
    "42", "x", "\n", "é", "IssuePR", "Issue 12", "PR #3", "ticket\t7", "PR 5x", "issue #",
]


def test_issue_words_match_the_plain_pattern_on_generated_texts() -> None:
    """Issue words found from their literals are the plain pattern's matches, in order."""
    rng = random.Random(21)
    texts = ["".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 25))) for _ in range(20_000)]
    found = [_prose._issue_words(text) for text in texts]
    assert found == [
        [match.group() for match in _REFERENCE_ISSUE_WORD.finditer(text)] for text in texts
    ]
    assert sum(map(len, found)) > 2_000


def test_trigger_hits_match_a_search_per_trigger() -> None:
    """Triggers found from one search of their trie are those a search per trigger finds."""
    rng = random.Random(22)
    pieces = [phrase for phrase, _ in _prose._TRIGGERS] + [
        " ", "x", "\n", ".", "_", "decide", "d", "TODO", "- [ ] ", "İ", "Let'S", "I'LL", "e",
    ]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))) for _ in range(20_000)]
    found = [_prose._hits(text) for text in texts]
    assert found == [reference_hits(text) for text in texts]
    assert sum(map(len, found)) > 5_000
