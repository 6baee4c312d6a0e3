"""Facts of a conversation: the short verbatim strings a summary must not lose.

One extractor serves the loss audit (:mod:`ctxledger.domain.audit`), the fact block that follows
a checkpoint's summary (``Config.fact_index_chars``) and the quality benchmark
(``bench/quality.py``); it is built on the same text extractors as the offline summariser
(:mod:`ctxledger.domain.extract`). Extraction is deterministic and linear in the text.
The extraction is defined in ``_fact_extract.py`` (every name importable from here); this
module writes and reads the fact block.

Kinds (:data:`FACT_KINDS`):

* ``path``: file paths and path-like names (:func:`ctxledger.domain.extract.paths`) in user and
  assistant text and tool-call arguments, and in tool output (``named=False`` when a path was
  seen only there: a listing's lines).
* ``command``: the shell command a tool call ran, and ``$ cmd`` lines of user or assistant text,
  identified by the first :data:`COMMAND_CHARS` characters of the first line.
* ``error``: the error lines of a tool result that is not a file view (a ``cat`` of code that
  handles exceptions is not a failure), identified by their first :data:`ERROR_CHARS`
  characters; for a non-zero exit that printed none, the last line of output.
* ``identifier``: test ids (``tests/test_x.py::test_y``) and test function names, names defined
  in code a tool call wrote (``def parse``), and calls named in prose (``model_to_dict()``).
* ``number``: numbers with a unit in user or assistant text (``30 s``, ``512 MB``, ``95 %``).
* ``request``: the lines of user messages that have at least 8 characters, identified by their
  first :data:`REQUEST_CHARS` characters.

Texts are compared with whitespace runs collapsed to one space: a fact is *shown* by a view when
its text occurs in :func:`shown_text` of the view's messages.

The fact block lists facts that a view does not show, one per line, newest first::

    Facts from compacted history (newest first; #N is the message seq; $ command, ! error,
    > user request, `name`):
    #812 $ python -m pytest tests/test_ops.py -x
    #812 ! E AssertionError: assert 3 == 4
    #790 src/ops/core.py
"""

from __future__ import annotations

import operator
import re
from collections.abc import Collection, Iterable, Mapping, Sequence

from ctxledger.checkpoints import Checkpoint
from ctxledger.domain._fact_extract import (
    COMMAND_CHARS,
    ERROR_CHARS,
    FACT_KINDS,
    REQUEST_CHARS,
    Fact,
    FactKind,
    MessageReads,
    _Collector,
    extract_facts,
    extracted_runs,
    message_reads,
    normalize,
    remember_facts,
    remember_reads,
    shown_text,
)
from ctxledger.domain._shown import Shown, shown
from ctxledger.domain.projection import assemble
from ctxledger.domain.state import SessionState
from ctxledger.messages import Message

__all__ = [
    "BLOCK_HEADER",
    "COMMAND_CHARS",
    "ERROR_CHARS",
    "FACT_KINDS",
    "REQUEST_CHARS",
    "Fact",
    "FactKind",
    "MessageReads",
    "Shown",
    "block_candidates",
    "checkpoint_fact_block",
    "count_by_kind",
    "extract_facts",
    "fact_block",
    "fact_candidates",
    "merge_facts",
    "message_reads",
    "normalize",
    "parse_fact_block",
    "remember_facts",
    "remember_reads",
    "shown_text",
]

#: The first line of a fact block.
BLOCK_HEADER = (
    "Facts from compacted history (newest first; #N is the message seq; $ command, ! error, "
    "> user request, `name`):"
)
_MARKERS: dict[str, str] = {"command": "$ ", "error": "! ", "request": "> ", "number": "= "}
_KIND_OF_MARKER = {marker[0]: kind for kind, marker in _MARKERS.items()}
_LINE = re.compile(r"^#(\d+) (?:([$!>=]) )?(.+)$", re.MULTILINE)
# Which facts a block lists first when it cannot list them all: the ones an agent needs to go on
# (what failed, what was run, what was asked), then the paths and names it worked with, then
# paths seen only in tool output. Numbers are left to the audit (a bare "30 s" says nothing).
_TIERS: tuple[tuple[str, bool | None], ...] = (
    ("error", None),
    ("command", None),
    ("request", None),
    ("path", True),
    ("identifier", None),
    ("path", False),
)
_TIER_OF = {(kind, named): index for index, (kind, named) in enumerate(_TIERS)}
# What a fact's line (and its newline) takes besides its text and seq: "#", a space, the marker
# or the backticks, and the newline (see _line).
_LINE_EXTRA = {kind: 3 + len(marker) for kind, marker in _MARKERS.items()} | {"identifier": 5}
_SEQ = operator.attrgetter("seq")


def _line(fact: Fact) -> str:
    if fact.kind == "identifier":
        return f"#{fact.seq} `{fact.text}`"
    return f"#{fact.seq} {_MARKERS.get(fact.kind, '')}{fact.text}"


