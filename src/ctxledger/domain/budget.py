"""The token budget: the DESIGN §2 estimate and the compaction threshold policies."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar, Protocol

from ctxledger.domain.limits import DYNAMIC_BASE_RATIO
from ctxledger.domain.projection import assemble, tail_messages
from ctxledger.domain.state import SessionState
from ctxledger.domain.tokenizer import Tokenizer
from ctxledger.messages import Message

__all__ = [
    "DynamicThreshold",
    "FixedThreshold",
    "ThresholdPolicy",
    "estimate_tokens",
    "looks_failed",
    "threshold_for",
]


def estimate_tokens(
    state: SessionState,
    *,
    tokenizer: Tokenizer,
    pending: str = "",
    view_messages: Sequence[Message] | None = None,
    view_tokens: int | None = None,
) -> int:
    """Return the budget estimate of the next prompt (DESIGN §2).

    ``max(tokens(view + pending), last_reported_prompt_tokens + tokens(pending chars))`` where the
    pending chars are ``pending`` plus the messages appended since the usage report (as the view
    shows them). The usage term applies only while the figure is current: a checkpoint recorded
    after it makes it stale until the next report.

    Args:
        state: The session.
        tokenizer: Counts tokens.
        pending: Text about to be sent with the view (for example a new user input).
        view_messages: The current view's messages, if already built.
        view_tokens: Their tokens with ``pending``, if already counted.
    """
    if view_messages is None:
        view_messages = assemble(state, state.active_checkpoint)
    extra = [Message(role="user", content=pending)] if pending else []
    if view_tokens is None:
        view_tokens = tokenizer.count_messages([*view_messages, *extra])
    usage = state.usage
    if usage is None or not state.usage_is_current:
        return view_tokens
    checkpoint = state.active_checkpoint
    start = max(usage.through_seq + 1, checkpoint.retain_from_seq if checkpoint else 1)
    since = [*tail_messages(state, start), *extra]
    return max(view_tokens, usage.prompt_tokens + (tokenizer.count_messages(since) if since else 0))


class ThresholdPolicy(Protocol):
    """Decides the compaction threshold, in tokens, for a state."""

    def threshold(self, state: SessionState) -> int:
        """Return the threshold; an estimate at or above it compacts."""
        ...


class FixedThreshold:
    """``int(context_window * compression_threshold)``: the seed's rule."""

    def threshold(self, state: SessionState) -> int:
        """Return the fixed threshold of ``state.config``."""
        return max(1, state.config.threshold_tokens)


# Signs that a tool run failed; checked on the head and tail of each recent result only.
_FAILURE = re.compile(
    r"Traceback \(most recent call last\)|^\w*(?:Error|Exception)\b|<returncode>\s*[1-9]"
    r"|exit (?:code|status):? [1-9]|\bFAILED\b|command not found|No such file or directory",
    re.MULTILINE,
)


def looks_failed(result: Message) -> bool:
    """Whether a tool result looks like a failed run (traceback, error line, non-zero exit)."""
    if result.metadata.get("is_error") is True:
        return True
    text = result.content
    if len(text) > 8000:
        text = text[:4000] + "\n" + text[-4000:]
    return _FAILURE.search(text) is not None


class DynamicThreshold:
    """The seed idea: ``0.3 * window``, *0.8 early in a session, *1.2 while debugging.

    Both conditions are read from history only, so replay reproduces every threshold:

    * *early*: fewer than :attr:`early_steps` assistant messages so far. Exploration output
      piles up fast at the start and is rarely needed verbatim later, so compact sooner.
    * *debugging*: at least :attr:`debug_failures` of the last :attr:`debug_window` tool results
      look failed (:func:`looks_failed`). Tracebacks and the edits around them are needed
      verbatim, so keep more raw context.

    The result never exceeds the fixed threshold (``compression_threshold`` stays the ceiling).
    """

    base_ratio: ClassVar[float] = DYNAMIC_BASE_RATIO
    early_factor: ClassVar[float] = 0.8
    debug_factor: ClassVar[float] = 1.2
    early_steps: ClassVar[int] = 20
    debug_window: ClassVar[int] = 5
    debug_failures: ClassVar[int] = 2

    def is_early(self, state: SessionState) -> bool:
        """Whether the session has had fewer than ``early_steps`` assistant messages."""
        return state.assistant_count < self.early_steps

    def is_debugging(self, state: SessionState) -> bool:
        """Whether enough of the most recent tool results look failed."""
        recent = state.recent_tool_results(self.debug_window)
        return sum(1 for result in recent if looks_failed(result)) >= self.debug_failures

    def threshold(self, state: SessionState) -> int:
        """Return the dynamic threshold of ``state``."""
        config = state.config
        value = config.context_window * self.base_ratio
        if self.is_early(state):
            value *= self.early_factor
        if self.is_debugging(state):
            value *= self.debug_factor
        return max(1, min(int(value), config.threshold_tokens))


_POLICIES: dict[str, ThresholdPolicy] = {"fixed": FixedThreshold(), "dynamic": DynamicThreshold()}


def threshold_for(state: SessionState) -> int:
    """Return the compaction threshold in force for ``state`` (its Config's policy)."""
    return _POLICIES[state.config.threshold_policy].threshold(state)
