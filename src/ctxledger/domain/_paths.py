"""File paths in text: :func:`paths` (re-exported by :mod:`ctxledger.domain.extract`).

What a text's paths are is a pure function of the text, read often for the same text (a summary
and the fact reads see the same messages; a summary's items carry over to the next one): the
result is kept by the text (:class:`~ctxledger.domain._text_memo.TextMemo`), with where each
path's run of characters starts, so that the paths of a slice of a long text can be told from
those of the whole (:func:`path_runs`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from ctxledger.domain._text_memo import TextMemo

__all__ = ["has_extension", "keep_paths", "path_runs", "paths", "read_path_runs"]

_EXTENSIONS = (
    "py|pyi|pyx|ipynb|js|jsx|mjs|cjs|ts|tsx|vue|svelte|json|jsonl|md|rst|txt|toml|yaml|yml|cfg|"
    "ini|conf|sh|bash|zsh|html|htm|css|scss|c|h|cc|cpp|hpp|rs|go|java|kt|rb|php|cs|swift|sql|"
    "lock|xml|csv|tsv|log|patch|diff|env|in|mk|gradle|proto|lua|pl|r|ex|exs|tf|dockerfile"
)
# Bare names (no slash) need an unambiguous extension: "django.conf" is a module, not a file.
_BARE_EXTENSIONS = (
    "py|pyi|pyx|ipynb|js|jsx|mjs|cjs|ts|tsx|vue|svelte|json|jsonl|md|rst|txt|toml|yaml|yml|cfg|"
    "ini|sh|bash|html|htm|css|scss|cpp|hpp|java|kt|rb|php|swift|sql|lock|xml|csv|tsv|log|patch|"
    "diff|mk|gradle|proto|lua|tf"
)
# Paths are found from anchors (a slash before a name character, or a known extension) and
# grown to the run of path characters around them: a search for anchors skips most of the text
# at C speed, where a path pattern tried at every word start costs seven times more.
_ANCHOR = re.compile(r"/[\w@+~-]|\.(?:" + _BARE_EXTENSIONS + r")\b")
_RUN = re.compile(r"[\w.@~/-]*")


def _by_first_letter(words: str) -> str:
    """The alternation ``words`` (``"py|pyi|js"``) as one branch per first letter, behind a
    class of those letters (``(?=[jp])(?:j(?:s)|p(?:y|yi))``): it matches what ``words`` does
    (in a lookahead, where which branch matched does not matter), but a dot that no extension
    follows fails at one check, not one per extension (a text has a dot per sentence)."""
    grouped: dict[str, list[str]] = {}
    for word in sorted(words.split("|")):
        grouped.setdefault(word[0], []).append(word[1:])
    branches = "|".join(f"{first}(?:{'|'.join(rests)})" for first, rests in grouped.items())
    return f"(?=[{''.join(grouped)}])(?:{branches})"


# An anchor and the rest of its run in one search (the anchor's slash or dot is a run character).
_ANCHORED_RUN = re.compile(
    r"(?:/(?=[\w@+~-])|\.(?=" + _by_first_letter(_BARE_EXTENSIONS) + r"\b))[\w.@~/-]*"
)
_SCHEME = re.compile(r"\b(?:https?|ftp|file):$")
# A run of 30 alphanumerics, or a segment mixing upper and lower case with digits, is base64 or
# a hash (a certificate's body), not a name.
_BLOB = re.compile(
    r"[A-Za-z0-9]{30,}"
    r"|(?:^|/)(?=[^/]*?[A-Z][^/]*?[A-Z])(?=[^/]*?[a-z])(?=[^/]*?\d)[A-Za-z0-9]{8,}(?:/|$)"
)
_BARE_NAME = re.compile(r"^\w[\w@+-]*(?:\.[\w@+-]+)*\.(?:" + _BARE_EXTENSIONS + r")$")
_HAS_EXTENSION = re.compile(r"\.(?:" + _EXTENSIONS + r")$", re.IGNORECASE)
_LETTER = re.compile(r"[A-Za-z]")
_DIFF_PREFIX = re.compile(r"^[ab]/")
_SED = re.compile(r"^\d*[sy]/|/[gip]+$")


def paths(text: str) -> Iterator[str]:
    """Iterate over the file paths and path-like names in ``text``, in order, repeats included.

    Three shapes count: rooted (``/x``, ``./x``, ``../x``, ``~/x``), relative with a slash and
    either an extension or two levels (``src/app.py``, ``src/pkg/mod``), and a bare file name with
    a known extension (``setup.py``). URLs, closing tags (``</output>``), sed expressions
    (``s/a/b/g``) and placeholders (``/path/to/file``) are skipped.

    Args:
        text: Any text: a message, a command, tool output.

    Returns:
        Each path with trailing dots removed and diff prefixes (``a/``, ``b/``) dropped.
    """
    return iter(_kept(text)[1])


def path_runs(text: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The paths of ``text`` (:func:`paths`), and where the run of characters of each starts.

    A run never holds a newline, and what is read of the text around a run stays on its line:
    the paths of a text cut right after a newline are those of the part before the cut, then
    those of the part after it. So the paths of whole lines of a text are those of its runs
    that start on them (:mod:`ctxledger.domain._long_text`).
    """
    return _kept(text)