def fact_block(
    facts: Sequence[Fact],
    shown: str | Shown,
    limit: int,
    *,
    shown_in_part: Collection[int] = (),
    group_paths: bool = False,
    shown_memo: dict[str, bool] | None = None,
) -> str:
    """Render the facts that ``shown`` lacks as a block of at most ``limit`` characters.

    Facts whose text occurs in ``shown`` (a :func:`shown_text`), or in a line already chosen, are
    left out. When not all fit, errors, commands and user request lines are chosen first, then
    named paths, identifiers and paths seen only in tool output, each newest first; a line
    that does not fit is skipped for shorter ones. The request lines of a message the view
    shows in part (``shown_in_part``: its marker names the seq, so the rest is a recall away)
    come last. The chosen lines are listed newest first. Numbers are not listed.

    Args:
        facts: The candidates (see :func:`extract_facts`, :func:`merge_facts`).
        shown: What the view already shows, normalised (a :func:`shown_text`, or a
            :class:`Shown`: the same answers, faster).
        limit: The most characters the block may take, header included.
        shown_in_part: Seqs of messages the view shows truncated (the kept first request).
        group_paths: List the paths of one message on one line, space-separated
            (``#812 src/a.py src/b.py``): a listing's paths then take the room of their own
            text, not of a line each (read back with ``parse_fact_block(grouped=True)``).
        shown_memo: Whether ``shown`` holds a text, remembered by text: pass the same dict to
            the calls with the same ``shown`` (blocks of one checkpoint tried at several
            limits), and each text is looked up in ``shown`` once (most of a block's time).

    Returns:
        The block (header and lines), or ``""`` when nothing is missing or nothing fits.
    """
    room = limit - len(BLOCK_HEADER)
    if room <= 0:
        return ""
    newest, order = _newest(facts)
    memo: dict[str, bool] = {} if shown_memo is None else shown_memo
    chosen: list[Fact] = []
    written: list[str] = []
    # The chosen lines, one per line of this text: a text without a newline occurs in one of
    # them exactly when it occurs in this (one search in C instead of one a line).
    written_text = ""
    with_paths: set[int] = set()  # seqs whose path line is started (group_paths)
    for tier in _tiers(newest, shown_in_part):
        for fact in tier:
            text = fact.text
            kind = fact.kind
            grouped = group_paths and kind == "path" and " " not in text  # _groups(fact)
            # len(_line(fact)) + 1, counted without writing the line: most facts do not fit
            # once the room is spent, and are only measured.
            if grouped and fact.seq in with_paths:
                cost = len(text) + 1
            else:
                cost = len(text) + len(str(fact.seq)) + _LINE_EXTRA.get(kind, 3)
            # Any test leaves the fact out: the cheap one first (the search of the view's
            # text is most of a block's time once the room is spent).
            if cost > room:
                continue
            hidden = memo.get(text)
            if hidden is None:
                hidden = memo[text] = text in shown
            if hidden:
                continue
            if "\n" in text:
                if any(text in other for other in written):
                    continue
            elif text in written_text:
                continue
            line = _line(fact)
            chosen.append(fact)
            written.append(line)
            written_text += "\n" + line
            room -= cost
            if grouped:
                with_paths.add(fact.seq)
    if not chosen:
        return ""
    line_of = dict(zip(map(id, chosen), written, strict=True))
    if order is None:  # the facts are distinct objects: newest is in (-seq, index) order
        chosen = [fact for fact in newest if id(fact) in line_of]
    else:
        chosen.sort(key=lambda fact: (-fact.seq, order[id(fact)]))
    lines: list[str] = []
    path_line: dict[int, int] = {}  # seq -> index of its path line in ``lines``
    for fact in chosen:
        if group_paths and _groups(fact):
            index = path_line.get(fact.seq)
            if index is not None:
                lines[index] += " " + fact.text
                continue
            path_line[fact.seq] = len(lines)
        lines.append(line_of[id(fact)])
    return BLOCK_HEADER + "".join("\n" + line for line in lines)


def _newest(facts: Sequence[Fact]) -> tuple[list[Fact], dict[int, int] | None]:
    """``facts`` newest first, in their order among equal seqs, and, when one fact object
    occurs twice, the index (the last) each is ordered by among equal seqs (None: its own)."""
    if len(set(map(id, facts))) == len(facts):
        # A stable sort, reversed, keeps the order of equal seqs: the same as by (-seq, index).
        return sorted(facts, key=_SEQ, reverse=True), None
    order = {id(fact): index for index, fact in enumerate(facts)}
    return sorted(facts, key=lambda fact: (-fact.seq, order[id(fact)])), order


def _tiers(newest: list[Fact], shown_in_part: Collection[int]) -> list[list[Fact]]:
    """``newest`` split by the tiers of :data:`_TIERS` (and the request lines of the messages
    shown in part last), each in the order given; facts of no tier (numbers) are left out."""
    tiers: list[list[Fact]] = [[] for _ in range(len(_TIERS) + 1)]
    for fact in newest:
        kind = fact.kind
        if kind == "request" and shown_in_part and fact.seq in shown_in_part:
            index: int | None = len(_TIERS)
        else:
            index = _TIER_OF.get((kind, fact.named if kind == "path" else None))
        if index is not None:
            tiers[index].append(fact)
    return tiers


