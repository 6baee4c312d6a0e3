"""The event vocabulary: one tagged union of frozen, keyword-only msgspec Structs.

Schema rules (see DESIGN §3): tags are explicit and never change; new fields get defaults; a field
is never reordered or retyped; a breaking change is a new tag plus an upcaster in
:mod:`ctxledger.events.upcasters`. Message seqs (dense per session, counting only messages) are
distinct from event seqs (the position of an event in its session's log).
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import msgspec

from ctxledger.checkpoints import Checkpoint, Remask
from ctxledger.config import Config
from ctxledger.messages import Message

__all__ = [
    "EVENT_TYPES",
    "BudgetExhausted",
    "CheckpointCreated",
    "CheckpointReverted",
    "CompactionFailed",
    "CompactionStarted",
    "ConfigChanged",
    "Event",
    "EventBase",
    "HistoryCleared",
    "MessageAppended",
    "MessagePinned",
    "MessageRetracted",
    "RecordLost",
    "SessionForked",
    "SessionOpened",
    "SummaryPrepared",
    "TokenizerCalibrated",
    "ToolResultSynthesized",
    "TranscriptExported",
    "UsageReported",
    "ViewServed",
    "carried_message",
]

CompactionReason = Literal["threshold_exceeded", "prompt_too_long", "manual"]


class EventBase(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", gc=False):
    """Base of every event; subclasses set an explicit, stable ``tag``."""


class SessionOpened(EventBase, frozen=True, kw_only=True, tag="session_opened"):
    """A session was created with ``config``; always the session's first event."""

    session_id: str
    config: Config
    created_at: float = 0.0


class MessageAppended(EventBase, frozen=True, kw_only=True, tag="message_appended"):
    """``message`` (carrying its seq) was appended to history."""

    message: Message


class UsageReported(EventBase, frozen=True, kw_only=True, tag="usage_reported"):
    """The provider measured the prompt built when ``through_seq`` was the newest message.

    Attributes:
        prompt_tokens: Every input token of the call, cached or not (OpenAI's
            ``prompt_tokens``; Anthropic's ``input_tokens + cache_read_input_tokens +
            cache_creation_input_tokens``).
        completion_tokens: Output tokens of the call.
        through_seq: The newest message seq when the prompt was built.
        cached_tokens: Of ``prompt_tokens``, those read from the provider's prompt cache
            (OpenAI's ``prompt_tokens_details.cached_tokens``, Anthropic's
            ``cache_read_input_tokens``); 0 when not reported, and in logs written before the
            field existed.
        cache_write_tokens: Of ``prompt_tokens``, those written to the prompt cache
            (Anthropic's ``cache_creation_input_tokens``); 0 when not reported.
    """

    prompt_tokens: int
    completion_tokens: int = 0
    through_seq: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class CompactionStarted(EventBase, frozen=True, kw_only=True, tag="compaction_started"):
    """A compaction was planned and handed to the summariser.

    ``background`` marks a summary prepared ahead of need (DESIGN §2 "Background compaction"):
    it ends with :class:`SummaryPrepared` (or a background :class:`CompactionFailed`) and changes
    no view until it is activated.
    """

    compaction_id: str
    reason: CompactionReason
    retain_from_seq: int
    covers_through_seq: int
    estimated_tokens: int = 0
    focus: str | None = None
    attempt: int = 0
    background: bool = False


class CheckpointCreated(EventBase, frozen=True, kw_only=True, tag="checkpoint_created"):
    """A compaction finished; ``checkpoint`` is now the active one.

    ``prepared`` marks a checkpoint made from a summary prepared in the background
    (:class:`SummaryPrepared` with the same ``compaction_id``): no summariser ran for it.
    """

    compaction_id: str
    checkpoint: Checkpoint
    prepared: bool = False


class CheckpointReverted(EventBase, frozen=True, kw_only=True, tag="checkpoint_reverted"):
    """The active checkpoint ``checkpoint_id`` was undone; ``restored`` is active again.

    ``restored`` is the checkpoint that was active when ``checkpoint_id`` was made (its
    ``previous_checkpoint_id``), carried whole so that the fold needs no lookup; ``None`` when
    ``checkpoint_id`` was the first (the view is the full history again; written since the two
    marks, older records always carry one). The next compaction extends ``restored``; history
    and every recorded checkpoint stay as they were.
    """

    checkpoint_id: str
    restored: Checkpoint | None
    reason: str = ""


