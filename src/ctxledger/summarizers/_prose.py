"""Prose extraction for the extractive summariser: decisions, TODOs, results, identifiers, focus.

Python's regex engine tries every alternative of a pattern at every position, which makes one
big alternation over prose slow (about 5 MB/s). Here each pattern starts with a literal or a
short character class, which the engine finds at C speed, or the search is a plain
``str.find`` of a trigger phrase, and only the few hits are examined in Python.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from ctxledger.domain.extract import clip, definitions, has_extension, one_line

__all__ = ["focus_pattern", "identifiers", "sentences"]

_BULLET = re.compile(r"^(?:THOUGHT:|[-*•✅❌>#]+|\d+[.)]|\*\*[^*]{1,40}\*\*:?|\s)+")

# Trigger phrases by kind, lower case (matched in a lower-cased copy, at word boundaries).
# "decision" is an explicit choice, "intent" a plain announcement of the next step.
_TRIGGERS: tuple[tuple[str, str], ...] = tuple(
    (phrase, kind)
    for kind, phrases in (
        ("decision", "decided|decide to|decision|chose to|i chose|going with|instead of|"
                     "the fix is|the solution is|the plan is|the approach is|the root cause is|"
                     "my plan|will use|let's use|let us use|opted"),
        ("intent", "i will|i'll|i\u2019ll|we will|we'll|i'm going to|i am going to|let's|"
                   "let\u2019s|let us"),
        ("todo", "still need|need to|next i|next, i|next step|remaining|not yet|left to do|"
                 "should also|have to|must also|open question|pending"),
        ("done", "fixed|resolved|verified|confirmed|succeeded|successfully|passes|passed|"
                 "implemented|created|completed|done|works"),
    )
    for phrase in phrases.split("|")
)
# Markers whose case matters ("TODO", not "todo-app"), matched in the original text.
_CASED_TRIGGERS = (("TODO", "todo"), ("FIXME", "todo"), ("- [ ] ", "todo"))
_KIND_ORDER = {"decision": 0, "todo": 1, "done": 2, "intent": 3}


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _alternation(words: list[str]) -> str:
    """A pattern that matches where one of ``words`` starts: their trie, as nested groups (at
    each character the search tries the few words that go on with it, not every word)."""
    tails: dict[str, list[str]] = {}
    for word in words:
        tails.setdefault(word[:1], []).append(word[1:])
    branches = [re.escape(head) + _alternation(rest) for head, rest in tails.items() if head]
    if not branches:
        return ""
    return "(?:" + "|".join(branches) + ")" + ("?" if "" in tails else "")


# Where a lower-case trigger may start, and the triggers by their first character.
_TRIGGER_START = re.compile(_alternation([phrase for phrase, _ in _TRIGGERS]))
_BY_FIRST: dict[str, list[tuple[str, int, str]]] = {}
for _phrase, _kind in _TRIGGERS:
    _BY_FIRST.setdefault(_phrase[0], []).append((_phrase, _KIND_ORDER[_kind], _kind))


def _bounded(source: str, position: int, end: int) -> bool:
    """Whether ``source[position:end]`` is not part of a longer word."""
    return (position == 0 or not _is_word(source[position - 1])) and (
        end == len(source) or not _is_word(source[end])
    )


def _hits(text: str) -> list[tuple[int, int, int, str]]:
    """Every trigger in ``text`` as ``(start, kind order, end, kind)``, sorted.

    The occurrences of each trigger are taken left to right, each after the last one's end.
    """
    lower = text.lower()
    hits = []
    seen: dict[str, int] = {}  # the end of each trigger's last occurrence
    search = _TRIGGER_START.search
    match = search(lower)
    while match is not None:
        position = match.start()
        for phrase, order, kind in _BY_FIRST[lower[position]]:
            if position >= seen.get(phrase, 0) and lower.startswith(phrase, position):
                end = seen[phrase] = position + len(phrase)
                if phrase[-1] == " " or _bounded(lower, position, end):
                    hits.append((position, order, end, kind))
        match = search(lower, position + 1)
    for phrase, kind in _CASED_TRIGGERS:
        position = text.find(phrase)
        while position != -1:
            end = position + len(phrase)
            if phrase[-1] == " " or _bounded(text, position, end):
                hits.append((position, _KIND_ORDER[kind], end, kind))
            position = text.find(phrase, end)
    hits.sort()
    return hits


def sentences(text: str, limit: int = 240) -> Iterator[tuple[str, str]]:
    """Yield the sentences of assistant prose that state a decision, a TODO or a result.

    Args:
        text: Assistant prose.
        limit: The longest sentence kept (longer ones are clipped).

    Yields:
        ``(kind, sentence)`` pairs; ``kind`` is ``"decision"`` (``decided``, ``instead of``…),
        ``"intent"`` (``I'll``, ``let's``), ``"todo"`` or ``"done"``. Each sentence is yielded
        once, for its first trigger; list bullets and ``THOUGHT:`` are stripped.
    """
    last_end = -1
    for before, _order, after, kind in _hits(text):
        if before < last_end:
            continue
        start = text.rfind("\n", 0, before) + 1
        for sep in (". ", "! ", "? "):
            found = text.rfind(sep, start, before)
            if found != -1:
                start = found + 2
        ends = [text.find(sep, after) for sep in ("\n", ". ", "! ", "? ")]
        last_end = min((e + 1 for e in ends if e != -1), default=len(text))
        sentence = _BULLET.sub("", one_line(text[start:last_end]))
        if len(sentence) >= 12:
            yield kind, clip(sentence, limit)


_TICK = re.compile(r"`([^`\n]{2,80})`")
_CAMEL = re.compile(r"[A-Z][a-z0-9]++(?:[A-Z][a-z0-9]*+)++\b")
_UNDERSCORE = re.compile(r"_[a-z0-9]")
_WORD_RUN = re.compile(r"\w*")
_DOTTED_RUN = re.compile(r"[\w.]*")
_SNAKE = re.compile(r"_{0,2}[a-z][a-z0-9]*(?:_[a-z0-9]+)+_{0,2}")
_ISSUE_NUMBER = re.compile(r"#\d{2,}\b")
_ISSUE_WORD = re.compile(r"(?:[Ii]ssue|PR|[Tt]icket)[ \t]+#?\d+\b")
_VERSION_DOTS = re.compile(r"\.\d+\.\d")
_VERSION = re.compile(r"\d+\.\d+\.\d+(?:[.-]?[a-z]\w*)?")
_VERSION_RUN = re.compile(r"[\w.-]*")
# A backticked name is kept when it is a dotted name or a call: ``foo.bar``, ``f(x, y=[])``.
_NAME_OR_CALL = re.compile(r"^[A-Za-z_][\w.]*(?:\(.*\))?$")
_CODE_LIKE = re.compile(r"[_.\d(]|[a-z][A-Z]")


def _grow(text: str, backwards: str, position: int, run: re.Pattern[str]) -> tuple[int, int]:
    """Return the span of the run of ``run`` characters around ``position`` (grown backwards by
    80 characters at most, in ``backwards``, the text reversed)."""
    mirrored = len(text) - position
    behind = run.match(backwards, mirrored, mirrored + 80)
    ahead = run.match(text, position)
    assert behind is not None and ahead is not None  # a pattern ending in * always matches
    return position - behind.end() + mirrored, ahead.end()


def _kept_check(kept: dict[str, bool], check: Callable[[str], bool], text: str) -> bool:
    """``check(text)``, kept in ``kept`` (emptied when full): names repeat across messages."""
    found = kept.get(text)
    if found is None:
        if len(kept) >= 4096:
            kept.clear()
        found = kept[text] = check(text)
    return found


def _is_code_name(name: str) -> bool:
    """Whether a backticked ``name`` is a dotted name or a call, and looks like code."""
    return bool(
        _NAME_OR_CALL.match(name)
        and _CODE_LIKE.search(name)
        and ("(" in name or not has_extension(name))
    )


def _is_snake(word: str) -> bool:
    return _SNAKE.fullmatch(word) is not None


_code_names: dict[str, bool] = {}
_snakes: dict[str, bool] = {}


def identifiers(text: str, *, prose: bool) -> Iterator[str]:
    """Yield the identifiers and numbers named in ``text``.

    Args:
        text: The text to scan.
        prose: ``text`` is user or assistant prose (backticked names, calls, CamelCase,
            snake_case, issue numbers, versions); otherwise it is code written by a tool call and
            only its definitions (``def``, ``class``…) count.

    Yields:
        Names that look like code (an underscore, a dot, a digit, a call or inner capitals):
        plain words such as ``print`` or ``fields`` are too ambiguous to be worth the room.
    """
    if not prose:
        yield from definitions(text)
        return
    if "`" in text:
        for match in _TICK.finditer(text):
            name = match.group(1).strip()
            if _kept_check(_code_names, _is_code_name, name):
                yield name
    backwards = text[::-1]
    paren = text.find("(", 1)
    while paren != -1:
        if _is_word(text[paren - 1]):
            left, right = _grow(text, backwards, paren, _DOTTED_RUN)
            name = text[left:right].strip(".")
            if name and not name[0].isdigit() and _CODE_LIKE.search(name):
                yield name
        paren = text.find("(", paren + 1)
    end = 0
    for match in _UNDERSCORE.finditer(text):
        if match.start() < end:
            continue
        start, end = _grow(text, backwards, match.start(), _WORD_RUN)
        word = text[start:end]
        if text[end : end + 1] != "." and _kept_check(_snakes, _is_snake, word):
            yield word
    for match in _CAMEL.finditer(text):
        if match.start() == 0 or not _is_word(text[match.start() - 1]):
            yield match.group()
    if "#" in text:
        for match in _ISSUE_NUMBER.finditer(text):
            yield match.group()
    yield from _issue_words(text)
    end = 0
    for match in _VERSION_DOTS.finditer(text):
        if match.start() >= end:
            start, end = _grow(text, backwards, match.start(), _VERSION_RUN)
            version = _VERSION.search(text, start, end)
            if version:
                yield version.group()


def _issue_words(text: str) -> list[str]:
    """The matches of ``_ISSUE_WORD`` in ``text``, in order: each is searched for where its
    literal ("ssue", "PR", "icket") is found (matches cannot overlap: after the word come only
    blanks, a ``#`` and digits), not tried at every ``i``, ``t`` or ``P``."""
    found: list[tuple[int, str]] = []
    for literal, back in (("ssue", 1), ("PR", 0), ("icket", 1)):
        position = text.find(literal)
        while position != -1:
            if position >= back:
                match = _ISSUE_WORD.match(text, position - back)
                if match is not None:
                    found.append((match.start(), match.group()))
            position = text.find(literal, position + 1)
    return [word for _, word in sorted(found)]


_STOPWORDS = frozenset({
    'the', 'and', 'for', 'with', 'that', 'this', 'from', 'into', 'keep', 'make', 'sure', 'about',
    'please', 'also', 'all', 'any', 'are', 'was', 'were', 'has', 'have', 'had', 'its', "it's",
    'our', 'your', 'their', 'them', 'then', 'than', 'when', 'what', 'which', 'while', 'will',
    'would', 'should', 'could', 'focus', 'preserve', 'retain', 'remember', 'important', 'summary',
    'summarise', 'summarize', 'details', 'detail', 'only', 'just', 'more', 'most', 'some', 'such',
})


def focus_pattern(focus: str | None) -> re.Pattern[str] | None:
    """Compile the keywords of a focus request into one case-insensitive pattern.

    Words of three letters or more that are not stop words count; a plural ``s`` is dropped so
    that "signatures" also finds "signature".

    Args:
        focus: What a manual compaction asked to keep, or ``None``.

    Returns:
        The pattern, or ``None`` when there is no focus or it has no keyword.
    """
    if not focus:
        return None
    words = []
    for word in re.findall(r"[\w./-]+", focus.lower()):
        word = word.strip("./-")
        if len(word) < 3 or word in _STOPWORDS:
            continue
        if len(word) > 4 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        words.append(re.escape(word))
    if not words:
        return None
    alternatives = "|".join(sorted(set(words), key=len, reverse=True))
    return re.compile(r"(?<!\w)(?:" + alternatives + ")", re.IGNORECASE)