def _groups(fact: Fact) -> bool:
    """Whether a fact can share a line with the other paths of its message."""
    return fact.kind == "path" and " " not in fact.text


def parse_fact_block(block: str, *, grouped: bool = False) -> list[Fact]:
    """Read the facts back from a block written by :func:`fact_block`.

    Bare lines read as paths (a name in backticks as an identifier); lines that are not fact
    lines are ignored. ``grouped``: the block was written with ``group_paths``, so a bare line
    holds the space-separated paths of one message.
    """
    facts: list[Fact] = []
    # The lines after the header, read at once: each match lies within one line.
    for digits, marker, text in _LINE.findall(block.partition("\n")[2]):
        seq = int(digits)
        kind: FactKind = "path"
        if marker:
            kind = _KIND_OF_MARKER[marker]  # type: ignore[assignment]
        elif len(text) > 2 and text[0] == "`" and text[-1] == "`":
            kind, text = "identifier", text[1:-1]
        elif grouped:
            facts.extend(Fact(kind="path", text=path, seq=seq) for path in text.split(" "))
            continue
        facts.append(Fact(kind=kind, text=text, seq=seq))
    return facts


def checkpoint_fact_block(
    state: SessionState,
    checkpoint: Checkpoint,
    covered: Iterable[Message],
    limit: int,
    *,
    shown_in_part: Collection[int] = (),
    group_paths: bool = False,
) -> str:
    """Return the fact block of a new checkpoint (pure; see ``Config.fact_index_chars``).

    The candidates are the facts of the newly ``covered`` messages and those of the block of the
    checkpoint it extends (the active one of ``state``), so that a fact outlives later
    compactions while it has room; the block lists those that the view ``checkpoint`` gives (its
    summary, the pinned messages, the retained tail) does not show.

    Args:
        state: The session, before the checkpoint is recorded.
        checkpoint: The new checkpoint, without a block yet.
        covered: The messages it newly covers.
        limit: The block's room in characters.
        shown_in_part: Seqs of messages the view shows truncated, whose request lines come
            last (see :func:`fact_block`).
        group_paths: Write (and read the active block) with the paths of one message on one
            line (see :func:`fact_block`); the session's Config decides it, never a block.
    """
    if limit <= 0:
        return ""
    facts, seen = block_candidates(state, checkpoint, covered, group_paths=group_paths)
    return fact_block(facts, seen, limit, shown_in_part=shown_in_part, group_paths=group_paths)


def fact_candidates(
    state: SessionState,
    checkpoint: Checkpoint,
    covered: Iterable[Message],
    *,
    group_paths: bool = False,
) -> tuple[list[Fact], str]:
    """The facts a new checkpoint's block is chosen from and what the view it gives shows
    (see :func:`checkpoint_fact_block`, which takes the same arguments)."""
    facts, seen = block_candidates(state, checkpoint, covered, group_paths=group_paths)
    return facts, seen.text


def block_candidates(
    state: SessionState,
    checkpoint: Checkpoint,
    covered: Iterable[Message],
    *,
    group_paths: bool = False,
) -> tuple[list[Fact], Shown]:
    """:func:`fact_candidates`, with what the view shows as :class:`Shown`: the same answers
    to ``text in`` it, most of them found without searching the view's whole text."""
    active = state.active_checkpoint
    carried = (
        parse_fact_block(active.facts, grouped=group_paths)
        if active is not None and active.facts
        else []
    )
    seen = shown(assemble(state, checkpoint))
    given = covered if isinstance(covered, list | tuple) else tuple(covered)
    return _merged(carried, extracted_runs(given)), seen


def _merged(carried: Iterable[Fact], runs: Iterable[Iterable[Fact]]) -> list[Fact]:
    """``merge_facts(carried, *runs)``, the runs' texts (extracted: normalized, not empty)
    not normalized again; a fact that the merge leaves as it is stays the same object."""
    collector = _Collector()
    for fact in carried:
        text = normalize(fact.text)
        if text == fact.text and text:
            collector.merge(fact)
        elif text:
            collector.put(fact.kind, text, fact.seq, fact.named)
    for run in runs:
        for fact in run:
            collector.merge(fact)
    return list(collector.found.values())


def merge_facts(*groups: Iterable[Fact]) -> list[Fact]:
    """Merge fact lists: one fact per (kind, text), with the newest seq, named if any is."""
    collector = _Collector()
    for group in groups:
        for fact in group:
            collector.add(fact.kind, fact.text, fact.seq, named=fact.named)
    return list(collector.found.values())


def count_by_kind(facts: Iterable[Fact]) -> Mapping[str, int]:
    """Return how many of ``facts`` are of each kind (every kind listed, zeros included)."""
    counts: dict[str, int] = dict.fromkeys(FACT_KINDS, 0)
    for fact in facts:
        counts[fact.kind] += 1
    return counts
