"""Messages that skipped Message's checks (a subclass, ``force_setattr``) and metadata that would
not read back: refused alone, nothing written, the session goes on, and the log reopens and
verifies."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ctxledger import Config, CtxLedgerError, Host, InvalidMessageError, Message, ToolCall
from ctxledger.replay import verify
from ctxledger.testing import DomainSession
from guards import call_in_thread


class Unchecked(Message):
    """A message class whose construction checks nothing."""

    def __post_init__(self) -> None:
        pass


class Tagged(Message):
    """A message class with a field of its own, which no log keeps."""

    tag: str = "kept nowhere"


class UncheckedCall(ToolCall):
    """A tool call class whose construction checks nothing."""

    def __post_init__(self) -> None:
        pass


class SlowCount(str):
    """Text whose length cannot be taken: the budget's count of it fails."""

    def __len__(self) -> int:
        raise RuntimeError("no length")


class Point(msgspec.Struct):
    z: int = 1
    a: int = 2


@dataclasses.dataclass
class Pair:
    z: int = 1
    a: int = 2


def forced(field: str, value: object) -> Message:
    """A user message whose ``field`` was replaced after its checks ran."""
    message = Message.user("forced")
    msgspec.structs.force_setattr(message, field, value)
    return message


def forced_call(field: str, value: object) -> ToolCall:
    """A tool call whose ``field`` was replaced after its checks ran."""
    call = ToolCall("c1", "t")
    msgspec.structs.force_setattr(call, field, value)
    return call


def assistant_calling(call: object) -> Message:
    """An assistant message whose tool calls were replaced by ``(call,)``."""
    message = Message.assistant("calls")
    msgspec.structs.force_setattr(message, "tool_calls", (call,))
    return message


UNCHECKED: dict[str, Callable[[], Message]] = {
    "content None (force_setattr)": lambda: forced("content", None),
    "content bytes (subclass)": lambda: Unchecked(role="user", content=b"x"),  # type: ignore[arg-type]
    "name 5 (subclass)": lambda: Unchecked(role="user", content="x", name=5),  # type: ignore[arg-type]
    "tool_call_id on a user message (subclass)": lambda: Unchecked(
        role="user", content="x", tool_call_id="zz"
    ),
    "role a list (force_setattr)": lambda: forced("role", ["user"]),
    "tool_calls of text (force_setattr)": lambda: assistant_calling("a"),
    "a tool call with id 5 (subclass)": lambda: assistant_calling(UncheckedCall(id=5, name="t")),  # type: ignore[arg-type]
    "a tool call's id forced to 5": lambda: assistant_calling(forced_call("id", 5)),
    "tool call arguments not JSON (subclass)": lambda: assistant_calling(
        UncheckedCall(id="c1", name="t", arguments="{nope")
    ),
}

NOT_READ_BACK: dict[str, object] = {
    "a msgspec Struct": Point(),
    "a dataclass": Pair(),
    "a Message": Message.user("y"),
    "a tuple": (1, 2),
    "a set": {"b", "a"},
}


def reopened_history(path: Path) -> list[Message]:
    """The history of session ``s`` as a new host reads it from the log at ``path``."""
    with Host.open(path) as host:
        history: list[Message] = call_in_thread(host.session("s").history)
        return history


@pytest.mark.parametrize("kind", list(UNCHECKED))
def test_an_unchecked_message_is_refused_alone_and_the_log_reads_back(
    tmp_path: Path, kind: str
) -> None:
    """Refused with InvalidMessageError before anything is written; the session's next calls
    are served, and the log reopens and verifies."""
    path = tmp_path / "db"
    with Host.open(path) as host:
        session = host.session("s")
        session.append(Message.user("before"))
        with pytest.raises(InvalidMessageError, match="message 0 of the batch"):
            call_in_thread(lambda: session.append(UNCHECKED[kind]()))
        assert call_in_thread(lambda: session.append(Message.user("after"))) == 2
        call_in_thread(session.prepare_step)
        assert call_in_thread(host.session("other").history) == []
    assert [m.content for m in reopened_history(path)] == ["before", "after"]
    assert verify(path).ok