class CompactionFailed(EventBase, frozen=True, kw_only=True, tag="compaction_failed"):
    """A compaction ended without a checkpoint; the previous one stays active.

    A failed ``background`` compaction is retried no sooner than after a backoff in appended
    messages; one ``interrupted`` by a restart is started again at once.
    """

    compaction_id: str
    reason: str = "summary_unavailable"
    detail: str = ""
    background: bool = False


class SummaryPrepared(EventBase, frozen=True, kw_only=True, tag="summary_prepared"):
    """A background compaction's summary is ready; it changes no view until it is activated.

    Attributes:
        compaction_id: The background compaction (its :class:`CompactionStarted`).
        retain_from_seq: The planned cut: the first seq kept raw.
        covers_through_seq: The last seq the summary covers.
        summary: The summary, cut to the planned room.
        input_hash: Content address of the summariser's input (as on a checkpoint).
        previous_checkpoint_id: The checkpoint the summary extends (it was active when the
            compaction started); a prepared summary is only valid while it stays active.
        max_chars: The room reserved for the summary when the cut was planned.
        fact_chars: The room reserved for the checkpoint's fact block (0: none).
        summarizer: Who wrote the summary (``describe_summarizer``); "" when unknown.
        summary_seconds: Wall time of the summariser call(s).
        input_chars: Characters the summariser was given.
        summarizer_calls: Calls made (one per chunk of the input).
    """

    compaction_id: str
    retain_from_seq: int
    covers_through_seq: int
    summary: str
    input_hash: str = ""
    previous_checkpoint_id: str | None = None
    max_chars: int = 0
    fact_chars: int = 0
    summarizer: str = ""
    summary_seconds: float = 0.0
    input_chars: int = 0
    summarizer_calls: int = 0


class ToolResultSynthesized(EventBase, frozen=True, kw_only=True, tag="tool_result_synthesized"):
    """Recovery answered a tool call that was never answered; ``message`` carries its seq."""

    message: Message
    reason: str = "interrupted"


class ViewServed(EventBase, frozen=True, kw_only=True, tag="view_served"):
    """A model view was served; replay must rebuild a view with the same ``view_hash``.

    ``view_chars`` are the characters the default tokenizer counts in the view (0 in logs
    written before the field existed): a usage report for this view pairs them with the tokens
    the provider counted (see :class:`TokenizerCalibrated`).

    ``remask`` is set when the view masks old tool results that the previous view of the same
    checkpoint showed (:class:`~ctxledger.checkpoints.Remask`: how many, where the cached prefix
    ends, the tokens saved); None otherwise, and in logs written before the field existed.
    """

    through_seq: int
    estimated_tokens: int
    view_hash: str
    checkpoint_id: str | None = None
    message_count: int = 0
    view_chars: int = 0
    remask: Remask | None = None


class BudgetExhausted(EventBase, frozen=True, kw_only=True, tag="budget_exhausted"):
    """The session's cumulative tokens reached ``cap`` (``Config.max_total_tokens``).

    Recorded once per cap: ``prepare_step`` raises :class:`ctxledger.BudgetExceededError` from
    then on, until a Config with a higher cap (or none) is recorded.
    """

    cap: int
    total: int


class TokenizerCalibrated(EventBase, frozen=True, kw_only=True, tag="tokenizer_calibrated"):
    """A usage report was paired with the view it measured: the session's ratio was updated.

    Each pair is one sample (the view's characters, the tokens the provider counted). The
    running statistic is a least-squares line through the samples (tokens against characters),
    so that a fixed part of every prompt (tool schemas, framing) does not read as a denser
    text. The fold takes the figures as recorded, so replay reproduces every later estimate
    exactly.

    Attributes:
        samples: Reports paired so far.
        mean_chars: Running mean of the views' characters.
        mean_tokens: Running mean of the reported prompt tokens.
        m2_chars: Running sum of squared deviations of the characters (Welford).
        m2_tokens: Running sum of squared deviations of the tokens.
        co_moment: Running sum of the products of both deviations.
        chars_per_token: The ratio the default tokenizer uses once enough reports were paired:
            the reciprocal of the slope, rounded down to thousandths, within [1, 3]; 0.0 while
            the samples do not determine it (too few, or views of nearly one size).
    """

    samples: int
    mean_chars: float
    mean_tokens: float
    m2_chars: float
    m2_tokens: float
    co_moment: float
    chars_per_token: float


