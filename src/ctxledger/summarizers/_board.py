"""The board of the extractive summariser: candidate items by section, and the choice of the
items that fit.

Every fact becomes an :class:`Item` of a section, deduplicated by a normalised key. When the
summary is rendered, each section first gets a guaranteed share of the budget (paths and
commands the largest), then leftovers go to the best remaining items in :data:`DROP_ORDER`
reversed; within a section, items about the focus come first, then by tier, then newest first.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ctxledger.domain import extract as ex

__all__ = [
    "COUNT",
    "DROP_ORDER",
    "FALLBACK",
    "FIRST",
    "LATEST",
    "MINOR",
    "NEW",
    "PREVIOUS",
    "SECTIONS",
    "TITLES",
    "Board",
    "Item",
    "chronological",
    "merge_path_suffixes",
    "render",
]

#: Section ids and their headings, in the order they are rendered.
SECTIONS: dict[str, str] = {
    "focus": "Focus",
    "requests": "User requests",
    "errors": "Errors",
    "decisions": "Decisions",
    "todos": "Open TODOs",
    "progress": "Progress",
    "commands": "Commands",
    "files": "Files",
    "identifiers": "Identifiers",
}
#: Sections in the order they lose items when the budget is short: the first loses first.
DROP_ORDER: tuple[str, ...] = (
    "progress", "identifiers", "decisions", "todos", "errors", "files", "commands", "focus",
    "requests",
)
_KEEP_ORDER = DROP_ORDER[::-1]
# The share of the budget each section is guaranteed before leftovers go by priority. Paths and
# commands get the most: they are what an agent needs to continue and what summaries lose.
_SHARES = {
    "requests": 0.20, "commands": 0.22, "files": 0.22, "errors": 0.12, "decisions": 0.06,
    "todos": 0.05, "identifiers": 0.07, "progress": 0.06, "focus": 0.0,
}
_FOCUS_SHARE = 0.12
TITLES = {title: section for section, title in SECTIONS.items()}
#: The repeat count after a command, ``(x3)``; a multiplication sign (U+00D7) is read too.
COUNT = re.compile(r" \([x\u00d7](\d+)\)$")
LATEST = "Latest: "
# Tier of an item within its section: new and important, carried over from the previous
# summary, new but minor (a path seen only in tool output, a command only mentioned in prose).
FIRST, NEW, PREVIOUS, MINOR = -1, 0, 1, 2
# A path of the previous summary spelled out in another item (a command): listed on its own only
# when that item is dropped and room is left.
FALLBACK = 3
_BY_COUNT = frozenset({"files", "identifiers"})


@dataclass(slots=True, eq=False)
class Item:
    """One candidate line of the summary.

    Attributes:
        text: The line (a multi-line text renders with indented continuation lines).
        tier: :data:`FIRST`, :data:`NEW`, :data:`PREVIOUS`, :data:`MINOR` or :data:`FALLBACK`.
        recency: Larger is newer; items of the previous summary are below every new one.
        count: How often the fact occurred (shown as ``(xN)`` for commands).
        focus: The item mentions the focus.
        counted: Show the count.
        prefix: Rendered before the text (``Latest: ``), not part of the key.
    """

    text: str
    tier: int
    recency: int
    count: int = 1
    focus: bool = False
    counted: bool = False
    prefix: str = ""

    def rendered(self) -> str:
        """The item as a summary line, with its leading newline and ``- ``."""
        text = self.text
        # "(x1)" is written only when the text itself ends like a count, so that it parses back.
        if self.counted and (self.count > 1 or COUNT.search(text)):
            text = f"{text} (x{self.count})"
        return "\n- " + (self.prefix + text).replace("\n", "\n  ")

    def width(self) -> int:
        """``len(self.rendered())``, without rendering (a prefix holds no newline)."""
        text = self.text
        width = 3 + len(self.prefix) + len(text) + 2 * text.count("\n")
        if self.counted and (self.count > 1 or COUNT.search(text)):
            width += len(f" (x{self.count})")
        return width


class Board:
    """The candidate items of every section, deduplicated by a normalised key."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, Item]] = {section: {} for section in SECTIONS}
        self.latest: Item | None = None

    def add(
        self, section: str, text: str, tier: int, recency: int, *, key: str | None = None,
        count: int = 1, counted: bool = False,
    ) -> Item | None:
        """Add a fact, or merge it into the item with the same key; return the item."""
        text = text.rstrip()
        if not text:
            return None
        key = key if key is not None else ex.one_line(text)
        bucket = self.items[section]
        item = bucket.get(key)
        if item is None:
            item = bucket[key] = Item(text, tier, recency, count, counted=counted)
            return item
        item.count += count
        item.tier = min(item.tier, tier)
        if recency >= item.recency:
            item.recency, item.text = recency, text
        return item

    def add_names(
        self, section: str, names: Sequence[str], tier: int, recency: int, *, count: int = 1
    ) -> None:
        """:meth:`add` each of ``names`` (texts without whitespace, such as paths), repeats
        merged first: a name given ``n`` times adds ``n * count`` to its item's count."""
        if not names:
            return
        bucket = self.items[section]
        for name, times in (Counter(names) if len(names) > 1 else {names[0]: 1}).items():
            item = bucket.get(name)
            if item is None:
                bucket[name] = Item(name, tier, recency, count * times)
                continue
            item.count += count * times
            item.tier = min(item.tier, tier)
            if recency >= item.recency:
                item.recency, item.text = recency, name

    def set_latest(self, item: Item | None) -> None:
        """Mark ``item`` as the latest state of the work (only one item is)."""
        if self.latest is not None:
            self.latest.prefix = ""
        if item is not None:
            item.prefix = LATEST
        self.latest = item


