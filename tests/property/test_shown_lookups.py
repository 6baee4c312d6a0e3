"""What a view shows, read per message and looked up with shortcuts, answers as the whole text does.

A fact is shown by a view when its text occurs in the view's messages' texts joined and with
whitespace runs collapsed (``shown_text``). The text is now made of each message's part,
collapsed on its own and kept in a memo, joined by single spaces; ``one_line`` collapses with
``str.split`` instead of a regular expression; and ``Shown`` answers ``text in`` with three
shortcuts (a fact that is one of the view's words is shown, a fact with an inner word the view
lacks is not, a fact in the summary's part is). The fact block is part of a checkpoint and of
every view hash after it: each of these must give exactly what the plain definition gives.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxledger.domain import _shown as _shown_module
from ctxledger.domain import extract as ex
from ctxledger.domain._shown import Shown, shown, shown_text
from ctxledger.domain.facts import BLOCK_HEADER, FACT_KINDS, Fact, fact_block
from ctxledger.messages import Message, ToolCall

# Every character str.split and the regular expression's \s take for whitespace, and a few
# letters, so that texts hold one another often.
_SPACES = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000"
_LETTERS = "ab/.x_"
_TEXT = st.text(alphabet=_LETTERS + " \n" + _SPACES[:6], max_size=40)


def _plain_shown_text(messages: list[Message]) -> str:
    """The definition as it was: every part of every message joined by newlines, collapsed."""
    parts: list[str] = []
    for message in messages:
        parts.append(message.content)
        for call in message.tool_calls:
            parts.append(call.name)
            parts.append(call.arguments)
            command = ex.command_of(call.name, ex.decode_arguments(call.arguments))
            if command:
                parts.append(command)
    return re.sub(r"\s+", " ", "\n".join(parts)).strip()


_CALL = st.builds(
    ToolCall,
    id=st.sampled_from(["c1", "c2"]),
    name=st.sampled_from(["bash", "read_file", "x"]),
    arguments=st.builds(
        lambda key, text: json.dumps({key: text}),
        st.sampled_from(["command", "path", "text"]),
        _TEXT,
    ),
)


@st.composite
def _messages(draw: st.DrawFn) -> Message:
    role = draw(st.sampled_from(["user", "assistant", "tool", "system", "summary"]))
    content = draw(_TEXT)
    seq = draw(st.integers(min_value=1, max_value=9))
    if role == "tool":
        return Message(role="tool", content=content, tool_call_id="c1", name="bash", seq=seq)
    if role == "assistant":
        calls = tuple(draw(st.lists(_CALL, max_size=2, unique_by=lambda call: call.id)))
        return Message(role="assistant", content=content, tool_calls=calls, seq=seq)
    return Message(role=role, content=content, seq=seq)


_MESSAGE = _messages()


@given(st.text(alphabet=_LETTERS + _SPACES, max_size=60))
def test_one_line_is_the_regular_expressions_collapse(text: str) -> None:
    assert ex.one_line(text) == re.sub(r"\s+", " ", text).strip()


@given(st.lists(_MESSAGE, max_size=6), st.integers(min_value=0, max_value=3))
def test_the_shown_text_read_per_message_is_the_whole_texts_collapse(
    messages: list[Message], repeat: int
) -> None:
    # The same objects again and again (read from the memo), and copies (read afresh).
    views = [messages * (1 + repeat), [*messages, *[Message(**_fields(m)) for m in messages]]]
    for view in views:
        assert shown_text(view) == _plain_shown_text(view)
        assert shown(view).text == _plain_shown_text(view)


def _fields(message: Message) -> dict[str, object]:
    return {name: getattr(message, name) for name in message.__struct_fields__}


# Facts drawn from the view's own words (so that many are shown, and many nearly are) and
# from the letters, with single spaces between words.
@given(
    messages=st.lists(_MESSAGE, min_size=0, max_size=6),
    picks=st.lists(
        st.tuples(st.integers(min_value=0, max_value=200), st.integers(min_value=0, max_value=30)),
        max_size=12,
    ),
    made=st.lists(st.text(alphabet=_LETTERS + " ", max_size=14), max_size=12),
)
def test_a_lookup_in_shown_is_a_search_of_its_text(
    messages: list[Message], picks: list[tuple[int, int]], made: list[str]
) -> None:
    seen = shown(messages)
    text = seen.text
    facts = [text[start : start + size] for start, size in picks] + made
    for fact in facts:
        assert (fact in seen) == (fact in text), fact


@given(
    messages=st.lists(_MESSAGE, max_size=6),
    texts=st.lists(st.text(alphabet=_LETTERS + " ", min_size=1, max_size=14), max_size=20),
    kinds=st.lists(st.sampled_from(FACT_KINDS), min_size=20, max_size=20),
    limit=st.integers(min_value=0, max_value=len(BLOCK_HEADER) + 200),
    group_paths=st.booleans(),
)
def test_a_block_chosen_with_shown_is_the_block_chosen_with_its_text(
    messages: list[Message],
    texts: list[str],
    kinds: list[str],
    limit: int,
    group_paths: bool,
) -> None:
    seen = shown(messages)
    words = seen.text.split(" ")
    facts = [
        Fact(kind=kind, text=text if index % 2 else " ".join(words[index : index + 2]) or text,  # type: ignore[arg-type]
             seq=index % 5, named=bool(index % 3))
        for index, (kind, text) in enumerate(zip(kinds, texts, strict=False))
    ]  # fmt: skip
    expected = fact_block(facts, seen.text, limit, group_paths=group_paths)
    assert fact_block(facts, seen, limit, group_paths=group_paths) == expected


def test_shown_refuses_what_is_not_a_string() -> None:
    seen = Shown([])
    assert "a" not in seen
    try:
        _ = 3 in seen
    except TypeError as exc:
        assert "requires a string" in str(exc)
    else:
        raise AssertionError("a number was looked up")


def test_the_memo_of_parts_stays_within_its_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each message's part is read once while it is kept; the memo holds its messages, so it
    counts their contents (whitespace too) and arguments, and drops the oldest first."""
    reads: list[int] = []
    real = _shown_module._read

    def counted(message: Message) -> tuple[str, frozenset[str]]:
        reads.append(message.seq or 0)
        return real(message)

    monkeypatch.setattr(_shown_module, "_read", counted)
    monkeypatch.setattr(_shown_module, "_memo", _shown_module._Memo())
    monkeypatch.setattr(_shown_module, "MEMO_CHARS", 1_000)
    blank = Message(role="user", content=" " * 600, seq=1)  # shows nothing, holds 600
    words = [Message(role="user", content=f"word {n} " * 10, seq=n) for n in range(2, 12)]
    expected = " ".join(" ".join([f"word {n}"] * 10) for n in range(2, 12))
    assert shown_text([blank, *words]) == expected
    memo = _shown_module._memo
    assert memo.chars <= 1_000
    assert id(blank) not in memo.entries  # the oldest went first
    reads.clear()
    shown_text(words[-3:])
    assert reads == []  # the newest are kept
