"""The fact block on every real trace: views still fit the window and replay byte for byte.

Each trace is replayed through the pure domain (a step before each assistant message, as in
``test_traces_domain.py``) with the default fact block at 16k, 32k and 128k windows, both with
only what the view shows counted ("visible") and with the provider reporting 1,500 tokens the
view does not hold ("hidden": tool schemas, a system prompt of its own).
"""

from __future__ import annotations

import pytest

from ctxledger import Config, Message
from ctxledger.domain import SessionState, build_view, fact_index_chars
from ctxledger.events import ViewServed
from ctxledger.summarizers import ExtractiveSummarizer
from ctxledger.testing import DomainSession, check_view_invariants

WINDOWS = (16_000, 32_000, 128_000)
HIDDEN_TOKENS = 1500


def _replay(messages: list[Message], config: Config, hidden: int | None) -> DomainSession:
    session = DomainSession(config, summarizer=ExtractiveSummarizer())
    for message in [*messages, None]:
        if message is None or (message.role == "assistant" and session.state.last_seq):
            view = session.step()
            assert view.view_tokens <= config.context_window, (view.through_seq, view.view_tokens)
            check_view_invariants(
                session.state.history,
                view,
                config,
                checkpoint=session.state.active_checkpoint,
                pins=session.state.pins,
            )
            if hidden is not None:
                session.record_usage(view.view_tokens + hidden)
        if message is not None:
            session.append(message)
    return session


def _replayed_hashes(session: DomainSession) -> list[str]:
    """Fold the recorded events afresh; rebuild the view at each ``ViewServed``."""
    state = SessionState.new(session.state.session_id, session.state.config)
    hashes = []
    for event in session.events:
        if isinstance(event, ViewServed):
            view = build_view(state, tokenizer=session.tokenizer)
            assert view.view_hash == event.view_hash
            hashes.append(view.view_hash)
        state.apply(event)
    return hashes


@pytest.mark.traces
@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("hidden", [None, HIDDEN_TOKENS], ids=["visible", "hidden"])
def test_views_with_the_fact_block_fit_and_replay_byte_identical(
    window: int, hidden: int | None, traces: dict[str, list[Message]]
) -> None:
    """No view exceeds the window; every block fits its room; replay rebuilds every view."""
    config = Config(context_window=window)
    assert config.fact_index_chars is None and fact_index_chars(config) > 0  # derived, on
    blocks = 0
    for name, messages in sorted(traces.items()):
        session = _replay(messages, config, hidden)
        assert _replayed_hashes(session) == [view.view_hash for view in session.views], name
        assert session.replay().to_snapshot() == session.state.to_snapshot(), name
        for checkpoint in session.state.checkpoints:
            assert len(checkpoint.facts) <= fact_index_chars(config), (name, checkpoint.id)
            blocks += bool(checkpoint.facts)
    if window < 128_000:
        assert blocks > 0  # the traces compact at this window, and the block is used
