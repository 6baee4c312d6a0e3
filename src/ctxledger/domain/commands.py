"""The session's commands that record without compacting: one pure function each.

:func:`~ctxledger.domain.decide` decides the requests that serve views and compact; this module
decides everything else a :class:`~ctxledger.Session` asks for: append, pin, usage reports,
config changes, retraction, clearing and reverting a compaction, plus the reactive retry loop's
next step and a fork's first events (:func:`fork_events`). The history actor that owns a session
and :class:`ctxledger.testing.DomainSession` call these functions (what-if replays these
commands' recorded events as they are), so they record the same events for the same state and
refuse the same commands with the same ``ctxledger`` error.

Each command is a frozen Struct (it may cross an actor's mailbox: data, not a callable);
:func:`execute` dispatches a :data:`Command` to its function. A function takes the session's
folded state and the command, records nothing and returns an :class:`Outcome`: the events to
commit, atomically and in order, and the value to answer the caller with once they are durable.
It raises the caller's error instead when the command is invalid (then nothing is written).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import msgspec

from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config
from ctxledger.domain.calibration import usage_events
from ctxledger.domain.decide import Compact
from ctxledger.domain.revert import revert_checkpoint
from ctxledger.domain.state import SessionState
from ctxledger.domain.system_prompt import system_prompt_messages
from ctxledger.domain.usage import ReportedUsage, parse_usage, usage_from_counts
from ctxledger.domain.validation import check_usage_counts
from ctxledger.domain.withdrawal import clear_event, retraction_events
from ctxledger.errors import ContextOverflowError, InvalidUsageError
from ctxledger.events.types import (
    ConfigChanged,
    Event,
    MessageAppended,
    MessagePinned,
    SessionForked,
    SessionOpened,
    UsageReported,
)
from ctxledger.messages import Message

__all__ = [
    "NO_OUTCOME",
    "AppendMessages",
    "ClearHistory",
    "Command",
    "Configure",
    "Outcome",
    "PinMessage",
    "ReportUsage",
    "RetractLast",
    "RevertCompaction",
    "append_messages",
    "clear_history",
    "configure",
    "execute",
    "fork_events",
    "overflow_message",
    "pin_message",
    "reactive_attempt",
    "report_usage",
    "retract_last",
    "revert_compaction",
    "usage_of",
]

#: The outcome of a reactive attempt that started and has not answered (or failed).
NO_OUTCOME = "no outcome"


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """What a command records and answers.

    Attributes:
        events: Commit these, in order, atomically; then fold them.
        answer: The caller's answer once they are durable (the seqs of an append, the
            retracted message, ...).
    """

    events: tuple[Event, ...] = ()
    answer: object = None


class AppendMessages(msgspec.Struct, frozen=True, kw_only=True):
    """Append ``messages`` as one atomic batch (``Session.append`` / ``append_many``), after
    ``usage``: the model call's usage that answered with them, recorded first (``usage=``)."""

    #: New input: the reactive attempts start over.
    fresh: ClassVar[bool] = True
    messages: tuple[Message, ...]
    usage: ReportedUsage | None = None


class PinMessage(msgspec.Struct, frozen=True, kw_only=True):
    """Keep message ``seq`` verbatim in every later view (``Session.pin``)."""

    fresh: ClassVar[bool] = False
    seq: int


class ReportUsage(msgspec.Struct, frozen=True, kw_only=True):
    """Record the provider's usage for the prompt just sent (``Session.record_usage``)."""

    fresh: ClassVar[bool] = True
    usage: ReportedUsage


class Configure(msgspec.Struct, frozen=True, kw_only=True):
    """State the session's Config and system prompt (``Host.session(id, config=, system=)``).

    Attributes:
        config: The Config from now on; None keeps the one in force.
        system: The session's system prompt; None states none.
    """

    fresh: ClassVar[bool] = False
    config: Config | None = None
    system: str | None = None


class RetractLast(msgspec.Struct, frozen=True, kw_only=True):
    """Withdraw the newest message still shown, appending ``replacement`` in the same batch
    (``Session.retract_last``)."""

    fresh: ClassVar[bool] = True
    replacement: tuple[Message, ...] = ()


class ClearHistory(msgspec.Struct, frozen=True, kw_only=True):
    """Withdraw every message so far (``Session.clear``)."""

    fresh: ClassVar[bool] = True


class RevertCompaction(msgspec.Struct, frozen=True, kw_only=True):
    """Undo the active checkpoint (``Session.revert_compaction``).

    Attributes:
        checkpoint_id: The checkpoint to revert; it must be the active one (None: whichever).
        reason: Why, for the record.
    """

    fresh: ClassVar[bool] = False
    checkpoint_id: str | None = None
    reason: str = ""


