"""A session's steps as its log records them: the data behind the token plot and the demo table.

Each ``ViewServed`` event is one step (one LLM call). For each step the timeline gives the size
of the whole history (what sending everything would cost), the size of the view actually served,
the threshold in force and how many old tool results micro masking hid; each checkpoint is a
compaction of the layer its reason names. Everything is derived from the log alone, read-only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ctxledger.config import Config
from ctxledger.domain import (
    CharTokenizer,
    SessionState,
    Tokenizer,
    assemble,
    mask_text,
    render_policy,
    threshold_for,
)
from ctxledger.events import (
    CheckpointCreated,
    CompactionFailed,
    SessionForked,
    SessionOpened,
    ToolResultSynthesized,
    ViewServed,
)
from ctxledger.messages import Message
from ctxledger.replay.loading import fold_session
from ctxledger.storage import EventLog, RecordedEvent
from ctxledger.tooling.format import human_seconds
from ctxledger.tooling.plotting import TokenSeries

__all__ = [
    "LAYER_OF_REASON",
    "Compaction",
    "Step",
    "Timeline",
    "session_timeline",
    "split_steps",
    "walk_session",
]

#: The compaction layer of each checkpoint reason (micro masking makes no checkpoint).
LAYER_OF_REASON = {"threshold_exceeded": "auto", "manual": "manual", "prompt_too_long": "reactive"}


@dataclass(frozen=True, slots=True)
class Step:
    """One served view.

    Attributes:
        index: 1-based position among the session's served views.
        through_seq: The newest message seq when the view was served.
        history_tokens: Tokens of the whole history at that point.
        view_tokens: Tokens of the view's messages (what was sent).
        estimated_tokens: The budget estimate recorded with the view (it also counts the
            provider's last usage figure, see DESIGN §2).
        threshold: The compaction threshold in force, in tokens.
        masked: Tool results that micro masking hid in this view.
        masking_advanced: Whether this view masked results the previous view still showed.
    """

    index: int
    through_seq: int
    history_tokens: int
    view_tokens: int
    estimated_tokens: int
    threshold: int
    masked: int
    masking_advanced: bool


@dataclass(frozen=True, slots=True)
class Compaction:
    """One checkpoint, placed at the step whose view first showed it.

    Attributes:
        step: Index of the first step served after the checkpoint (one past the last step when
            no view followed it).
        layer: ``auto``, ``manual`` or ``reactive``.
        checkpoint_id: The checkpoint's id.
        tokens_before: Estimated view tokens before the compaction.
        tokens_after: Estimated view tokens after it.
        summarizer: Who wrote the summary ("" when the checkpoint does not say).
        summary_seconds: The summariser's wall time (0.0 when not recorded).
        input_chars: Characters the summariser was given (0 when not recorded).
        output_chars: Characters of the summary.
        fact_chars: Characters of the fact block after the summary.
    """

    step: int
    layer: str
    checkpoint_id: str
    tokens_before: int
    tokens_after: int
    summarizer: str = ""
    summary_seconds: float = 0.0
    input_chars: int = 0
    output_chars: int = 0
    fact_chars: int = 0


@dataclass(frozen=True)
class Timeline:
    """Everything the log says about a session's steps and compactions.

    Attributes:
        session_id: The session.
        config: The Config in force at the end.
        steps: Every served view, oldest first.
        compactions: Every checkpoint, oldest first.
        events: The session's own events.
        messages: Messages in history (a fork's inherited ones included).
        history_tokens: Tokens of the whole history at the end.
        failed_compactions: Compactions that ended without a checkpoint.
        interrupted: Tool results synthesised for calls a crash left unanswered.
        last_activity: Unix time of the session's last event.
    """

    session_id: str
    config: Config
    steps: tuple[Step, ...]
    compactions: tuple[Compaction, ...]
    events: int
    messages: int
    history_tokens: int
    failed_compactions: int
    interrupted: int
    last_activity: float

    @property
    def peak_view_tokens(self) -> int:
        """The largest view served (0 when no view was served)."""
        return max((step.view_tokens for step in self.steps), default=0)

    def layer_counts(self) -> dict[str, int]:
        """Compactions by layer; ``micro`` counts the served views in which masking applied."""
        counts = {"micro": sum(1 for step in self.steps if step.masked)}
        for layer in ("auto", "manual", "reactive"):
            counts[layer] = sum(1 for c in self.compactions if c.layer == layer)
        return counts

    def token_series(self) -> TokenSeries:
        """Return the plot data; micro markers sit where masking advanced.

        Each compaction whose checkpoint recorded the summariser's wall time is labelled with it.
        """
        marks = [(step.index, "micro") for step in self.steps if step.masking_advanced]
        marks += [(c.step, c.layer) for c in self.compactions]
        timed = [c for c in self.compactions if c.summary_seconds]
        notes = [(c.step, human_seconds(c.summary_seconds)) for c in timed]
        thresholds = [step.threshold for step in self.steps]
        fixed = len(set(thresholds)) <= 1
        return TokenSeries(
            session_id=self.session_id,
            steps=[step.index for step in self.steps],
            history_tokens=[step.history_tokens for step in self.steps],
            view_tokens=[step.view_tokens for step in self.steps],
            threshold=(thresholds[0] if thresholds else self.config.threshold_tokens)
            if fixed
            else thresholds,
            compactions=sorted(marks),
            notes=notes,
            summary_seconds=sum(c.summary_seconds for c in self.compactions),
        )


def session_timeline(
    log: EventLog, session_id: str, *, tokenizer: Tokenizer | None = None
) -> Timeline:
    """Derive the timeline of ``session_id`` from its events.

    A fork's timeline starts at the fork: the parent's steps are the parent's.

    Args:
        log: The event log (only read).
        session_id: The session.
        tokenizer: Counts history tokens; ``chars // 3`` by default.

    Raises:
        UnknownSessionError: The session has no events.
        CorruptRecordError: A record is damaged.
    """
    tokenizer = tokenizer or CharTokenizer()
    state: SessionState | None = None
    history_tokens = counted = 0
    steps: list[Step] = []
    compactions: list[Compaction] = []
    failed = interrupted = events = 0
    last_activity = 0.0
    mask_before = 0
    for record, state in walk_session(log, session_id):
        events += 1
        last_activity = record.timestamp
        for message in state.history[counted:]:
            history_tokens += tokenizer.count_message(message)
        counted = len(state.history)
        event = record.event
        if isinstance(event, ViewServed):
            policy = render_policy(state)
            shown = assemble(state, state.active_checkpoint)
            masked = _masked(state, shown)
            steps.append(
                Step(
                    index=len(steps) + 1,
                    through_seq=event.through_seq,
                    history_tokens=history_tokens,
                    view_tokens=tokenizer.count_messages(shown),
                    estimated_tokens=event.estimated_tokens,
                    threshold=threshold_for(state),
                    masked=masked,
                    masking_advanced=masked > 0 and policy.mask_before_seq > mask_before,
                )
            )
            mask_before = policy.mask_before_seq
        elif isinstance(event, CheckpointCreated):
            checkpoint = event.checkpoint
            compactions.append(
                Compaction(
                    step=len(steps) + 1,
                    layer=LAYER_OF_REASON.get(checkpoint.reason, "auto"),
                    checkpoint_id=checkpoint.id,
                    tokens_before=checkpoint.tokens_before,
                    tokens_after=checkpoint.tokens_after,
                    summarizer=checkpoint.summarizer,
                    summary_seconds=checkpoint.summary_seconds,
                    input_chars=checkpoint.input_chars,
                    output_chars=checkpoint.output_chars,
                    fact_chars=len(checkpoint.facts),
                )
            )
        elif isinstance(event, CompactionFailed):
            failed += 1
        elif isinstance(event, ToolResultSynthesized):
            interrupted += 1
    assert state is not None  # walk_session raises on an unknown session
    return Timeline(
        session_id=session_id,
        config=state.config,
        steps=tuple(steps),
        compactions=tuple(compactions),
        events=events,
        messages=state.last_seq,
        history_tokens=history_tokens,
        failed_compactions=failed,
        interrupted=interrupted,
        last_activity=last_activity,
    )


def walk_session(log: EventLog, session_id: str) -> Iterator[tuple[RecordedEvent, SessionState]]:
    """Yield each of the session's own events with the session's state after it.

    The state is one object, mutated as the walk goes on: copy it to keep it. A fork's state
    includes its parent's prefix from the ``SessionForked`` event on.

    Raises:
        UnknownSessionError: The session has no events.
        CorruptRecordError: A record is damaged.
    """
    state: SessionState | None = None
    for record in log.iter_events(session_id):
        if state is None or isinstance(record.event, SessionOpened | SessionForked):
            # The opening events (and a fork's parent prefix) fold exactly as recovery does.
            state, _ = fold_session(log, session_id, through_event_seq=record.seq)
        else:
            state.apply(record.event)
        yield record, state
    if state is None:
        fold_session(log, session_id)  # raises UnknownSessionError


def _masked(state: SessionState, shown: Sequence[Message]) -> int:
    """Count the tool results of a view that micro masking replaced by a placeholder."""
    hidden = 0
    for message in shown:
        if message.role == "tool" and message.seq is not None:
            original = state.history[message.seq - 1]
            if message.content != original.content and message.content == mask_text(
                state.tool_name(original)
            ):
                hidden += 1
    return hidden


def split_steps(messages: Sequence[Message]) -> Iterator[list[Message]]:
    """Split a conversation where the model was called: before each assistant message.

    The first step holds what precedes the first assistant message; each later step starts with
    the assistant message the model answered and holds what was appended until the next call.
    """
    step: list[Message] = []
    for message in messages:
        if message.role == "assistant" and step:
            yield step
            step = []
        step.append(message)
    if step:
        yield step
