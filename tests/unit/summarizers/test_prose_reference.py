"""The summariser's fast prose readers give what the plain patterns give."""

from __future__ import annotations

import random
import re

from ctxledger.summarizers import _prose

_REFERENCE_ISSUE_WORD = re.compile(r"(?:[Ii]ssue|PR|[Tt]icket)[ \t]+#?\d+\b")

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
