"""The pure command functions of ``ctxledger.domain.commands`` (issue 28)."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import msgspec
import pytest

from ctxledger import Config, Message, Session
from ctxledger.actors import messages as runtime_messages
from ctxledger.domain.commands import (
    NO_OUTCOME,
    AppendMessages,
    ClearHistory,
    Configure,
    PinMessage,
    ReportUsage,
    RetractLast,
    RevertCompaction,
    execute,
    reactive_attempt,
    usage_of,
)
from ctxledger.domain.usage import ReportedUsage
from ctxledger.errors import (
    ContextOverflowError,
    InvalidCheckpointError,
    InvalidSeqError,
    InvalidUsageError,
    SystemPromptMismatchError,
)
from ctxledger.events import ConfigChanged, HistoryCleared, MessageAppended, MessagePinned
from ctxledger.testing import DomainSession

from .builders import session

COMMANDS = [
    AppendMessages(messages=(Message.user("hi"),)),
    PinMessage(seq=1),
    ReportUsage(usage=ReportedUsage(prompt_tokens=10)),
    Configure(config=Config(context_window=9_000)),
    RetractLast(),
    ClearHistory(),
    RevertCompaction(reason="why"),
]


def test_execute_is_pure() -> None:
    """execute returns events and leaves the state as it was."""
    s = session(Message.user("one"), Message.assistant("two"))
    before = s.state.to_snapshot()
    for command in COMMANDS[:-1]:  # nothing to revert here
        execute(s.state, command)
    assert s.state.to_snapshot() == before


def test_append_answers_seqs() -> None:
    """An append's outcome is its MessageAppended events and the seqs they get."""
    s = session(Message.user("one"))
    outcome = execute(s.state, AppendMessages(messages=(Message.assistant("a"), Message.user("b"))))
    assert outcome.answer == [2, 3]
    assert [type(event) for event in outcome.events] == [MessageAppended, MessageAppended]


def test_pin_of_a_withdrawn_message_is_refused() -> None:
    """A retracted or cleared message cannot be pinned; a live one can."""
    s = session(Message.user("one"), Message.assistant("two"))
    assert execute(s.state, PinMessage(seq=2)).events == (MessagePinned(seq=2),)
    s.retract_last()
    with pytest.raises(InvalidSeqError, match="withdrawn"):
        execute(s.state, PinMessage(seq=2))
    with pytest.raises(InvalidSeqError, match="no message with seq 3"):
        execute(s.state, PinMessage(seq=3))


def test_configure_records_only_a_change_and_checks_the_system_prompt() -> None:
    """The same Config records nothing; another records ConfigChanged; a different system
    prompt is refused."""
    s = session(Message.system("rules"), Message.user("go"))
    assert execute(s.state, Configure(config=s.state.config)).events == ()
    other = s.state.config.replace(context_window=9_000)
    assert execute(s.state, Configure(config=other)).events == (ConfigChanged(config=other),)
    assert execute(s.state, Configure(system="rules")).events == ()
    with pytest.raises(SystemPromptMismatchError):
        execute(s.state, Configure(system="other rules"))


def test_clear_and_revert_answers() -> None:
    """Clear answers the last seq withdrawn; revert without a checkpoint is refused."""
    s = session(Message.user("one"), Message.assistant("two"))
    outcome = execute(s.state, ClearHistory())
    assert (outcome.events, outcome.answer) == ((HistoryCleared(through_seq=2),), 2)
    with pytest.raises(InvalidCheckpointError):
        execute(s.state, RevertCompaction())


def test_reactive_attempts_are_numbered_and_bounded() -> None:
    """The next attempt is numbered by the attempts tried; past the limit it is an overflow."""
    s = session(Message.user("one"), max_reactive_retries=2)
    assert reactive_attempt(s.state, []).attempt == 0
    assert reactive_attempt(s.state, ["not_needed"]).attempt == 1
    with pytest.raises(ContextOverflowError, match="2 reactive compaction attempts"):
        reactive_attempt(s.state, ["not_needed", NO_OUTCOME])


def test_usage_of_takes_counts_or_an_object_not_both() -> None:
    """Counts and a provider's usage object both work; mixing them is refused."""
    assert usage_of(10, 2).usage == ReportedUsage(prompt_tokens=10, completion_tokens=2)
    anthropic = {"input_tokens": 5, "output_tokens": 1, "cache_read_input_tokens": 3}
    assert usage_of(anthropic).usage.prompt_tokens == 8
    with pytest.raises(InvalidUsageError):
        usage_of(anthropic, 3)
    with pytest.raises(InvalidUsageError):
        usage_of(-1)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: type(command).__name__)
def test_commands_are_frozen_data(command: msgspec.Struct) -> None:
    """A command is a frozen Struct that encodes as data (no callable can cross a mailbox)."""
    with pytest.raises(AttributeError):
        command.fresh = True  # type: ignore[misc]
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(command), type=type(command)) == command


def test_no_runtime_message_carries_a_callable() -> None:
    """The history actor's commands carry data only (the closures Read.fn and Record.build
    are gone)."""
    checked = 0
    for name in runtime_messages.__all__:
        kind = getattr(runtime_messages, name)
        is_struct = isinstance(kind, type) and issubclass(kind, msgspec.Struct)
        if not (is_struct or dataclasses.is_dataclass(kind)):
            continue
        hints = typing.get_type_hints(kind)
        for field, hint in hints.items():
            assert "Callable" not in str(hint), (name, field, hint)
        checked += 1
    assert checked >= 20, f"only {checked} message classes found"


#: Session methods a DomainSession leaves out: they reach beyond one session's decisions (a
#: fork is a second session in the log; recall and call_tool search an index file) or are the
#: async twins of the commands it has.
NOT_IN_THE_KIT = {"fork", "recall", "call_tool"}


def test_domain_session_has_every_session_command_with_its_signature() -> None:
    """DomainSession has each public Session method (but the few above) with the same
    parameters, defaults and annotations."""
    names = [  # every class Session is made of: its reads and async twins are private bases
        name
        for name in dir(Session)
        if not name.startswith("_")
        and name not in NOT_IN_THE_KIT
        and not inspect.iscoroutinefunction(inspect.getattr_static(Session, name))
    ]
    assert {"append", "pin", "retract_last", "reactive_compact", "config"} <= set(names)
    for name in names:
        ours, theirs = getattr(DomainSession, name, None), getattr(Session, name)
        assert ours is not None, f"DomainSession lacks {name}"
        if isinstance(theirs, property):
            assert isinstance(ours, property), name
            continue
        assert inspect.signature(ours) == inspect.signature(theirs), name
