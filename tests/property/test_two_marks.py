"""The promises of the two marks over generated sessions (ctxledger.testing's policy kit).

The same session is served under the issue's family of marks (thresholds 0.9 ... 0.5, target
``min(0.5, threshold - 0.2)``) at a small window, so that compactions are frequent: no view
over the window, a view at or over the threshold only when what no cut shrinks is, no storms,
a lower threshold never peaks higher, and a session that reaches neither threshold is served
the same views.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxledger import Config, Message
from ctxledger.testing import (
    PolicyMachine,
    check_lower_threshold,
    check_policy_run,
    check_unreached,
    conversations,
    family,
    run_policy,
)

TestPolicyMachine = PolicyMachine.TestCase
# The dynamic threshold moves the marks from step to step (both below 0.3 of the window here):
# one Config, whose own promises are checked against the marks in force at each step.
TestPolicyMachineDynamic = PolicyMachine.configured(
    name="PolicyMachineDynamic",
    window=6_000,
    thresholds=(0.8,),
    settings={"threshold_policy": "dynamic", "min_retain_rounds": 1},
).TestCase


@given(
    messages=conversations(max_rounds=4, max_steps=6, huge_outputs=True, huge_chars=(500, 3_000)),
    window=st.sampled_from([12_000, 16_000]),
)
@settings(max_examples=40)
def test_the_family_keeps_its_promises_on_generated_conversations(
    messages: list[Message], window: int
) -> None:
    """Each run keeps its promises; neighbouring thresholds compare as promised. The windows
    are large enough that no step adds more than the spacing of the thresholds (see
    PolicyMachine)."""
    runs = [run_policy(messages, config) for config in family(window)]
    for run in runs:
        check_policy_run(run)
    for high, low in itertools.pairwise(runs):
        check_lower_threshold(high, low)
        check_unreached(high, low)


def test_a_lower_peak_is_checked_and_named() -> None:
    """The check itself fails, naming the promise, when a lower threshold peaks higher."""
    messages = [Message.user("go " + "x" * 2_000), Message.assistant("ok")]
    high, low = (run_policy(messages, config) for config in family(2_000, (0.9, 0.5)))
    low.steps[-1] = type(low.steps[-1])(**{**low.steps[-1].__dict__, "view_tokens": 5_000})
    with pytest.raises(AssertionError, match="peak"):
        check_lower_threshold(high, low)


def test_configured_machine_refuses_unknown_settings() -> None:
    """A misspelt setting is an error, not a silent default."""
    with pytest.raises(TypeError, match="windw"):
        PolicyMachine.configured(windw=3)


def test_family_is_highest_threshold_first() -> None:
    """family() orders the Configs by threshold, highest first, with the issue's targets."""
    configs = family(16_000, (0.5, 0.9, 0.7))
    assert [c.compression_threshold for c in configs] == [0.9, 0.7, 0.5]
    assert [c.compaction_target for c in configs] == [0.5, 0.5, 0.3]
    assert all(isinstance(c, Config) for c in configs)
