"""The promises of the two-mark policy, checkable on any session and settings (DESIGN §2).

:func:`run_policy` drives a list of messages through :class:`~ctxledger.testing.DomainSession`
as an agent does (a step before each assistant message and one at the end) and records what
the policy did; the checks raise ``AssertionError`` naming the broken promise:

* :func:`check_policy_run` -- no view over the window (a refused step is checked with
  :func:`~ctxledger.testing.check_floor_refusal`); a view at or over the threshold only when
  the part no compaction can shrink is itself at or over it; and no storms: two automatic
  compactions are at least half the gap between the marks of history apart, unless the first
  could not bring the view within half the gap of the target (what no cut shrinks lay above).
* :func:`check_lower_threshold` -- a lower threshold never gives a higher peak (beyond a share
  of the window, 0.5 % by default).
* :func:`check_unreached` -- a session that never reaches either threshold is served the same
  views under both.

:class:`~ctxledger.testing.PolicyMachine` runs the same checks as Hypothesis rules over
generated sessions, under a family of thresholds you choose.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ctxledger.config import Config
from ctxledger.domain.policy import marks, unshrinkable_tokens
from ctxledger.domain.summary import Summarizer
from ctxledger.domain.tokenizer import CharTokenizer, Tokenizer
from ctxledger.errors import ContextOverflowError
from ctxledger.messages import Message
from ctxledger.testing.driver import DomainSession
from ctxledger.testing.invariants import check_floor_refusal

__all__ = [
    "PolicyRun",
    "PolicyStep",
    "check_lower_threshold",
    "check_policy_run",
    "check_unreached",
    "family",
    "record_step",
    "run_policy",
]


@dataclass(frozen=True)
class PolicyStep:
    """One step of a :class:`PolicyRun`.

    Attributes:
        through_seq: The newest message seq.
        history_tokens: Tokens of every message appended so far (the tokenizer's count).
        view_tokens: The served view's estimate (0 when refused).
        view_hash: The served view's hash ("" when refused).
        compacted: An automatic compaction made a checkpoint at this step.
        unshrinkable: What no compaction can shrink at this step
            (:func:`~ctxledger.domain.unshrinkable_tokens`).
        threshold: The high mark in force at this step (the dynamic policy moves it).
        target: The low mark in force at this step.
        refused: The step was refused (``ContextOverflowError``).
    """

    through_seq: int
    history_tokens: int
    view_tokens: int
    view_hash: str
    compacted: bool
    unshrinkable: int
    threshold: int
    target: int
    refused: bool = False


@dataclass
class PolicyRun:
    """What the policy did on one session under one Config.

    Attributes:
        config: The Config.
        threshold: The high mark, in tokens (the base of a dynamic policy).
        target: The low mark, in tokens (likewise).
        steps: Every step, in order.
    """

    config: Config
    threshold: int
    target: int
    steps: list[PolicyStep] = field(default_factory=list)

    @property
    def peak(self) -> int:
        """The largest view served."""
        return max((step.view_tokens for step in self.steps), default=0)


def run_policy(
    messages: Sequence[Message],
    config: Config,
    *,
    tokenizer: Tokenizer | None = None,
    summarizer: Summarizer | None = None,
) -> PolicyRun:
    """Replay ``messages`` under ``config`` as an agent does and record every step.

    A step (compact if due, then serve) is prepared right before each assistant message and once
    at the end; a refused step (``ContextOverflowError``) is checked to have been needed.

    Args:
        messages: The conversation (without seqs).
        config: The policy's settings.
        tokenizer: Counts tokens (default: chars // 3).
        summarizer: Writes summaries (default: :func:`~ctxledger.testing.digest_summarizer`).
    """
    tokenizer = tokenizer or CharTokenizer()
    session = DomainSession(config, tokenizer=tokenizer, summarizer=summarizer)
    sizes = config.sizes()
    run = PolicyRun(config, sizes.threshold_tokens, sizes.target_tokens)
    history = 0
    for message in [*messages, None]:
        if message is None or (message.role == "assistant" and session.state.last_seq):
            run.steps.append(record_step(session, history))
        if message is not None:
            session.append(message)
            history += tokenizer.count_messages([message])
    return run


def record_step(session: DomainSession, history: int) -> PolicyStep:
    """Serve a step of ``session`` (``prepare_step``) and return what the policy did; a refused
    step is checked to have been needed. ``history`` is the tokens appended so far."""
    state = session.state
    before = len(state.checkpoints)
    in_force = marks(state)
    try:
        view = session.step()
    except ContextOverflowError as error:
        check_floor_refusal(state, error, tokenizer=session.tokenizer)
        floor = unshrinkable_tokens(state, session.tokenizer)
        return PolicyStep(state.last_seq, history, 0, "", False, floor, *in_force[:2], refused=True)
    return PolicyStep(
        through_seq=view.through_seq,
        history_tokens=history,
        view_tokens=view.estimated_tokens,
        view_hash=view.view_hash,
        compacted=len(state.checkpoints) > before,
        unshrinkable=unshrinkable_tokens(state, session.tokenizer),
        threshold=in_force.threshold,
        target=in_force.target,
    )


def check_policy_run(run: PolicyRun) -> None:
    """Check the promises of one run (see the module's docstring).

    Raises:
        AssertionError: A promise is broken; the message names it and the step.
    """
    window = run.config.context_window
    for step in run.steps:
        if step.refused:
            continue  # checked when it happened: nothing could have made it fit
        if step.view_tokens > window:
            raise AssertionError(
                f"over_window: view of {step.view_tokens} tokens at seq {step.through_seq}"
            )
        if step.view_tokens >= step.threshold and step.unshrinkable < step.threshold:
            raise AssertionError(
                f"at_threshold: view of {step.view_tokens} tokens at seq {step.through_seq} "
                f"(threshold {step.threshold}) although only {step.unshrinkable} cannot shrink"
            )
    compactions = [step for step in run.steps if step.compacted]
    for first, second in itertools.pairwise(compactions):
        grown = second.history_tokens - first.history_tokens
        half = (first.threshold - first.target) // 2
        if first.view_tokens <= first.target + half and grown < half:
            raise AssertionError(
                f"storm: compactions at seq {first.through_seq} and {second.through_seq} only "
                f"{grown} tokens of history apart (half the gap: {half})"
            )


def check_lower_threshold(high: PolicyRun, low: PolicyRun, *, slack: float = 0.005) -> None:
    """Check that the run with the lower threshold (``low``) peaks no higher than ``high``.

    Raises:
        AssertionError: ``low``'s peak exceeds ``high``'s by more than ``slack`` of the window.
    """
    assert low.threshold <= high.threshold, "low must have the lower threshold"
    allowed = high.peak + int(slack * high.config.context_window)
    if low.peak > allowed:
        raise AssertionError(
            f"peak: threshold {low.threshold} peaks at {low.peak} tokens, threshold "
            f"{high.threshold} at {high.peak} (allowed {allowed})"
        )


def check_unreached(high: PolicyRun, low: PolicyRun) -> None:
    """Check that a session reaching neither threshold is served the same views under both.

    It reaches neither when the run with the higher threshold never compacted and never served
    a view at or over the lower threshold; otherwise there is nothing to check.

    Raises:
        AssertionError: Such a session was served different views.
    """
    reached = any(
        step.compacted or step.view_tokens >= other.threshold
        for step, other in zip(high.steps, low.steps, strict=True)
    )
    if reached:
        return
    for one, other in zip(high.steps, low.steps, strict=True):
        if one.view_hash != other.view_hash:
            raise AssertionError(
                f"unreached: the views at seq {one.through_seq} differ although neither "
                f"threshold ({high.threshold}, {low.threshold}) was reached"
            )


def family(
    window: int,
    thresholds: Sequence[float] = (0.9, 0.8, 0.7, 0.6, 0.5),
    target: Callable[[float], float] = lambda threshold: min(0.5, round(threshold - 0.2, 4)),
    **settings: object,
) -> list[Config]:
    """Configs differing only in their marks, highest threshold first (the issue's family:
    ``target = min(0.5, threshold - 0.2)``)."""
    return [
        Config(
            context_window=window,
            compression_threshold=threshold,
            compaction_target=target(threshold),
            **settings,  # type: ignore[arg-type]
        )
        for threshold in sorted(thresholds, reverse=True)
    ]
