"""The paths, error lines and other finds of a text and of its parts, each text read once.

A background summary reads a long tool result twice: the summariser is given its head and tail
and, for the middle, the facts the middle holds (:mod:`ctxledger.domain.digest`), and the fact
reads read it whole (:mod:`ctxledger.domain._fact_extract`). Both readings go by lines: a path
never spans a newline, and what is read around it stays on its line
(:func:`~ctxledger.domain._paths.path_runs`); an error line is read from its own line (and, for
a traceback's head, the lines down to the exception that ends it,
:func:`~ctxledger.domain.extract.error_line_at`). So the paths and error lines of a part made of
whole lines are those of the whole text found on those lines: a part's are taken from the
whole's (kept by the text: :func:`~ctxledger.domain._paths.path_runs`,
:func:`~ctxledger.domain.extract.error_scan`), and only its first and last lines, which a cut
may have split, are read again. The same holds for what prose gives the facts
(:func:`~ctxledger.domain._fact_text.prose_finds`), and for a cut message, whose head and tail
are parts of the whole (:func:`keep_cut_paths`, :func:`keep_cut_errors`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence

from ctxledger.domain import extract as ex
from ctxledger.domain._paths import keep_paths, path_runs, read_path_runs

__all__ = [
    "error_lines_between",
    "found_between",
    "keep_cut_errors",
    "keep_cut_paths",
    "paths_between",
    "runs_between",
]


def _inner_lines(text: str, start: int, end: int) -> tuple[int, int] | None:
    """Where the whole lines of ``text[start:end]`` after its first begin and before its last
    end (both at the start of a line of ``text``), or None when it holds no newline."""
    first = text.find("\n", start, end) + 1
    if not first:
        return None
    return first, text.rfind("\n", start, end) + 1


#: What a kind of find gives in a text: where each found one starts, and its text.
_Finder = Callable[[str], tuple[Sequence[int], Sequence[str]]]


def runs_between(
    found: _Finder, text: str, start: int, end: int, piece: _Finder | None = None
) -> tuple[list[int], list[str]]:
    """``found(text[start:end])``, where ``found`` gives what a text holds and where each
    starts, each on one line, and reads nothing past its line: the finds of the inner lines
    are taken from the whole's, and the first and last lines are read with ``piece`` (the same
    reading, not kept: ``found`` by default)."""
    piece = piece or found
    inner = _inner_lines(text, start, end)
    if inner is None:
        starts, values = piece(text[start:end])
        return list(starts), list(values)
    first, last = inner
    head_starts, head_values = piece(text[start:first])
    starts, values = found(text)
    low, high = bisect_left(starts, first), bisect_left(starts, last)
    tail_starts, tail_values = piece(text[last:end])
    return (
        [
            *head_starts,
            *(at - start for at in starts[low:high]),
            *(at + last - start for at in tail_starts),
        ],
        [*head_values, *values[low:high], *tail_values],
    )


def found_between(
    found: _Finder, text: str, start: int, end: int, piece: _Finder | None = None
) -> list[str]:
    """``list(found(text[start:end])[1])``, taken from the whole's (see :func:`runs_between`)."""
    return runs_between(found, text, start, end, piece)[1]


def paths_between(text: str, start: int, end: int) -> list[str]:
    """``list(paths(text[start:end]))``, the paths of its inner lines taken from the whole's."""
    return found_between(path_runs, text, start, end, read_path_runs)


def keep_cut_paths(cut: str, text: str, head_end: int, block: str, tail_start: int) -> None:
    """Keep the paths of ``cut``, which is ``text[:head_end] + "\n" + block + text[tail_start:]``
    with ``block`` ending in a newline (a message the digest cut, which the summariser reads):
    those of the head and the tail are taken from the whole text's (a newline after the head
    changes none of its paths)."""
    head = runs_between(path_runs, text, 0, head_end, read_path_runs)
    middle = read_path_runs(block)
    tail = runs_between(path_runs, text, tail_start, len(text), read_path_runs)
    at_block = head_end + 1
    at_tail = at_block + len(block)
    starts = (*head[0], *(at + at_block for at in middle[0]), *(at + at_tail for at in tail[0]))
    keep_paths(cut, (starts, (*head[1], *middle[1], *tail[1])))


def keep_cut_errors(cut: str, text: str, head_end: int, block: str, tail_start: int) -> None:
    """Keep :func:`~ctxledger.domain.extract.error_scan` of ``cut`` (see :func:`keep_cut_paths`)
    when that of ``text`` is kept: the head's lines but the last, and the tail's but the first,
    give what they give in the whole text (unless a traceback's reading left them); the lines
    between are read in ``cut``."""
    whole = ex.kept_error_scan(text)
    if whole is None:
        return
    inner = _inner_lines(text, 0, head_end)
    head_last = inner[1] if inner is not None else 0
    tail_first = text.find("\n", tail_start) + 1 or len(text)
    shift = head_end + 1 + len(block) - tail_start
    head: list[tuple[int, str | None, int]] = []
    tail: list[tuple[int, str | None, int]] = []
    for start, line, stop in zip(*whole, strict=True):
        if start < head_last:
            read = (line, stop) if stop < head_last else ex.error_line_at(cut, start)
            head.append((start, *read))
        elif start >= tail_first:
            tail.append((start + shift, line, stop + shift))
    between = [
        (head_last + start, *ex.error_line_at(cut, head_last + start))
        for start in ex.error_line_starts(cut[head_last : tail_first + shift], viewer=False)
    ]
    found = head + between + tail
    starts = tuple(start for start, _, _ in found)
    ex.keep_error_scan(cut, (starts, tuple(r[1] for r in found), tuple(r[2] for r in found)))


def error_lines_between(text: str, start: int, end: int) -> list[str]:
    """``error_lines(text[start:end], viewer=False, limit=None)``, the error lines of its inner
    lines taken from the whole's (unless their reading went past them)."""
    part = text[start:end]
    inner = _inner_lines(text, start, end)
    if inner is None:
        return ex.error_lines(part, viewer=False, limit=None)
    first, last = inner
    heads = ex.error_line_starts(part[: first - start], viewer=False)
    lines = [ex.error_line_at(part, 0)[0]] if heads else []
    starts, read, stops = ex.error_scan(text)
    for index in range(bisect_left(starts, first), bisect_left(starts, last)):
        if stops[index] < last:
            lines.append(read[index])
        else:  # a traceback read down past the part's inner lines: read in the part
            lines.append(ex.error_line_at(part, starts[index] - start)[0])
    if ex.error_line_starts(part[last - start :], viewer=False):
        lines.append(ex.error_line_at(part, last - start)[0])
    return ex.distinct_lines(lines)
