"""Message and ToolCall: constructors and the validation that keeps bad input out of history."""

from __future__ import annotations

import msgspec
import pytest

from ctxledger.errors import CtxLedgerError, InvalidMessageError
from ctxledger.messages import Message, ToolCall


def test_unknown_role_is_invalid() -> None:
    """A role outside system/user/assistant/tool is refused."""
    with pytest.raises(InvalidMessageError, match="role"):
        Message(role="robot", content="beep")


def test_invalid_message_error_is_a_value_error() -> None:
    """InvalidMessageError is both a CtxLedgerError and a ValueError."""
    assert issubclass(InvalidMessageError, ValueError)
    assert issubclass(InvalidMessageError, CtxLedgerError)


def test_tool_message_without_tool_call_id_is_invalid() -> None:
    """A tool result must name the call it answers."""
    with pytest.raises(InvalidMessageError, match="tool_call_id"):
        Message(role="tool", content="output")


def test_tool_message_with_empty_tool_call_id_is_invalid() -> None:
    """An empty tool_call_id does not name a call."""
    with pytest.raises(InvalidMessageError):
        Message.tool("output", "")


def test_non_tool_message_with_tool_call_id_is_invalid() -> None:
    """Only tool messages carry a tool_call_id."""
    with pytest.raises(InvalidMessageError):
        Message(role="user", content="hi", tool_call_id="call_1")


def test_arguments_that_are_not_json_are_invalid() -> None:
    """Tool-call arguments must parse as JSON."""
    with pytest.raises(InvalidMessageError, match="JSON"):
        ToolCall("call_1", "bash", "{command: ls}")


@pytest.mark.parametrize("arguments", ["[1, 2]", '"ls"', "42", "null"])
def test_arguments_that_are_not_a_json_object_are_invalid(arguments: str) -> None:
    """Tool-call arguments must be a JSON object, not another JSON value."""
    with pytest.raises(InvalidMessageError, match="object"):
        ToolCall("call_1", "bash", arguments)


def test_arguments_that_are_not_a_string_are_invalid() -> None:
    """Arguments are the JSON text, not a dict."""
    with pytest.raises(InvalidMessageError):
        ToolCall("call_1", "bash", {"command": "ls"})  # type: ignore[arg-type]


def test_tool_call_without_id_is_invalid() -> None:
    """A tool call needs an id for its result to answer."""
    with pytest.raises(InvalidMessageError):
        ToolCall("", "bash", "{}")


def test_tool_call_without_name_is_invalid() -> None:
    """A tool call needs the tool's name."""
    with pytest.raises(InvalidMessageError):
        ToolCall("call_1", "", "{}")


def test_tool_call_arguments_default_to_an_empty_object() -> None:
    """Without arguments, a tool call carries ``{}``."""
    assert ToolCall("call_1", "bash").arguments == "{}"


def test_only_assistant_messages_carry_tool_calls() -> None:
    """A user message with tool calls is refused."""
    with pytest.raises(InvalidMessageError):
        Message(role="user", content="hi", tool_calls=(ToolCall("c", "bash"),))


def test_repeated_tool_call_ids_are_invalid() -> None:
    """Tool call ids are unique within one assistant message."""
    with pytest.raises(InvalidMessageError, match="repeat"):
        Message.assistant("", [ToolCall("c", "a"), ToolCall("c", "b")])


def test_content_must_be_a_string() -> None:
    """Content is text."""
    with pytest.raises(InvalidMessageError):
        Message(role="user", content=["hi"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("message", "role"),
    [
        (Message.system("rules"), "system"),
        (Message.user("question"), "user"),
        (Message.assistant("answer"), "assistant"),
        (Message.tool("output", "call_1", "bash"), "tool"),
    ],
)
def test_constructors_set_the_role(message: Message, role: str) -> None:
    """Each named constructor builds a message of its role."""
    assert message.role == role


def test_tool_constructor_sets_call_id_and_name() -> None:
    """Message.tool fills tool_call_id and name."""
    message = Message.tool("output", "call_1", "bash")
    assert (message.tool_call_id, message.name) == ("call_1", "bash")


def test_assistant_constructor_accepts_a_list_of_calls() -> None:
    """Tool calls given as a list are stored as a tuple."""
    message = Message.assistant("", [ToolCall("c1", "bash")])
    assert message.tool_calls == (ToolCall("c1", "bash"),)


def test_seq_is_none_until_appended() -> None:
    """A new message has no seq."""
    assert Message.user("hi").seq is None


def test_with_seq_returns_a_copy_carrying_the_seq() -> None:
    """with_seq leaves the original untouched."""
    original = Message.user("hi")
    assert (original.with_seq(4).seq, original.seq) == (4, None)


def test_messages_are_frozen() -> None:
    """A message cannot be changed after construction."""
    message = Message.user("hi")
    with pytest.raises(AttributeError):
        message.content = "changed"  # type: ignore[misc]


def test_invalid_message_cannot_be_decoded() -> None:
    """Validation also runs when a message is decoded from msgpack."""
    payload = msgspec.msgpack.encode({"role": "robot", "content": "x"})
    with pytest.raises(msgspec.ValidationError, match="role"):
        msgspec.msgpack.decode(payload, type=Message)


@pytest.mark.parametrize(
    "fields",
    [
        {"role": "assistant", "tool_calls": "abc"},
        {"role": "assistant", "tool_calls": None},
        {"role": "assistant", "tool_calls": ("not a call",)},
        {"role": ["user"]},
        {"role": "user", "seq": "1"},
        {"role": "user", "seq": True},
    ],
)
def test_wrong_types_raise_invalid_message_error(fields: dict[str, object]) -> None:
    """A field of the wrong type is an InvalidMessageError, never a bare TypeError."""
    with pytest.raises(InvalidMessageError):
        Message(**fields)  # type: ignore[arg-type]


def test_assistant_refuses_tool_calls_that_are_not_a_sequence() -> None:
    """Message.assistant with a string of tool calls names the field."""
    with pytest.raises(InvalidMessageError) as caught:
        Message.assistant("x", "abc")  # type: ignore[arg-type]
    assert caught.value.field == "tool_calls"


def test_a_list_of_tool_calls_is_kept_as_a_tuple() -> None:
    """Built by hand with a list, the message still hashes and encodes like one built by
    Message.assistant."""
    call = ToolCall("a", "b")
    by_hand = Message(role="assistant", tool_calls=[call])  # type: ignore[arg-type]
    assert by_hand == Message.assistant("", [call])
    assert hash(by_hand.tool_calls) == hash((call,))
