"""The context policies of the quality benchmark, replayed over one trace (issues 7 and 16).

Every policy runs on the real domain (:class:`~ctxledger.testing.DomainSession`: the same state
fold, rendering and :func:`~ctxledger.domain.build_view` as the host); they differ only in how a
compaction is planned and what the summariser is given:

* ``ctxledger``: the domain's own :func:`~ctxledger.domain.plan_compaction` (incremental summary,
  round cuts keeping ``min_retain_rounds``, step-level cuts inside a long round) with micro
  masking, exactly as the host runs it, without the fact block (``fact_index_chars=0``: the
  behaviour before issue 16).
* ``ctxledger+facts``: the same with the fact block at ``Config.fact_index_chars``'s default
  (what a new session gets).
* ``naive``: on each compaction re-summarise *all* history from the start (no previous summary),
  chunked by the same budget; cut only at round starts (user messages), keeping as many recent
  rounds as fit below the threshold (at least the current one); no micro masking.
* ``replace``: on each compaction the whole conversation so far (the previous summary plus every
  message since) becomes one summary message and nothing stays raw (a pending tool step would
  stay, for pairing); no micro masking.

All three compact at the same trigger (the domain's estimate reaching the threshold), reserve the
same summary room and use the same summariser, so the differences come from the policy alone.
Oversize tool results are truncated in every view (a rendering rule, not a compaction policy).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ctxledger import Config
from ctxledger.checkpoints import Checkpoint
from ctxledger.domain import (
    CharTokenizer,
    CompactionPlan,
    LossReport,
    ModelView,
    SessionState,
    audit_checkpoint,
    draft_view,
    estimate_tokens,
    message_chars,
    plan_compaction,
    run_summarizer,
    summary_chunk_chars,
    summary_max_chars,
    threshold_for,
)
from ctxledger.domain.cuts import CutMeasure
from ctxledger.errors import ContextOverflowError
from ctxledger.events import CheckpointCreated
from ctxledger.messages import Message
from ctxledger.summarizers.base import Summarizer, SummaryRequest
from ctxledger.testing import DomainSession

__all__ = [
    "POLICIES",
    "PROTOTYPES",
    "Compaction",
    "RecordingSummarizer",
    "Replay",
    "policy_config",
    "replay",
]

WINDOW = 32_000
#: Micro masking off: no tool result is ever old enough to be masked.
NO_MASKING = 1_000_000
TOKENIZER = CharTokenizer()


class RecordingSummarizer:
    """Wraps a summariser and counts its calls and input tokens (request chars // 3)."""

    def __init__(self, inner: Summarizer) -> None:
        self.inner = inner
        self.calls = 0
        self.input_tokens = 0
        self.seconds = 0.0

    def __call__(self, request: SummaryRequest, /) -> str | None:
        chars = sum(message_chars(m) for m in request.messages)
        chars += len(request.previous_summary or "")
        self.calls += 1
        self.input_tokens += chars // 3
        start = time.perf_counter()
        try:
            return self.inner(request)
        finally:
            self.seconds += time.perf_counter() - start


@dataclass
class Compaction:
    """One compaction: where it cut and the messages it newly took out of the raw tail."""

    view_index: int  # index of the first view served under the new checkpoint
    through_seq: int
    retain_from_seq: int
    covered: tuple[Message, ...]
    summary_chars: int
    calls: int
    input_tokens: int
    report: LossReport  # the loss audit of the checkpoint (facts kept in the next view)


@dataclass
class Replay:
    """Everything one policy served over one trace."""

    policy: str
    views: list[ModelView] = field(default_factory=list)
    compacted_before: list[bool] = field(default_factory=list)  # per view
    compactions: list[Compaction] = field(default_factory=list)
    summarizer_calls: int = 0
    summarizer_input_tokens: int = 0
    summarizer_seconds: float = 0.0
    seconds: float = 0.0


def policy_config(policy: str, **overrides: Any) -> Config:
    """The Config a policy runs with (a 32,000-token window; masking off for the baselines).

    Every policy but ``ctxledger+facts`` runs without the fact block.
    """
    config = Config(context_window=WINDOW)
    if policy != "ctxledger+facts":
        config = config.replace(fact_index_chars=0)
    if policy in ("naive", "replace"):
        config = config.replace(micro_keep_recent=NO_MASKING, micro_batch=1)
    return config.replace(**overrides) if overrides else config


def _covered(state: SessionState, start: int, cut: int) -> tuple[Message, ...]:
    return tuple(m for m in state.history[start - 1 : cut - 1] if not state.is_head(m))


def _record(session: DomainSession, plan: CompactionPlan, summarizer: Summarizer) -> None:
    summary = run_summarizer(plan, summarizer)
    if not summary:
        return
    active = session.state.active_checkpoint
    ordinal = len(session.state.checkpoints) + 1
    checkpoint = Checkpoint(
        id=f"cp{ordinal}",
        summary=summary[: plan.max_chars],
        retain_from_seq=plan.retain_from_seq,
        covers_through_seq=plan.covers_through_seq,
        reason="threshold_exceeded",
        created_at=float(ordinal),
        previous_checkpoint_id=active.id if active else None,
        tokens_before=plan.estimated_tokens,
    )
    session.record(CheckpointCreated(compaction_id=f"c{ordinal}", checkpoint=checkpoint))


def _plan(
    state: SessionState, cut: int, messages: tuple[Message, ...], previous: str | None
) -> CompactionPlan:
    threshold = threshold_for(state)
    return CompactionPlan(
        reason="threshold_exceeded",
        retain_from_seq=cut,
        covers_through_seq=cut - 1,
        messages=messages,
        previous_summary=previous,
        previous_checkpoint_id=None,
        focus=None,
        max_chars=summary_max_chars(state.config),
        chunk_chars=summary_chunk_chars(state.config),
        estimated_tokens=estimate_tokens(state, tokenizer=TOKENIZER),
        threshold=threshold,
        target_tokens=threshold,
        planned_tokens=0,
    )


def _due(state: SessionState) -> bool:
    if state.last_seq < 3:
        return False
    if state.active_checkpoint is not None and state.checkpoint_seq == state.last_seq:
        return False
    return estimate_tokens(state, tokenizer=TOKENIZER) >= threshold_for(state)


def naive_step(session: DomainSession, summarizer: Summarizer) -> None:
    """Round cuts only, re-summarising all history from the first message."""
    state = session.state
    if not _due(state):
        return
    active = state.active_checkpoint
    base = active.retain_from_seq if active else 1
    rounds = [s for s in state.user_seqs if s > base and state.boundary_at_or_before(s) == s]
    if not rounds:
        return  # no new round start: a naive policy cannot cut inside a round
    measure = CutMeasure(
        state, TOKENIZER, "threshold_exceeded", summary_max_chars(state.config), ""
    )
    room = threshold_for(state) - 1
    cut = next((s for s in rounds if measure.exact(s) <= room), rounds[-1])
    _record(session, _plan(state, cut, _covered(state, 1, cut), None), summarizer)


def replace_step(session: DomainSession, summarizer: Summarizer) -> None:
    """Everything so far (previous summary + new messages) becomes the one summary."""
    state = session.state
    if not _due(state):
        return
    active = state.active_checkpoint
    base = active.retain_from_seq if active else 1
    cut = state.last_seq + 1
    open_calls = state.open_tool_calls()
    if open_calls:  # keep the pending step raw so its results stay paired with their call
        cut = state.boundary_at_or_before(state.last_seq) or base
    if cut <= base:
        return
    previous = active.summary if active else None
    _record(session, _plan(state, cut, _covered(state, base, cut), previous), summarizer)


def _ctxledger_step(session: DomainSession, summarizer: Summarizer) -> None:
    session.compact_if_needed()


def _pin_then_compact(session: DomainSession, pick: Callable[[CompactionPlan], int | None]) -> None:
    """Pin the message ``pick`` names for the planned compaction (if any), then compact."""
    state = session.state
    outcome = plan_compaction(state, tokenizer=TOKENIZER)
    if isinstance(outcome, CompactionPlan):
        seq = pick(outcome)
        if seq is not None and seq < outcome.retain_from_seq and seq not in state.pins:
            session.pin(seq)
    session.compact_if_needed()


def pin_opener_step(session: DomainSession, summarizer: Summarizer) -> None:
    """Prototype: a step-level cut keeps the opening user message of its round (pinned).

    On the real traces most sessions are one long round, so the first step-level cut hands the
    task statement itself to the summariser, which keeps only its head and tail. Pinning the
    round's opener shows it verbatim in the pinned slot, before the summary (a stable prefix).
    """
    state = session.state

    def opener(plan: CompactionPlan) -> int | None:
        openers = [s for s in state.user_seqs if s < plan.retain_from_seq]
        return openers[-1] if plan.step_level and openers else None

    _pin_then_compact(session, opener)


def pin_task_step(session: DomainSession, summarizer: Summarizer) -> None:
    """Prototype: the session's first user message (the task) is never summarised away."""
    state = session.state
    _pin_then_compact(session, lambda plan: state.user_seqs[0] if state.user_seqs else None)


POLICIES: dict[str, Callable[[DomainSession, Summarizer], None]] = {
    "ctxledger": _ctxledger_step,
    "ctxledger+facts": _ctxledger_step,
    "naive": naive_step,
    "replace": replace_step,
}
#: Changes tried in the bench only, to size a proposed domain fix; they run on (a)'s Config.
PROTOTYPES: dict[str, Callable[[DomainSession, Summarizer], None]] = {
    "pin-opener": pin_opener_step,
    "pin-task": pin_task_step,
}


def replay(messages: list[Message], policy: str, config: Config, summarizer: Summarizer) -> Replay:
    """Replay ``messages`` as an agent would: prepare a step before each assistant message.

    A step is "compact if the policy says so, then serve the view"; one more is served at the
    end. The session's summariser and the policy's both go through one recorder.
    """
    recorder = RecordingSummarizer(summarizer)
    session = DomainSession(config, summarizer=recorder, tokenizer=TOKENIZER)
    step = POLICIES.get(policy) or PROTOTYPES[policy]
    result = Replay(policy=policy)
    start = time.perf_counter()
    for message in [*messages, None]:
        if message is None or (message.role == "assistant" and session.state.last_seq):
            state = session.state
            before = state.active_checkpoint
            calls, tokens = recorder.calls, recorder.input_tokens
            step(session, recorder)
            after = state.active_checkpoint
            compacted = after is not None and after is not before
            if compacted:
                assert after is not None
                result.compactions.append(
                    Compaction(
                        view_index=len(result.views),
                        through_seq=state.last_seq,
                        retain_from_seq=after.retain_from_seq,
                        covered=_covered(
                            state, before.retain_from_seq if before else 1, after.retain_from_seq
                        ),
                        summary_chars=len(after.summary),
                        calls=recorder.calls - calls,
                        input_tokens=recorder.input_tokens - tokens,
                        report=audit_checkpoint(state),
                    )
                )
            try:
                view = session.view()
            except ContextOverflowError:
                # The two marks refuse to serve a view over the window; the policy under test
                # (say (b), which never cuts inside a round) would have sent it: it is measured
                # as it stands, an overflow view.
                view = draft_view(session.state, tokenizer=TOKENIZER).view()
            result.views.append(view)
            result.compacted_before.append(compacted)
        if message is not None:
            session.append(message)
    result.seconds = time.perf_counter() - start
    result.summarizer_calls = recorder.calls
    result.summarizer_input_tokens = recorder.input_tokens
    result.summarizer_seconds = recorder.seconds
    return result