def merge_path_suffixes(files: dict[str, Item]) -> None:
    """Fold each path into a longer one that ends with it (``a/b.py`` into ``/repo/a/b.py``).

    The longer path contains the shorter one, so keeping only it loses nothing and saves room.
    """
    owner: dict[str, str] = {}
    for key in sorted(files, key=lambda k: (-len(k), k)):
        position = key.find("/", 1)
        while position != -1:
            owner.setdefault(key[position + 1 :], key)
            position = key.find("/", position + 1)
    for key in list(files):
        target = owner.get(key)
        if target is None or target == key or target not in files:
            continue
        item, into = files.pop(key), files[target]
        into.tier = min(into.tier, item.tier)
        into.recency = max(into.recency, item.recency)
        into.count += item.count


def _rank(item: Item) -> tuple[int, int, int]:
    return (0 if item.focus else 1, item.tier, -item.recency)


def _rank_by_count(item: Item) -> tuple[int, int, int, int]:
    # A name or path mentioned often matters more than one seen once, however recent.
    return (0 if item.focus else 1, item.tier, -min(item.count, 3), -item.recency)


def render(board: Board, budget: int, with_focus: bool) -> str:
    """Choose the items that fit in ``budget`` characters and render them by section."""
    ranked = {
        s: sorted(board.items[s].values(), key=_rank_by_count if s in _BY_COUNT else _rank)
        for s in SECTIONS
    }
    fallback = [item for item in ranked["files"] if item.tier == FALLBACK]
    ranked["files"] = [item for item in ranked["files"] if item.tier != FALLBACK]
    chosen: dict[str, list[Item]] = {s: [] for s in SECTIONS}
    heading = {s: len("\n## " + title) for s, title in SECTIONS.items()}
    size = {id(item): item.width() for bucket in ranked.values() for item in bucket}
    size.update((id(item), item.width()) for item in fallback)
    smallest = len("\n- x")

    def spent(section: str) -> int:
        items = chosen[section]
        return heading[section] + sum(size[id(item)] for item in items) if items else 0

    def used() -> int:
        return sum(spent(section) for section in SECTIONS)

    def fill(section: str, limit: int, total: int, most: int | None = None) -> int:
        """Add the best remaining items of ``section`` within ``limit``; return the new total."""
        room = min(limit - spent(section), budget - total)
        left = []
        for index, item in enumerate(ranked[section]):
            if room < smallest or (most is not None and index >= most):
                left.extend(ranked[section][index:])
                break
            extra = size[id(item)] + (0 if chosen[section] else heading[section])
            if extra <= room:
                chosen[section].append(item)
                room -= extra
                total += extra
            else:
                left.append(item)
        ranked[section] = left
        return total

    # The best-ranked request (the task itself) comes before any share: it is dropped last.
    total = fill("requests", budget, 0, most=1)
    scale = 1.0 - _FOCUS_SHARE if with_focus else 1.0
    for section in _KEEP_ORDER:
        share = _FOCUS_SHARE if section == "focus" else _SHARES[section] * scale
        total = fill(section, int(budget * share), total)
    for section in _KEEP_ORDER:
        total = fill(section, budget, total)
    # A path already spelled out in a command, request or error needs no line of its own; the
    # room it frees goes to the next items by priority (which may spell out more paths).
    for _ in range(4):
        written = "\n".join(
            item.text for section in SECTIONS if section != "files" for item in chosen[section]
        )
        if not any(item.text in written for item in chosen["files"]):
            break
        chosen["files"] = [item for item in chosen["files"] if item.text not in written]
        ranked["files"] = [item for item in ranked["files"] if item.text not in written]
        total = used()
        for section in _KEEP_ORDER:
            total = fill(section, budget, total)
    written = "\n".join(item.text for section in SECTIONS for item in chosen[section])
    ranked["files"] = [item for item in fallback if item.text not in written]
    fill("files", budget, total)
    out = []
    for section, title in SECTIONS.items():
        if chosen[section]:
            out.append("\n## " + title)
            out.extend(item.rendered() for item in sorted(chosen[section], key=chronological))
    return "".join(out)


def chronological(item: Item) -> int:
    return item.recency
