"""The fact block chooses exactly as its rule says, however it is computed.

``fact_block`` goes through the facts once per tier of its order and looks each text up in the
view's text and in the lines already chosen. It now splits the facts by tier in one pass, looks
a text up in the chosen lines with one search of their joined text (one per line only for a
text that holds a newline, which could match across two lines) and may remember across calls
which texts the view shows (``shown_memo``). A block is part of a checkpoint and of the view
hash of every view after it: the block must be the same string, to the character, as the rule
written plainly gives (:func:`_plain_block`, the function as it was before), for any facts, any
view text, any room, with the request lines of a message shown in part last or not, with paths
grouped or not, and with the memo shared between calls at several rooms.

The candidates merge the facts a new checkpoint covers as :func:`extract_facts` gave them (their
texts normalized already): the merge must be the one ``merge_facts`` gives.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from ctxledger.domain.facts import (  # _line: a line's format, not the choice under test
    BLOCK_HEADER,
    FACT_KINDS,
    Fact,
    _line,
    _merged,
    extract_facts,
    fact_block,
    merge_facts,
    normalize,
)
from ctxledger.messages import Message

_TIERS = (
    ("error", None),
    ("command", None),
    ("request", None),
    ("path", True),
    ("identifier", None),
    ("path", False),
)


def _plain_block(
    facts: Sequence[Fact],
    shown: str,
    limit: int,
    shown_in_part: Collection[int],
    group_paths: bool,
) -> str:
    """The rule written plainly: every tier scans every fact, newest first; a fact is left
    out when its line does not fit, the view shows its text, or a chosen line holds it."""
    room = limit - len(BLOCK_HEADER)
    if room <= 0:
        return ""
    order = {id(fact): index for index, fact in enumerate(facts)}
    newest = sorted(facts, key=lambda fact: (-fact.seq, order[id(fact)]))
    chosen: list[Fact] = []
    written: list[str] = []
    with_paths: set[int] = set()
    tiers = [(kind, named, False) for kind, named in _TIERS]
    if shown_in_part:
        tiers.append(("request", None, True))
    for kind, named, partial in tiers:
        for fact in newest:
            if fact.kind != kind or (named is not None and fact.named != named):
                continue
            if kind == "request" and (fact.seq in shown_in_part) != partial:
                continue
            text, line = fact.text, _line(fact)
            grouped = group_paths and fact.kind == "path" and " " not in text
            cost = len(text) + 1 if grouped and fact.seq in with_paths else len(line) + 1
            if cost > room or text in shown or any(text in other for other in written):
                continue
            chosen.append(fact)
            written.append(line)
            room -= cost
            if grouped:
                with_paths.add(fact.seq)
    if not chosen:
        return ""
    chosen.sort(key=lambda fact: (-fact.seq, order[id(fact)]))
    lines: list[str] = []
    path_line: dict[int, int] = {}
    for fact in chosen:
        if group_paths and fact.kind == "path" and " " not in fact.text:
            index = path_line.get(fact.seq)
            if index is not None:
                lines[index] += " " + fact.text
                continue
            path_line[fact.seq] = len(lines)
        lines.append(_line(fact))
    return BLOCK_HEADER + "".join("\n" + line for line in lines)


# Few letters, so that texts often hold one another and the view; a newline and a space now and
# then (a text with a newline is looked up line by line; grouped paths split at spaces).
_TEXT = st.text(alphabet="ab/.\n x#`", min_size=0, max_size=12)
_FACT = st.builds(
    Fact,
    kind=st.sampled_from(FACT_KINDS),
    text=_TEXT,
    seq=st.integers(min_value=0, max_value=12),
    named=st.booleans(),
)


@given(
    facts=st.lists(_FACT, max_size=30),
    shown=st.text(alphabet="ab/.\n x#`", max_size=60),
    limits=st.lists(
        st.integers(min_value=0, max_value=len(BLOCK_HEADER) + 200), min_size=1, max_size=4
    ),
    part=st.frozensets(st.integers(min_value=0, max_value=12), max_size=3),
    group_paths=st.booleans(),
)
def test_the_block_is_the_one_the_plain_rule_gives(
    facts: list[Fact], shown: str, limits: list[int], part: frozenset[int], group_paths: bool
) -> None:
    memo: dict[str, bool] = {}
    for limit in limits:
        expected = _plain_block(facts, shown, limit, part, group_paths)
        alone = fact_block(facts, shown, limit, shown_in_part=part, group_paths=group_paths)
        shared = fact_block(
            facts, shown, limit, shown_in_part=part, group_paths=group_paths, shown_memo=memo
        )
        assert alone == expected
        assert shared == expected


@given(
    facts=st.lists(_FACT, min_size=1, max_size=20),
    again=st.lists(st.integers(min_value=0, max_value=19), min_size=1, max_size=6),
    shown=st.text(alphabet="ab/.\n x#`", max_size=60),
    limit=st.integers(min_value=0, max_value=len(BLOCK_HEADER) + 200),
    group_paths=st.booleans(),
)
def test_a_fact_object_listed_twice_is_ordered_as_the_plain_rule_orders_it(
    facts: list[Fact], again: list[int], shown: str, limit: int, group_paths: bool
) -> None:
    listed = facts + [facts[index % len(facts)] for index in again]  # the same objects again
    expected = _plain_block(listed, shown, limit, frozenset(), group_paths)
    assert fact_block(listed, shown, limit, group_paths=group_paths) == expected


@given(
    carried=st.lists(_FACT, max_size=20),
    texts=st.lists(st.text(alphabet="ab/. \nxy_()$", max_size=40), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=3),
)
def test_merging_the_extracted_facts_as_they_are_is_merge_facts(
    carried: list[Fact], texts: list[str], cuts: list[int]
) -> None:
    messages = [
        Message(role="user" if seq % 2 else "assistant", content=text, seq=seq)
        for seq, text in enumerate(texts, start=1)
    ]
    extracted = extract_facts(messages, keep=False)
    assert all(fact.text and normalize(fact.text) == fact.text for fact in extracted)
    # As kept runs (consecutive pieces of them), merged into the carried facts one by one.
    bounds = sorted({0, len(extracted), *(min(cut, len(extracted)) for cut in cuts)})
    runs = [extracted[start:stop] for start, stop in pairwise(bounds)]
    assert _merged(carried, runs) == merge_facts(carried, extracted)
