"""A Hypothesis state machine for the promises of the two-mark policy (needs ``hypothesis``).

Every rule hits one :class:`~ctxledger.testing.DomainSession` per Config of a family that
differs only in its marks (by default the issue's: thresholds 0.9 ... 0.5 with
``target = min(0.5, threshold - 0.2)``), so the same generated session is served under each;
the invariants are :mod:`ctxledger.testing.policy`'s checks, within each run and between runs
of neighbouring thresholds. Run it on your own settings::

    from ctxledger.testing import PolicyMachine

    TestMyPolicy = PolicyMachine.configured(window=8000, settings={"min_retain_rounds": 2}).TestCase
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from ctxledger.domain.tokenizer import CharTokenizer
from ctxledger.messages import Message, ToolCall
from ctxledger.testing.driver import DomainSession
from ctxledger.testing.policy import (
    PolicyRun,
    check_lower_threshold,
    check_policy_run,
    check_unreached,
    family,
    record_step,
)

__all__ = ["PolicyMachine"]


def _issue_target(threshold: float) -> float:
    """The target paired with ``threshold`` by default: 0.2 below it, at most 0.5."""
    return min(0.5, round(threshold - 0.2, 4))


class PolicyMachine(RuleBasedStateMachine):
    """Generated agent sessions served under a family of marks, checked step by step.

    Rules: a user message, an agent step (a step is served, then an assistant message with
    one or two tool calls and their results is appended), a plain reply (a step, then an
    assistant message). Sizes are drawn from :attr:`text_sizes` and :attr:`result_sizes`
    (characters). The defaults keep what one step adds below the spacing of the thresholds (a
    tenth of the window): a step that jumps over a higher threshold lets that run compact where
    the lower one, which compacted earlier, does not, and no threshold policy can then promise
    that the lower threshold peaks no higher.
    """

    window: ClassVar[int] = 4_000
    thresholds: ClassVar[tuple[float, ...]] = (0.9, 0.8, 0.7, 0.6, 0.5)
    target: ClassVar[Callable[[float], float]] = staticmethod(_issue_target)
    settings: ClassVar[dict[str, Any]] = {}
    text_sizes: ClassVar[tuple[int, ...]] = (0, 40, 400)
    result_sizes: ClassVar[tuple[int, ...]] = (0, 60, 300, 500)

    @classmethod
    def configured(cls, *, name: str | None = None, **overrides: Any) -> type[PolicyMachine]:
        """Return a subclass under other settings; collect its ``.TestCase``.

        Args:
            name: The class name shown in test reports.
            **overrides: Any of ``window``, ``thresholds``, ``target`` (a function from a
                threshold to its target), ``settings`` (other Config fields, shared by the
                family), ``text_sizes`` and ``result_sizes``.

        Raises:
            TypeError: A setting is unknown.
        """
        known = {"window", "thresholds", "target", "settings", "text_sizes", "result_sizes"}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise TypeError(f"unknown PolicyMachine setting(s): {', '.join(unknown)}")
        if "target" in overrides:
            overrides["target"] = staticmethod(overrides["target"])
        return type(name or f"Configured{cls.__name__}", (cls,), overrides)

    def __init__(self) -> None:
        """One session per Config of the family, all fed the same messages."""
        super().__init__()
        target: Callable[[float], float] = type(self).target
        configs = family(self.window, self.thresholds, target, **self.settings)
        self.tokenizer = CharTokenizer()
        self.sessions = [DomainSession(config, tokenizer=self.tokenizer) for config in configs]
        self.runs = [
            PolicyRun(config, config.sizes().threshold_tokens, config.sizes().target_tokens)
            for config in configs
        ]
        self.history = 0
        self._ids = itertools.count(1)

    def _append(self, *messages: Message) -> None:
        for session in self.sessions:
            session.append_many(messages)
        self.history += self.tokenizer.count_messages(list(messages))

    def _serve(self) -> None:
        if not self.sessions[0].state.last_seq:
            return
        for session, run in zip(self.sessions, self.runs, strict=True):
            run.steps.append(record_step(session, self.history))

    @rule(data=st.data())
    def user(self, data: st.DataObject) -> None:
        """The user writes."""
        size = data.draw(st.sampled_from(self.text_sizes), label="user")
        self._append(Message.user("please " + "u" * size))

    @rule(data=st.data(), calls=st.integers(1, 2))
    def agent_step(self, data: st.DataObject, calls: int) -> None:
        """A step is served, then the agent calls tools and their results arrive."""
        self._serve()
        made = [ToolCall(f"c{next(self._ids)}", "bash", '{"command": "ls"}') for _ in range(calls)]
        results = [
            Message.tool(
                "r" * data.draw(st.sampled_from(self.result_sizes), label="result"),
                call.id,
                "bash",
            )
            for call in made
        ]
        self._append(Message.assistant("working", made), *results)

    @rule(data=st.data())
    def reply(self, data: st.DataObject) -> None:
        """A step is served, then the agent answers in text."""
        self._serve()
        size = data.draw(st.sampled_from(self.text_sizes), label="reply")
        self._append(Message.assistant("done " + "a" * size))

    @invariant()
    def promises_hold(self) -> None:
        """Each run keeps its promises; a lower threshold never peaks higher; a session that
        reached neither of two neighbouring thresholds was served the same views."""
        for run in self.runs:
            check_policy_run(run)
        for high, low in itertools.pairwise(self.runs):
            check_lower_threshold(high, low)
            check_unreached(high, low)
