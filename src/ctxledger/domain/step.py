"""An agent's step as one decision: append its new messages, then serve the next view.

``Session.step(messages, pending, usage=)`` does what ``append_many(messages, usage=)`` then
``prepare_step(pending)`` do, with the same events, answers and errors, but without waiting for
the appends to be durable before the view is decided: when no compaction is due, both go to the
log in one batch (one commit, one fsync, instead of two). :func:`decide_step` is the decision;
the history actor and :class:`ctxledger.testing.DomainSession` both call it.

Unlike :func:`~ctxledger.domain.commands.execute` and :func:`~ctxledger.domain.decide`, it folds
part of what it decides: the view must be decided on the state with the step's messages in, so
their ``MessageAppended`` events are folded into ``state`` before the view is decided, ahead of
the log. The caller records ``appended.events`` first (folded already: record them without
folding them again), then carries out ``decision`` as it would carry out a ``Serve`` decision.
If the appends cannot be recorded, ``state`` is ahead of the log and must be discarded (the host
reloads the session from its log).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from ctxledger.domain.commands import AppendMessages, Outcome, append_messages
from ctxledger.domain.decide import Decision, Serve, decide
from ctxledger.domain.state import SessionState
from ctxledger.domain.tokenizer import Tokenizer
from ctxledger.domain.usage import ReportedUsage
from ctxledger.messages import Message

__all__ = ["Step", "Stepped", "decide_step"]


class Step(msgspec.Struct, frozen=True, kw_only=True):
    """Append ``messages`` as one atomic batch, then serve the next view (``Session.step``).

    Attributes:
        messages: The step's new messages (may be empty: then it is ``prepare_step``).
        pending: Text about to be sent with the view (counted in the estimate).
        usage: The usage of the model call that answered with ``messages`` (recorded before
            them, as ``record_usage`` would be), or None.
    """

    messages: tuple[Message, ...] = ()
    pending: str = ""
    usage: ReportedUsage | None = None

    @property
    def fresh(self) -> bool:
        """Whether the step is new input (it appends, or reports usage): the reactive
        attempts start over."""
        return bool(self.messages) or self.usage is not None


class Stepped(msgspec.Struct, frozen=True, kw_only=True):
    """What a step records and serves.

    Attributes:
        appended: The append's outcome: its ``MessageAppended`` events (already folded into the
            state :func:`decide_step` was given) and the seqs they got (``answer``).
        decision: The ``Serve`` decision made on the state with the appends folded: its events
            go after ``appended.events`` (in the same batch unless it needs a summary or waits
            for a background compaction: then the appends are recorded first).
    """

    appended: Outcome
    decision: Decision

    @property
    def seqs(self) -> tuple[int, ...]:
        """The seqs the step's messages got, oldest first."""
        answer: list[int] = self.appended.answer  # type: ignore[assignment]  # append's answer
        return tuple(answer)


def decide_step(
    state: SessionState,
    step: Step,
    *,
    tokenizer: Tokenizer,
    new_id: Callable[[], str],
    now: Callable[[], float],
) -> Stepped:
    """Decide ``step``: validate and fold its appends into ``state``, then decide the view.

    Args:
        state: The session; the step's ``MessageAppended`` events are folded into it (see the
            module docstring).
        step: The step.
        tokenizer: Counts tokens.
        new_id: Returns a fresh id (for a compaction or a checkpoint).
        now: Returns the current unix time (recorded on checkpoints).

    Returns:
        The appends and the decision.

    Raises:
        InvalidMessageError: A message cannot be appended here, or its metadata could not be
            stored (as the event log would refuse it); nothing of the step is decided and
            ``state`` is unchanged.
    """
    # Folded ahead of the log: validation refuses what the log would not take (metadata too).
    appended = append_messages(state, AppendMessages(messages=step.messages, usage=step.usage))
    apply = state.apply
    for event in appended.events:
        apply(event)
    decision = decide(
        state, Serve(pending=step.pending), tokenizer=tokenizer, new_id=new_id, now=now
    )
    return Stepped(appended=appended, decision=decision)
