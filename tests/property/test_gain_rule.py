"""The gain rule (``min_compaction_gain_tokens``) and the floor guard never let a view exceed the
window: over generated sessions and over the real traces (issue 17).

Both rules belong to the one-mark policy: a Config built now refuses them (schema 4), and
Configs recorded before carry them and replay with them, so these properties run on such
Configs (schema 3, as the one-mark releases built them).
"""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from ctxledger import Config, ContextOverflowError, Message
from ctxledger.config import upcast_config
from ctxledger.domain import CharTokenizer
from ctxledger.events import ViewServed
from ctxledger.summarizers.extractive import ExtractiveSummarizer
from ctxledger.testing import DomainSession, conversations

TOKENS = CharTokenizer()
#: What the one-mark releases set for fields added after 0.1.0 in a Config built by code.
ONE_MARK_DEFAULTS = {
    "prepare_threshold": 0.85,
    "fact_index_chars": 16_000,
    "calibrate_after_reports": 3,
    "min_compaction_gain_tokens": 2_560,
    "floor_guard": True,
    "summary_result_chars": 1_000,
}


def one_mark(**fields: object) -> Config:
    """A Config as the one-mark releases built it (schema 3)."""
    config: Config = msgspec.convert(upcast_config({**ONE_MARK_DEFAULTS, **fields}), Config)
    return config


@st.composite
def configs(draw: st.DrawFn) -> Config:
    """Small windows, so that generated conversations compact often; the gain rule on."""
    return one_mark(
        context_window=draw(st.integers(300, 4000)),
        compression_threshold=draw(st.sampled_from([0.5, 0.8, 1.0])),
        min_retain_rounds=draw(st.integers(0, 3)),
        micro_keep_recent=draw(st.integers(0, 4)),
        micro_batch=draw(st.integers(1, 4)),
        min_compaction_gain_tokens=draw(st.sampled_from([1, 20, 200, 2_000, 50_000])),
        floor_guard=draw(st.booleans()),
        fact_index_chars=draw(st.sampled_from([0, 400])),
    )


def _replay(messages: list[Message], config: Config) -> DomainSession:
    """Serve a step before each assistant message and at the end, as an agent would."""
    session = DomainSession(config)
    for message in [*messages, None]:
        if message is None or (message.role == "assistant" and session.state.last_seq):
            try:
                view = session.step()
            except ContextOverflowError:
                # Refused: the floor alone exceeds the window (nothing was served).
                assert config.floor_guard
            else:
                assert view.view_tokens <= config.context_window, (
                    view.through_seq,
                    view.view_tokens,
                    session.results[-1] if session.results else None,
                )
        if message is not None:
            session.append(message)
    return session


@given(config=configs(), messages=conversations(max_rounds=5, max_steps=5, huge_chars=(500, 8000)))
def test_no_view_exceeds_the_window_with_the_gain_rule(
    config: Config, messages: list[Message]
) -> None:
    """Whatever the gain asked for, every view served fits the window."""
    note(repr(config))
    session = _replay(messages, config)
    for result in session.results:
        if result.reason == "gain_too_small":
            assert result.estimated_tokens < config.context_window
            assert result.estimated_tokens - result.planned_tokens < (
                config.min_compaction_gain_tokens
            )
    # Each recorded re-mask describes its view: results newly masked, the prefix before them.
    for event in session.events:
        if isinstance(event, ViewServed) and event.remask is not None:
            remask = event.remask
            assert remask.results >= 1
            assert remask.tokens_after == event.view_chars // 3  # no usage: chars // 3
            assert 0 <= remask.prefix_kept_tokens <= remask.tokens_after <= remask.tokens_before
            assert 0 < remask.first_seq <= event.through_seq


@pytest.mark.traces
def test_the_gain_rule_keeps_views_in_the_window_on_the_traces(
    traces: dict[str, list[Message]],
) -> None:
    """On the real traces at 16k and 32k with a large gain asked, no view exceeds the window,
    and the rule does hold back compactions or re-masks."""
    skipped = held = 0
    for window in (16_000, 32_000):
        config = one_mark(context_window=window, min_compaction_gain_tokens=4_000)
        for name, messages in sorted(traces.items()):
            session = DomainSession(config, summarizer=ExtractiveSummarizer())
            for message in [*messages, None]:
                if message is None or (message.role == "assistant" and session.state.last_seq):
                    view = session.step()
                    assert view.view_tokens <= window, (name, window, view.through_seq)
                    held += session.state.mask_count < session.state.mask_target()
                if message is not None:
                    session.append(message)
            skipped += sum(result.reason == "gain_too_small" for result in session.results)
    assert skipped + held > 0
