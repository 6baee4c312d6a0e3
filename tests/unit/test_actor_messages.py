"""The actors' messages are data: frozen msgspec Structs, one closed union per actor, each union
matched exhaustively by its actor's ``on_receive`` (issue 28)."""

from __future__ import annotations

import ast
import inspect
import textwrap
import typing
from collections.abc import Callable

import msgspec
import pytest

from ctxledger.actors import messages
from ctxledger.actors.budget import BudgetActor
from ctxledger.actors.compaction import CompactionActor
from ctxledger.actors.history import HistoryActor
from ctxledger.actors.leases import LeaseActor
from ctxledger.actors.projection import ProjectionActor

#: Each actor class and the union of the messages it is told.
UNIONS: dict[type, object] = {
    HistoryActor: messages.HistoryMessage,
    BudgetActor: messages.BudgetMessage,
    ProjectionActor: messages.ProjectionMessage,
    CompactionActor: messages.CompactionMessage,
    LeaseActor: messages.LeaseMessage,
}


def _members(union: object) -> list[type]:
    args = typing.get_args(union)
    return list(args) if args else [typing.cast(type, union)]


def _message_classes() -> list[type]:
    """Every Struct class defined in the messages module, but the bases and the query."""
    found = []
    for value in vars(messages).values():
        if (
            isinstance(value, type)
            and issubclass(value, msgspec.Struct)
            and value.__module__ == messages.__name__
            and value not in (messages.Command, messages.Query)
        ):
            found.append(value)
    return found


@pytest.mark.parametrize("cls", _message_classes(), ids=lambda cls: cls.__name__)
def test_every_message_is_a_frozen_struct_without_callables(cls: type) -> None:
    """A message is a frozen msgspec Struct, and no field of it is typed as a callable."""
    assert issubclass(cls, msgspec.Struct)
    assert cls.__struct_config__.frozen, f"{cls.__name__} is not frozen"
    for klass in cls.__mro__:
        for name, annotation in getattr(klass, "__annotations__", {}).items():
            assert "Callable" not in str(annotation), f"{cls.__name__}.{name}: {annotation}"


def test_every_message_belongs_to_exactly_one_union() -> None:
    """The unions are closed and cover every message the module defines, once."""
    seen: dict[type, list[str]] = {}
    for actor, union in UNIONS.items():
        for member in _members(union):
            seen.setdefault(member, []).append(actor.__name__)
    assert set(seen) == set(_message_classes())
    assert all(len(actors) == 1 for actors in seen.values()), seen


def test_a_frozen_message_refuses_changes() -> None:
    """Assigning a field of a message raises (it crosses threads as a value)."""
    message = messages.Prepare("s")
    with pytest.raises(AttributeError):
        message.session_id = "t"  # type: ignore[misc]


def _cases(method: Callable[..., object]) -> tuple[set[str], ast.match_case]:
    """The class names matched by the ``match`` of ``method`` and its last case."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
    matches = [node for node in ast.walk(tree) if isinstance(node, ast.Match)]
    assert len(matches) == 1, "on_receive has one match statement"
    names: set[str] = set()
    for case in matches[0].cases:
        for node in ast.walk(case.pattern):
            if isinstance(node, ast.MatchClass):
                assert isinstance(node.cls, ast.Name)
                names.add(node.cls.id)
    return names, matches[0].cases[-1]


@pytest.mark.parametrize("actor", list(UNIONS), ids=lambda actor: actor.__name__)
def test_every_union_is_matched_exhaustively(actor: type) -> None:
    """``on_receive`` has a case for each member of the actor's union, none for anything else,
    and ends with ``case _: assert_never(message)`` (mypy proves it unreachable). The history
    actor's match is in ``_handle``, which its ``on_receive`` calls on the actor's thread and a
    caller carrying a command out in its place calls directly."""
    handler = actor._handle if actor is HistoryActor else actor.on_receive
    names, last = _cases(handler)
    assert names == {member.__name__ for member in _members(UNIONS[actor])}
    assert isinstance(last.pattern, ast.MatchAs) and last.pattern.pattern is None
    call = last.body[0]
    assert isinstance(call, ast.Expr) and isinstance(call.value, ast.Call)
    assert isinstance(call.value.func, ast.Name) and call.value.func.id == "assert_never"