class SessionForked(EventBase, frozen=True, kw_only=True, tag="session_forked"):
    """This session was forked from ``parent_id``; it shares the parent's first events.

    The fork's state is the parent's events ``1..parent_event_seq`` followed by its own.
    """

    parent_id: str
    at_seq: int
    parent_event_seq: int


class TranscriptExported(EventBase, frozen=True, kw_only=True, tag="transcript_exported"):
    """The session's transcript was exported to ``path``."""

    path: str
    messages: int
    checkpoints: int = 0
    sha256: str = ""


class ConfigChanged(EventBase, frozen=True, kw_only=True, tag="config_changed"):
    """The session's Config changed; ``config`` applies from this event on."""

    config: Config


class MessagePinned(EventBase, frozen=True, kw_only=True, tag="message_pinned"):
    """Message ``seq`` is shown verbatim in every later view."""

    seq: int


class MessageRetracted(EventBase, frozen=True, kw_only=True, tag="message_retracted"):
    """Message ``seq`` was withdrawn from the conversation: no later view shows it.

    History keeps the message; only views change. Only the newest message still shown can be
    retracted, and never one the checkpoint in force covers (its summary already tells of it).
    A retracted tool result re-opens its call; a retracted assistant message withdraws its calls
    (their ids may be used again).

    ``mask_count``: under ``Config.min_compaction_gain_tokens``, the masking boundary once the
    result is withdrawn, when its append had moved it (what it was before); None leaves it as it
    is (and in logs written before the field existed, which were served that way).
    """

    seq: int
    mask_count: int | None = None


class HistoryCleared(EventBase, frozen=True, kw_only=True, tag="history_cleared"):
    """Every message up to ``through_seq`` was withdrawn: later views start after it.

    History keeps the messages and checkpoints; views after the clear show neither them, nor
    their summary, pins or head system messages. Tool calls still open are closed (never
    answered) and their ids may be used again.
    """

    through_seq: int


class RecordLost(EventBase, frozen=True, kw_only=True, tag="record_lost"):
    """Salvage put this in place of a record of a damaged log that could not be used.

    It stands at the lost record's own event seq, so the session's event seqs stay dense and
    every intact record after it keeps its place (``ctxledger salvage``; the live runtime never
    records it). No history is rewritten: the record is lost, and this says so.

    Attributes:
        message: A stand-in for a lost message, carrying that message's seq, so message seqs stay
            dense; its content says what was lost and its metadata is ``{"lost": reason}``. Its
            role keeps every view valid for a provider: a lost tool result answers its call, a
            lost assistant message makes the calls that later results answer. The fold appends
            it like any message. None when the record was not a message (or nothing shows that
            it was one); the fold then ignores the event.
        reason: ``damaged`` (the record fails its checksum or does not decode) or
            ``unfoldable`` (it reads, but cannot be folded on top of what an earlier loss left).
        detail: The error, for people.
        lost_type: The tag of the lost record when it is known (an unfoldable record reads),
            else "".
    """

    message: Message | None = None
    reason: str = "damaged"
    detail: str = ""
    lost_type: str = ""


Event: TypeAlias = (
    SessionOpened
    | MessageAppended
    | UsageReported
    | CompactionStarted
    | CheckpointCreated
    | CompactionFailed
    | ToolResultSynthesized
    | ViewServed
    | SessionForked
    | TranscriptExported
    | ConfigChanged
    | MessagePinned
    | SummaryPrepared
    | CheckpointReverted
    | MessageRetracted
    | HistoryCleared
    | BudgetExhausted
    | TokenizerCalibrated
    | RecordLost
)

EVENT_TYPES: tuple[type[EventBase], ...] = (
    SessionOpened,
    MessageAppended,
    UsageReported,
    CompactionStarted,
    CheckpointCreated,
    CompactionFailed,
    ToolResultSynthesized,
    ViewServed,
    SessionForked,
    TranscriptExported,
    ConfigChanged,
    MessagePinned,
    SummaryPrepared,
    CheckpointReverted,
    MessageRetracted,
    HistoryCleared,
    BudgetExhausted,
    TokenizerCalibrated,
    RecordLost,
)


def carried_message(event: Event) -> Message | None:
    """The message an event adds to history, if any.

    ``MessageAppended`` and ``ToolResultSynthesized`` carry one; so does a ``RecordLost`` that
    stands in for a lost message.
    """
    if isinstance(event, MessageAppended | ToolResultSynthesized | RecordLost):
        return event.message
    return None
