"""``Message``'s checks, rewritten with a fast path for messages without tool calls and a
``with_seq`` that does not check again, refuse exactly what they refused before, with the same
error (the first failing check names it), and accept exactly what they accepted.

The oracle is the previous ``__post_init__``, kept here verbatim.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxledger import InvalidMessageError, Message, ToolCall
from ctxledger.messages import APPENDABLE_ROLES, ROLES, _check_text


def _previous_checks(message: Any) -> None:
    """The checks of ``Message.__post_init__`` before the fast path (the oracle)."""
    if not isinstance(message.role, str) or message.role not in ROLES:
        raise InvalidMessageError(
            f"unknown role {message.role!r}; expected one of {sorted(APPENDABLE_ROLES)}"
        )
    if not isinstance(message.content, str):
        raise InvalidMessageError(
            f"{message.role} message content must be a string", field="content"
        )
    _check_text(message.content, "content", f"{message.role} message")
    for field in ("tool_call_id", "name"):
        value = getattr(message, field)
        if value is not None:
            if not isinstance(value, str):
                raise InvalidMessageError(
                    f"{message.role} message: {field} must be a string or None", field=field
                )
            _check_text(value, field, f"{message.role} message")
    calls = message.tool_calls
    if isinstance(calls, list):
        calls = tuple(calls)
    if not isinstance(calls, tuple) or not all(isinstance(call, ToolCall) for call in calls):
        raise InvalidMessageError(
            f"{message.role} message: tool_calls must be a tuple of ToolCall, got "
            f"{type(calls).__name__}",
            field="tool_calls",
        )
    seq = message.seq
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int)):
        raise InvalidMessageError(
            f"{message.role} message: seq must be an integer or None", field="seq"
        )
    if calls and message.role != "assistant":
        raise InvalidMessageError(f"only assistant messages carry tool calls, not {message.role}")
    if message.role == "tool":
        if not message.tool_call_id:
            raise InvalidMessageError("tool message needs a tool_call_id")
    elif message.tool_call_id is not None:
        raise InvalidMessageError(f"{message.role} message must not carry a tool_call_id")
    if len({call.id for call in calls}) != len(calls):
        raise InvalidMessageError("tool call ids repeat within one assistant message")


class _Fields(msgspec.Struct):
    """The fields as given, unchecked (what the oracle reads)."""

    role: Any
    content: Any
    tool_calls: Any
    tool_call_id: Any
    name: Any
    seq: Any


_texts = st.sampled_from(["", "x", "ok text", "é ü", "lone \ud800 surrogate", "c1", "c2"])
_calls = st.builds(ToolCall, st.sampled_from(["c1", "c2", "c3"]), st.sampled_from(["a", "b"]))
_fields = st.builds(
    _Fields,
    role=st.sampled_from([*sorted(ROLES), "bogus", 3, None]),
    content=st.one_of(_texts, st.just(7), st.none()),
    tool_calls=st.one_of(
        st.just(()),
        st.lists(_calls, max_size=3).map(tuple),
        st.lists(_calls, max_size=3),
        st.just(("not a call",)),
        st.just(None),
        st.just([]),
    ),
    tool_call_id=st.one_of(st.none(), _texts, st.just(5)),
    name=st.one_of(st.none(), _texts, st.just(b"n")),
    seq=st.one_of(st.none(), st.integers(-3, 10), st.just(True), st.just("4")),
)


def _outcome(check: Any) -> tuple[str, Any]:
    try:
        result = check()
    except InvalidMessageError as exc:
        return ("refused", str(exc))
    return ("built", result)


@given(_fields)
def test_the_checks_refuse_what_they_refused_with_the_same_error(fields: _Fields) -> None:
    given_fields = msgspec.structs.asdict(fields)
    expected = _outcome(lambda: _previous_checks(fields))
    got = _outcome(lambda: Message(**given_fields))
    assert got[0] == expected[0], (given_fields, expected, got)
    if expected[0] == "refused":
        assert got[1] == expected[1]
    else:
        built = got[1]
        assert isinstance(built.tool_calls, tuple)  # a list became a tuple
        assert list(built.tool_calls) == list(fields.tool_calls)


@given(_fields, st.one_of(st.integers(0, 10**9), st.just(True), st.just("3"), st.none()))
def test_with_seq_is_the_checked_copy(fields: _Fields, seq: Any) -> None:
    try:
        message = Message(**msgspec.structs.asdict(fields))
    except InvalidMessageError:
        return
    expected = _outcome(lambda: msgspec.structs.replace(message, seq=seq))
    got = _outcome(lambda: message.with_seq(seq))
    assert got[0] == expected[0]
    if got[0] == "refused":
        assert got[1] == expected[1]
    else:
        assert got[1] == expected[1]
        assert msgspec.structs.asdict(got[1]) == msgspec.structs.asdict(expected[1])
        assert message.seq == fields.seq  # the original is unchanged


def test_with_seq_keeps_everything_but_the_seq() -> None:
    call = ToolCall("c1", "bash", '{"cmd": "ls"}')
    message = Message(role="assistant", content="é", tool_calls=(call,), metadata={"k": [1]})
    copied = message.with_seq(12)
    assert copied.seq == 12 and message.seq is None
    assert copied == Message(
        role="assistant", content="é", tool_calls=(call,), metadata={"k": [1]}, seq=12
    )
    with pytest.raises(InvalidMessageError, match="seq must be an integer"):
        message.with_seq(True)
