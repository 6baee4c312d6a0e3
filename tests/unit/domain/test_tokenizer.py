"""The default Tokenizer: chars // 3 over content, tool-call names and arguments."""

from __future__ import annotations

from ctxledger import Message
from ctxledger.domain import CharTokenizer, Tokenizer, message_chars

from .builders import call


def test_count_text_divides_by_three() -> None:
    """Seven characters are two tokens."""
    assert CharTokenizer().count_text("abcdefg") == 2


def test_message_chars_count_content_call_names_and_arguments() -> None:
    """Content, tool-call names and arguments count; roles and ids do not."""
    message = Message.assistant("ab", [call("call_1", "bash", '{"a": 1}')])
    assert message_chars(message) == 2 + 4 + 8


def test_tool_message_name_is_not_counted() -> None:
    """A tool result counts its content only."""
    assert message_chars(Message.tool("xyz", "c1", "a_long_tool_name")) == 3


def test_count_message_divides_message_chars() -> None:
    """count_message is message_chars // 3."""
    assert CharTokenizer().count_message(Message.user("a" * 10)) == 3


def test_count_messages_divides_the_total() -> None:
    """Two 2-char messages are 4 chars, one token: the total is divided, not each part."""
    messages = [Message.user("ab"), Message.user("cd")]
    assert CharTokenizer().count_messages(messages) == 1


def test_char_tokenizer_satisfies_the_protocol() -> None:
    """CharTokenizer is a Tokenizer."""
    assert isinstance(CharTokenizer(), Tokenizer)


def test_chars_per_token_is_configurable() -> None:
    """A different ratio divides by it."""
    assert CharTokenizer(chars_per_token=4).count_text("a" * 9) == 2