#: Every command this module decides (a closed union: :func:`execute` matches it exhaustively).
Command = (
    AppendMessages
    | PinMessage
    | ReportUsage
    | Configure
    | RetractLast
    | ClearHistory
    | RevertCompaction
)


def execute(state: SessionState, command: Command) -> Outcome:
    """Decide ``command`` on ``state``: the events to record and the answer (pure).

    Raises:
        CtxLedgerError: The command is invalid here (see each command's function); nothing is
            to be recorded.
    """
    match command:
        case AppendMessages():
            return append_messages(state, command)
        case PinMessage():
            return pin_message(state, command)
        case ReportUsage():
            return report_usage(state, command)
        case Configure():
            return configure(state, command)
        case RetractLast():
            return retract_last(state, command)
        case ClearHistory():
            return clear_history(state, command)
        case RevertCompaction():
            return revert_compaction(state, command)


def append_messages(state: SessionState, command: AppendMessages) -> Outcome:
    """Append a batch, after its usage report if it has one (the events ``record_usage`` would
    record first); the answer is the list of the seqs the messages get.

    Raises:
        InvalidMessageError: A message cannot be appended here; nothing of the batch is.
    """
    checked = state.check_append(command.messages)
    events: list[Event] = []
    if command.usage is not None:  # measured on the prompt before the batch: state as it is
        events.extend(report_usage(state, ReportUsage(usage=command.usage)).events)
    seqs = []
    for message in checked:  # the hot path: a loop makes no function objects
        events.append(MessageAppended(message=message))
        seqs.append(message.seq)
    return Outcome(events=tuple(events), answer=seqs)


def pin_message(state: SessionState, command: PinMessage) -> Outcome:
    """Pin a message still in the conversation; the answer is None.

    Raises:
        InvalidSeqError: No message has that seq, or it was retracted or cleared (a pin on it
            would keep nothing).
    """
    state.check_pin(command.seq)
    return Outcome(events=(MessagePinned(seq=command.seq),))


def report_usage(state: SessionState, command: ReportUsage) -> Outcome:
    """Record a usage report measured on the view at the newest seq, and the calibration step
    it brings (:func:`~ctxledger.domain.usage_events`); the answer is None."""
    usage = command.usage
    event = UsageReported(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        through_seq=state.last_seq,
        cached_tokens=usage.cached_tokens,
        cache_write_tokens=usage.cache_write_tokens,
    )
    return Outcome(events=tuple(usage_events(state, event)))


def configure(state: SessionState, command: Configure) -> Outcome:
    """Record ``ConfigChanged`` when the Config differs from the one in force, and append the
    system prompt while the conversation is empty; the answer is None.

    Raises:
        SystemPromptMismatchError: The conversation began with another system prompt (or with
            none); nothing is written.
    """
    events: list[Event] = []
    if command.config is not None and command.config != state.config:
        events.append(ConfigChanged(config=command.config))
    if command.system is not None:
        prompt = state.check_append(system_prompt_messages(state, command.system))
        events.extend(MessageAppended(message=message) for message in prompt)
    return Outcome(events=tuple(events))


def retract_last(state: SessionState, command: RetractLast) -> Outcome:
    """Retract the newest shown message (and append the replacement); the answer is the
    retracted message.

    Raises:
        InvalidSeqError: No message is shown, or the newest is covered by the active checkpoint.
        InvalidMessageError: A replacement message does not fit after the retraction.
    """
    retracted = state.message(state.retraction_target())
    events = retraction_events(state, command.replacement)
    return Outcome(events=tuple(events), answer=retracted)


def clear_history(state: SessionState, command: ClearHistory) -> Outcome:
    """Withdraw every message so far; the answer is the last seq withdrawn."""
    event = clear_event(state)
    return Outcome(events=(event,), answer=event.through_seq)


def revert_compaction(state: SessionState, command: RevertCompaction) -> Outcome:
    """Revert the active checkpoint; the answer is the checkpoint active again (or None).

    Raises:
        InvalidCheckpointError: Nothing to revert (see
            :func:`~ctxledger.domain.revert_checkpoint`).
    """
    event = revert_checkpoint(state, command.checkpoint_id, reason=command.reason)
    restored: Checkpoint | None = event.restored
    return Outcome(events=(event,), answer=restored)


