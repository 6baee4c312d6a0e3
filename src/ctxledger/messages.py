"""The value types every layer shares: :class:`Message` and :class:`ToolCall`.

They are frozen msgspec Structs so that they can be embedded in events, hashed into view hashes
and decoded quickly during replay. Validation runs in ``__post_init__`` so that a malformed message
can never be constructed, decoded or appended.
"""

from __future__ import annotations

import threading
from typing import Any

import msgspec

from ctxledger.errors import InvalidMessageError

__all__ = [
    "APPENDABLE_ROLES",
    "ROLES",
    "Message",
    "ToolCall",
    "check_metadata",
    "checked_copy",
    "intact",
]

#: Roles a caller may append to a session's history.
APPENDABLE_ROLES: frozenset[str] = frozenset({"system", "user", "assistant", "tool"})
#: Every role a :class:`Message` may carry; ``summary`` appears only in model views.
ROLES: frozenset[str] = APPENDABLE_ROLES | {"summary"}

_json_decoder = msgspec.json.Decoder()
# Ordered as the event codec encodes (which refuses a map with a key that is not text).
_metadata_encoder = msgspec.msgpack.Encoder(order="deterministic")
_metadata_decoder = msgspec.msgpack.Decoder(dict[str, Any])


class _Checks(threading.local):
    """Per thread: whether :class:`ToolCall` and :class:`Message` validate when built.

    Off only while :meth:`ctxledger.events.codec.Codec.decode_at` decodes a record whose
    checksum matched: what it holds was validated when it was appended, and validating every
    message again would cost a replay ~40 % of its decode time. Everything else (constructors,
    ``msgspec.convert``, upcasts, transcripts) always validates.
    """

    skip = False


#: The switch; see :class:`_Checks`.
CHECKS = _Checks()

_UTF8 = "valid UTF-8"


def _check_seq(seq: object, role: object) -> None:
    """Refuse a seq that is neither an integer nor None (``__post_init__`` and ``with_seq``)."""
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int)):
        raise InvalidMessageError(f"{role} message: seq must be an integer or None", field="seq")


def _check_optional_text(value: object, field: str, role: str) -> None:
    """Check a message's ``tool_call_id`` or ``name`` (set: text with a UTF-8 encoding)."""
    if not isinstance(value, str):
        raise InvalidMessageError(f"{role} message: {field} must be a string or None", field=field)
    _check_text(value, field, f"{role} message")


def _check_text(value: str, field: str, owner: str) -> None:
    """Refuse text that has no UTF-8 encoding (a lone surrogate), naming the field.

    ASCII text (``isascii`` is O(1) in CPython) skips the encode.
    """
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidMessageError(
            f"{owner}: {field} is not valid UTF-8: lone surrogate {value[exc.start]!r} at "
            f"index {exc.start}",
            field=field,
            limit=_UTF8,
        ) from None


class ToolCall(msgspec.Struct, frozen=True, kw_only=False, gc=False):
    """One tool call requested by an assistant message.

    Attributes:
        id: The provider's call id; a tool message answers it through ``tool_call_id``.
        name: The tool's name.
        arguments: The arguments, a JSON object encoded as a string.
    """

    id: str
    name: str
    arguments: str = "{}"

    def __post_init__(self) -> None:
        if CHECKS.skip:
            return
        if not isinstance(self.id, str) or not self.id:
            raise InvalidMessageError("tool call id must be a non-empty string", field="id")
        _check_text(self.id, "id", "tool call")
        if not isinstance(self.name, str) or not self.name:
            raise InvalidMessageError(
                f"tool call {self.id!r}: name must be a non-empty string", field="name"
            )
        _check_text(self.name, "name", f"tool call {self.id!r}")
        if not isinstance(self.arguments, str):
            raise InvalidMessageError(
                f"tool call {self.id!r}: arguments must be a JSON string", field="arguments"
            )
        _check_text(self.arguments, "arguments", f"tool call {self.id!r}")
        try:
            parsed = _json_decoder.decode(self.arguments)
        except msgspec.DecodeError as exc:
            raise InvalidMessageError(
                f"tool call {self.id!r}: arguments are not valid JSON: {exc}"
            ) from None
        if not isinstance(parsed, dict):
            raise InvalidMessageError(f"tool call {self.id!r}: arguments must be a JSON object")