def test_a_message_subclass_is_recorded_as_the_message_a_log_reads_back(tmp_path: Path) -> None:
    """A valid subclass instance is appended as a plain Message (its own field dropped), so the
    live history equals the replayed one and verify passes."""
    path = tmp_path / "db"
    with Host.open(path) as host:
        session = host.session("s")
        session.append(Tagged(role="user", content="tagged"))
        live = call_in_thread(session.history)
        call_in_thread(session.prepare_step)
    assert [type(m) for m in live] == [Message]
    assert reopened_history(path) == live
    assert verify(path).ok


def test_a_defect_on_the_way_to_the_journal_fails_only_its_append(tmp_path: Path) -> None:
    """The budget's count of a batch raises (text whose length cannot be taken): that append
    fails with a ctxledger error, nothing is written and the session's next calls are served."""
    path = tmp_path / "db"
    with Host.open(path) as host:
        session = host.session("s")
        session.append(Message.user("before"))
        odd = Message(role="user", content=SlowCount("odd"))
        with pytest.raises(CtxLedgerError):
            call_in_thread(lambda: session.append(odd))
        assert call_in_thread(lambda: session.append(Message.user("after"))) == 2
        assert [m.content for m in call_in_thread(session.history)] == ["before", "after"]
    assert [m.content for m in reopened_history(path)] == ["before", "after"]
    assert verify(path).ok


@pytest.mark.parametrize("kind", list(NOT_READ_BACK))
def test_metadata_that_would_read_back_as_another_value_is_refused(
    tmp_path: Path, kind: str
) -> None:
    """Refused naming the key; plain JSON metadata is kept and reads back equal, and the log
    verifies."""
    path = tmp_path / "db"
    plain = {"tags": ["a", {"b": None}], "n": 2**62, "f": 1.5, "ok": True}
    with Host.open(path) as host:
        session = host.session("s")
        session.append(Message.user("before"))
        bad = Message(role="user", content="x", metadata={"m": NOT_READ_BACK[kind]})
        with pytest.raises(InvalidMessageError, match=r"metadata\['m'\]") as caught:
            call_in_thread(lambda: session.append(bad))
        assert caught.value.field == "metadata"
        session.append(Message(role="user", content="plain", metadata=plain))
        call_in_thread(session.prepare_step)
    assert [m.metadata for m in reopened_history(path)] == [{}, plain]
    assert verify(path).ok


BAD_METADATA: dict[str, dict[Any, Any]] = {
    "an int key": {1: "a"},
    "a nested int key": {"k": {1: 2}},
    "a msgspec Struct": {"m": Point()},
    "a lone surrogate": {"x": "\ud800"},
}


@pytest.mark.parametrize(
    ("command", "kind"),
    [
        *[("append", kind) for kind in BAD_METADATA],
        *[("append_many", kind) for kind in BAD_METADATA],
        ("step", "a msgspec Struct"),  # step checked the others already
    ],
)
def test_domain_session_refuses_the_metadata_the_host_refuses(
    tmp_path: Path, kind: str, command: str
) -> None:
    """DomainSession and a host session both raise InvalidMessageError and record nothing; the
    DomainSession's next view is served."""
    bad = Message(role="user", content="x", metadata=BAD_METADATA[kind])
    domain = DomainSession(Config())
    domain.append(Message.user("before"))
    with Host.open(tmp_path / "db") as host:
        session = host.session("s")
        session.append(Message.user("before"))
        for target in (domain, session):
            recorded = list(domain.events)
            with pytest.raises(InvalidMessageError):
                if command == "append":
                    target.append(bad)
                elif command == "append_many":
                    target.append_many([Message.user("fine"), bad])
                else:
                    target.step([bad])
            assert domain.events == recorded
        assert [m.content for m in call_in_thread(session.history)] == ["before"]
    assert [m.content for m in domain.prepare_step().messages] == ["before"]