def usage_of(
    prompt_tokens: object,
    completion_tokens: object = 0,
    cached_tokens: object = 0,
    cache_write_tokens: object = 0,
) -> ReportUsage:
    """Build the usage command from counts or a provider's usage object (as
    ``Session.record_usage`` takes them; see :func:`~ctxledger.domain.parse_usage`).

    Raises:
        InvalidUsageError: A count is negative, not an integer or too large, both an object and
            counts were given, or the object is no usage report.
    """
    if isinstance(prompt_tokens, int):
        usage = usage_from_counts(
            prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens
        )
        return ReportUsage(usage=check_usage_counts(usage))
    others = (completion_tokens, cached_tokens, cache_write_tokens)
    if any(not isinstance(count, int) or count for count in others):
        raise InvalidUsageError("pass either a usage object or counts, not both")
    try:
        usage = parse_usage(prompt_tokens)
    except InvalidUsageError:
        raise
    except Exception as exc:  # reading the object's fields raised: it is no usage report
        raise InvalidUsageError(f"cannot read the usage object: {exc!r}") from exc
    return ReportUsage(usage=check_usage_counts(usage))


# --- the reactive retry loop ---------------------------------------------------------------------


def reactive_attempt(state: SessionState, tried: Sequence[str]) -> Compact:
    """The next reactive compaction after the provider rejected the prompt as too long.

    Each attempt compacts harder than the one before; the loop (the history actor's, or
    ``DomainSession.reactive_compact``) runs attempts until one compacts.

    Args:
        state: The session.
        tried: The outcome (a compaction reason, or :data:`NO_OUTCOME`) of each attempt made
            since the session's last new input (append, usage report, retraction, clear).

    Returns:
        The request for the next attempt (``attempt`` is ``len(tried)``).

    Raises:
        ContextOverflowError: ``Config.max_reactive_retries`` attempts were made already.
    """
    limit = state.config.max_reactive_retries
    if len(tried) >= limit:
        raise ContextOverflowError(overflow_message(state.session_id, tried, limit))
    return Compact(trigger="prompt_too_long", attempt=len(tried))


def fork_events(
    session_id: str,
    *,
    parent_id: str,
    at_seq: int,
    parent_event_seq: int,
    config: Config,
    created_at: float = 0.0,
) -> list[Event]:
    """Return the first events of fork ``session_id``: ``SessionOpened``, then ``SessionForked``.

    The fork's state is ``parent_id``'s events up to ``parent_event_seq`` followed by these
    (as :func:`ctxledger.replay.loading.fold_session` folds it).

    Args:
        session_id: The new session.
        parent_id: The session whose own events hold the fork point (an ancestor of the session
            forked, when the message ``at_seq`` was inherited from it).
        at_seq: The newest message the fork shares.
        parent_event_seq: ``parent_id``'s last event the fork shares.
        config: The Config in force in ``parent_id`` at ``parent_event_seq``.
        created_at: The creation time recorded (the host's clock; 0.0 in a ``DomainSession``).
    """
    opened = SessionOpened(session_id=session_id, config=config, created_at=created_at)
    forked = SessionForked(parent_id=parent_id, at_seq=at_seq, parent_event_seq=parent_event_seq)
    return [opened, forked]


def overflow_message(session_id: str, tried: Sequence[str], limit: int) -> str:
    """Why a reactive compaction gave up: the attempts since the last append and their outcomes.

    Args:
        session_id: The session.
        tried: The outcome (a compaction reason) of each attempt, oldest first.
        limit: ``Config.max_reactive_retries``.
    """
    head = f"session {session_id!r}: the provider rejected the prompt as too long"
    if not tried:
        return f"{head}, and max_reactive_retries={limit} allows no reactive compaction"
    runs: list[tuple[int, int, str]] = []  # first attempt, last attempt, outcome
    for number, outcome in enumerate(tried, 1):
        if runs and runs[-1][2] == outcome:
            runs[-1] = (runs[-1][0], number, outcome)
        else:
            runs.append((number, number, outcome))
    outcomes = ", ".join(
        f"{first} {outcome}" if first == last else f"{first}-{last} {outcome}"
        for first, last, outcome in runs
    )
    compacted = tried.count("compacted")
    attempts = f"{len(tried)} reactive compaction attempt{'s' if len(tried) != 1 else ''}"
    if not compacted:
        return (
            f"{head} and no compaction could shrink it: {attempts} since the last append "
            f"(outcomes by attempt: {outcomes}), none compacted; shrink what no compaction can "
            "(system prompt, pins, the newest step) or use a larger context window"
        )
    return (
        f"{head} again after {attempts} since the last append (outcomes by attempt: "
        f"{outcomes}; {compacted} compacted), the most max_reactive_retries={limit} allows; "
        "append or record usage to start over"
    )