class Message(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One chat message, as appended to a session's history or shown in a model view.

    Attributes:
        role: ``system``, ``user``, ``assistant`` or ``tool`` (``summary`` only in views).
        content: The text.
        tool_calls: Tool calls of an assistant message.
        tool_call_id: For a tool message, the id of the call it answers.
        name: For a tool message, the tool's name; optional elsewhere.
        seq: The per-session sequence number, ``None`` until the message is appended.
        metadata: Free-form JSON-compatible data carried along unchanged.
    """

    role: str
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    seq: int | None = None
    metadata: dict[str, Any] = {}

    def __post_init__(self) -> None:
        if CHECKS.skip:
            return
        role = self.role
        if not isinstance(role, str) or role not in ROLES:
            raise InvalidMessageError(
                f"unknown role {role!r}; expected one of {sorted(APPENDABLE_ROLES)}"
            )
        if not isinstance(self.content, str):
            raise InvalidMessageError(f"{role} message content must be a string", field="content")
        if not self.content.isascii():  # _check_text's own fast path, without the f-string
            _check_text(self.content, "content", f"{role} message")
        tool_call_id, name = self.tool_call_id, self.name
        if tool_call_id is not None:
            _check_optional_text(tool_call_id, "tool_call_id", role)
        if name is not None:
            _check_optional_text(name, "name", role)
        # The checks run in this order (the first failing one names the error); the common
        # case, no tool calls, skips the three about them.
        calls = self.tool_calls
        none = calls.__class__ is tuple and not calls
        if not none:
            calls = self._tool_call_tuple()
        _check_seq(self.seq, role)
        if not none and calls and role != "assistant":
            raise InvalidMessageError(f"only assistant messages carry tool calls, not {role}")
        if role == "tool":
            if not tool_call_id:
                raise InvalidMessageError("tool message needs a tool_call_id")
        elif tool_call_id is not None:
            raise InvalidMessageError(f"{role} message must not carry a tool_call_id")
        if not none and len({call.id for call in calls}) != len(calls):
            raise InvalidMessageError("tool call ids repeat within one assistant message")

    def _tool_call_tuple(self) -> tuple[ToolCall, ...]:
        """``tool_calls`` checked as ToolCalls (a list becomes a tuple, kept hashable)."""
        if isinstance(self.tool_calls, list):  # built by hand with a list
            msgspec.structs.force_setattr(self, "tool_calls", tuple(self.tool_calls))
        calls = self.tool_calls
        if not isinstance(calls, tuple) or not all(isinstance(call, ToolCall) for call in calls):
            raise InvalidMessageError(
                f"{self.role} message: tool_calls must be a tuple of ToolCall, got "
                f"{type(calls).__name__}",
                field="tool_calls",
            )
        return calls

    @classmethod
    def system(cls, content: str) -> Message:
        """Build a system message."""
        return cls(role="system", content=content)

    @classmethod
    def user(cls, content: str) -> Message:
        """Build a user message."""
        return cls(role="user", content=content)

    @classmethod
    def assistant(
        cls, content: str = "", tool_calls: tuple[ToolCall, ...] | list[ToolCall] = ()
    ) -> Message:
        """Build an assistant message, optionally carrying tool calls.

        Raises:
            InvalidMessageError: ``tool_calls`` is not a sequence of :class:`ToolCall`.
        """
        if not isinstance(tool_calls, tuple | list):
            raise InvalidMessageError(
                f"assistant message: tool_calls must be a list or tuple of ToolCall, got "
                f"{type(tool_calls).__name__}",
                field="tool_calls",
            )
        return cls(role="assistant", content=content, tool_calls=tuple(tool_calls))

    @classmethod
    def tool(cls, content: str, tool_call_id: str, name: str | None = None) -> Message:
        """Build a tool result answering the call ``tool_call_id``."""
        return cls(role="tool", content=content, tool_call_id=tool_call_id, name=name)

    def with_seq(self, seq: int | None) -> Message:
        """Return a copy of this message carrying ``seq``.

        Raises:
            InvalidMessageError: ``seq`` is not an integer or None.
        """
        _check_seq(seq, self.role)
        # Everything else was checked when this message was built: a copy is not checked again.
        copied: Message = self.__copy__()  # type: ignore[attr-defined]  # copy.copy, one call fewer
        msgspec.structs.force_setattr(copied, "seq", seq)
        return copied


def intact(message: Message) -> bool:
    """Whether ``message`` holds what :class:`Message` would have checked, at a glance.

    True for a Message built by its constructor (or decoded). A subclass (its
    ``__post_init__`` may skip the checks, and a log keeps no field of its own) or a field
    replaced with ``msgspec.structs.force_setattr`` may hold anything; see
    :func:`checked_copy`. Types only: an append of an ordinary message pays ~100 ns for it.
    """
    if type(message) is not Message:
        return False
    calls, name, call_id = message.tool_calls, message.name, message.tool_call_id
    return (
        type(message.role) is str
        and type(message.content) is str
        and type(calls) is tuple
        and (name is None or type(name) is str)
        and (call_id is None or type(call_id) is str)
        and (not calls or all(_intact_call(call) for call in calls))
    )


def _intact_call(call: object) -> bool:
    """:func:`intact` for one tool call."""
    return (
        type(call) is ToolCall
        and type(call.id) is str
        and type(call.name) is str
        and type(call.arguments) is str
    )


def checked_copy(message: Message) -> Message:
    """``message`` rebuilt as a :class:`Message` of ToolCalls, through their constructors.

    For a message that is not :func:`intact`: the constructors run every check of the fields,
    and what they return is what a log reads back.

    Raises:
        InvalidMessageError: A field breaks a rule of :class:`Message` or :class:`ToolCall`.
    """
    calls = message.tool_calls
    if isinstance(calls, tuple | list):
        calls = tuple(
            ToolCall(call.id, call.name, call.arguments) if isinstance(call, ToolCall) else call
            for call in calls
        )
    return Message(
        role=message.role,
        content=message.content,
        tool_calls=calls,
        tool_call_id=message.tool_call_id,
        name=message.name,
        seq=message.seq,
        metadata=message.metadata,
    )


#: The values metadata may hold: what a log reads back as equal to them.
_PLAIN = "plain JSON values: dicts with str keys, lists, str, int (64 bits), float, bool, None"


def check_metadata(metadata: object, where: str) -> None:
    """Refuse message metadata that would not read back from a log as it was given.

    Metadata is a mutable dict of anything, so it is checked where it is about to be recorded
    (by :func:`~ctxledger.domain.validation.validate_append` and by every event log): encoded
    as the event codec encodes (sorted keys, which refuses a nested map with a key that is not
    text) and decoded again as the field's type. It must decode to a value equal to the one
    given: a map that decodes as no ``dict[str, Any]`` (an int key) would fail every replay,
    and a value that decodes as another (a Struct or a dataclass as a dict, a tuple or a set as
    a list) would give the session's history, and its view hashes, other values after a
    restart than before it.

    Args:
        metadata: The metadata.
        where: Names the message in the error (``"session 'a', event 0 of the batch"``).

    Raises:
        InvalidMessageError: It cannot be encoded, or would read back as another value.
    """
    try:
        decoded = _metadata_decoder.decode(_metadata_encoder.encode(metadata))
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:  # incl. msgspec's
        raise InvalidMessageError(
            f"{where}: the message metadata cannot be encoded: {exc}",
            field="metadata",
            limit="encodable as msgpack (JSON-like values, valid UTF-8 text)",
        ) from exc
    if not _same(metadata, decoded):
        raise InvalidMessageError(
            f"{where}: the message metadata would not read back as given: "
            f"{_changed(metadata, decoded, 'metadata')}; use {_PLAIN}",
            field="metadata",
            limit=_PLAIN,
        )


def _same(given: object, decoded: object) -> bool:
    """Whether ``decoded`` equals ``given`` (a value whose ``==`` raises is not the same)."""
    try:
        return bool(given == decoded)
    except Exception:  # a user's __eq__: whatever it raises, the value is not plain
        return False


def _changed(given: object, decoded: object, path: str) -> str:
    """Where ``decoded`` first differs from ``given`` and how (for the error of
    :func:`check_metadata`; ``path`` names ``given``)."""
    if isinstance(given, dict) and isinstance(decoded, dict):
        for key, value in given.items():
            if not _same(value, decoded.get(key)):
                return _changed(value, decoded.get(key), f"{path}[{key!r}]")
    elif isinstance(given, list) and isinstance(decoded, list) and len(given) == len(decoded):
        for index, (value, back) in enumerate(zip(given, decoded, strict=True)):
            if not _same(value, back):
                return _changed(value, back, f"{path}[{index}]")
    if type(given) is type(decoded):
        return f"{path} ({type(given).__name__} {given!r:.60}) would read back unequal to itself"
    return f"{path} (a {type(given).__name__}) would read back as a {type(decoded).__name__}"
