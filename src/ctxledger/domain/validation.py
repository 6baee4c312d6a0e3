"""Validation of appends (what a batch of messages must satisfy to join a session's history) and
of usage reports (what a provider's figures must satisfy to be recorded)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from ctxledger.domain.usage import ReportedUsage
from ctxledger.errors import InvalidMessageError, InvalidUsageError
from ctxledger.messages import (
    APPENDABLE_ROLES,
    Message,
    ToolCall,
    check_metadata,
    checked_copy,
    intact,
)

__all__ = ["MAX_USAGE_TOKENS", "check_usage_counts", "validate_append"]

#: The largest token count one usage report may carry (a trillion tokens: no model call comes
#: near it). Far below 64 bits, so that the counts, and a session's running totals of them, are
#: always stored and read back exactly.
MAX_USAGE_TOKENS = 10**12


def check_usage_counts(usage: ReportedUsage) -> ReportedUsage:
    """Return ``usage`` if every count is at most :data:`MAX_USAGE_TOKENS`.

    Raises:
        InvalidUsageError: A count is larger (nothing is recorded).
    """
    for name in ("prompt_tokens", "completion_tokens", "cached_tokens", "cache_write_tokens"):
        value = getattr(usage, name)
        if value > MAX_USAGE_TOKENS:
            raise InvalidUsageError(
                f"{name}={value} is more than any model call uses (at most {MAX_USAGE_TOKENS:,})"
            )
    return usage


def validate_append(
    messages: Iterable[Message],
    *,
    last_seq: int,
    open_calls: Mapping[str, ToolCall],
    used_ids: Collection[str],
    answered_ids: Collection[str],
) -> list[Message]:
    """Check a batch against a session's tool-call bookkeeping; return it with seqs assigned.

    Rules: every field as :class:`Message` checks it (a message its constructor did not check
    is rebuilt through it, see :func:`~ctxledger.messages.intact`); only appendable roles (never
    ``summary``); metadata is a dict that reads back from a log as given
    (:func:`~ctxledger.messages.check_metadata`); every tool result answers a call that is
    open (in the session or earlier in the batch) and carries that call's tool name if any;
    tool-call ids are unique across the session; nothing but results may follow unanswered calls
    (providers need a call's results right after it; the last step may stay pending). A preset
    ``seq`` is replaced.

    Args:
        messages: The batch, oldest first.
        last_seq: The session's newest seq.
        open_calls: Calls not answered yet, by id.
        used_ids: Every call id the session has used.
        answered_ids: Every call id that has a result.

    Raises:
        InvalidMessageError: A message cannot be appended; the error names it and why.
    """
    pending = dict(open_calls)
    new_ids: set[str] = set()
    seq = last_seq
    checked: list[Message] = []
    for index, message in enumerate(messages):
        where = f"message {index} of the batch"
        if not isinstance(message, Message):
            raise InvalidMessageError(f"{where} is a {type(message).__name__}, not a Message")
        if not intact(message):  # the log would store what no replay reads back
            message = _checked_copy(message, where)
        if message.role not in APPENDABLE_ROLES:
            raise InvalidMessageError(f"{where}: role {message.role!r} cannot be appended")
        if not isinstance(message.metadata, dict):  # None or [] would be stored, then unreadable
            raise InvalidMessageError(
                f"{where}: metadata must be a dict, got {type(message.metadata).__name__}",
                field="metadata",
                limit="a dict with string keys",
            )
        if message.metadata:
            check_metadata(message.metadata, where)
        if message.role == "tool":
            call_id = message.tool_call_id or ""
            call = pending.pop(call_id, None)
            if call is None:
                state = "is already answered" if call_id in answered_ids else "was never made"
                raise InvalidMessageError(
                    f"{where}: tool result for call {call_id!r}, which {state}"
                )
            if message.name is not None and message.name != call.name:
                raise InvalidMessageError(
                    f"{where}: tool result named {message.name!r} answers call {call_id!r} "
                    f"of tool {call.name!r}"
                )
        else:
            if pending:
                raise InvalidMessageError(
                    f"{where}: a {message.role} message cannot follow unanswered tool calls "
                    f"{sorted(pending)}; append their results first"
                )
            for call in message.tool_calls:
                if call.id in used_ids or call.id in new_ids:
                    raise InvalidMessageError(
                        f"{where}: tool call id {call.id!r} is already used in this session"
                    )
                new_ids.add(call.id)
                pending[call.id] = call
        seq += 1
        checked.append(message if message.seq == seq else message.with_seq(seq))
    return checked


def _checked_copy(message: Message, where: str) -> Message:
    """:func:`~ctxledger.messages.checked_copy`, its error naming the batch's message."""
    try:
        return checked_copy(message)
    except InvalidMessageError as exc:
        raise InvalidMessageError(f"{where}: {exc}", field=exc.field, limit=exc.limit) from None