def keep_paths(text: str, runs: tuple[tuple[int, ...], tuple[str, ...]]) -> None:
    """Keep ``runs`` as :func:`path_runs` of ``text`` (made from its parts' elsewhere)."""
    _kept.put(text, runs)


def read_path_runs(text: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """:func:`path_runs`, read now and not kept (for parts of a text read once)."""
    starts: list[int] = []
    found: list[str] = []
    # Each run of path characters that holds an anchor is read once, from its first anchor:
    # the next search starts where the run ends (a search per run, not a loop over every
    # anchor), and what a run's text is (:func:`_path_shape`) is kept for the runs that repeat.
    # A run is grown backwards (by 256 characters at most) in the reversed text, made once.
    search, run, shapes = _ANCHORED_RUN.search, _RUN.match, _shapes
    size = len(text)
    reversed_text = ""
    end = 0
    while (match := search(text, end)) is not None:
        anchor, end = match.span()
        if not reversed_text:
            reversed_text = text[::-1]
        behind = size - anchor
        start = anchor - run(reversed_text, behind, behind + 256).end() + behind  # type: ignore[union-attr]
        path = text[start:end].lstrip("@-").rstrip(".-")
        shape = shapes.get(path)
        if shape is None:
            shape = _path_shape(path)
            if len(shapes) >= _SHAPES_KEPT:
                shapes.clear()
            shapes[path] = shape
        if shape == _NOT_A_PATH:
            continue
        before = text[start - 1] if start else ""
        if before == "<":
            continue  # a closing tag
        if before == ":" and path.startswith("//"):
            scheme = _SCHEME.search(text, max(0, start - 9), start)
            if scheme:
                starts.append(start)
                found.append(scheme.group() + path)  # a web link is a fact to keep as well
            continue
        if shape == _NESTED and path.startswith(("a/", "b/")):
            line_start = text.rfind("\n", 0, start) + 1
            if text.startswith(("---", "+++", "diff "), line_start):
                path = _DIFF_PREFIX.sub("", path)
        starts.append(start)
        found.append(path)
    return tuple(starts), tuple(found)


# What a run of path characters is, from its text alone (:func:`_path_shape`): not a path (too
# short, no letter, a placeholder, a blob, "and/or"), a bare known file name, or a path with a /.
_NOT_A_PATH, _BARE, _NESTED = 0, 1, 2

#: The shapes of recent runs, by their text (a session names the same paths again and again):
#: emptied when full. Reads and writes of a dict are atomic, so threads share it safely.
_shapes: dict[str, int] = {}
_SHAPES_KEPT = 4096


def _path_shape(path: str) -> int:
    """What ``path`` (a run of path characters, trimmed) is, from its text alone."""
    if len(path) < 3 or not _LETTER.search(path) or "path/to/" in path or _BLOB.search(path):
        return _NOT_A_PATH
    if "/" not in path:
        return _BARE if _BARE_NAME.match(path) else _NOT_A_PATH
    if path[0] not in "/~." and not _HAS_EXTENSION.search(path) and (
        path.count("/") < 2 or _SED.search(path)
    ):
        return _NOT_A_PATH  # "and/or", "s/old/new/g": a relative path needs depth or an extension
    return _NESTED


def has_extension(name: str) -> bool:
    """Tell whether ``name`` ends with a known file extension (``.py``, ``.json``…)."""
    return _HAS_EXTENSION.search(name) is not None


#: The paths of recent texts (a text's paths are read by the summary and by the fact reads, and
#: a summary's items are read again in the next one).
_kept = TextMemo(read_path_runs, size=4096, chars=2_000_000)
