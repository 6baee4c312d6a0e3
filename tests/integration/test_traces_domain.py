"""Every real trace replayed through the pure domain with a 32,000-token window.

An agent calls the model right before each assistant message: that is where a step is prepared
(compact if needed, then serve the view). Every served view must keep the invariants and fit the
window; the log must replay to the same state.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from ctxledger import Config, Message
from ctxledger.domain import max_tool_result_chars
from ctxledger.testing import DomainSession, check_view_invariants, digest_summarizer

try:
    from ctxledger.summarizers.extractive import ExtractiveSummarizer
except ImportError:  # until the offline summariser lands, a small deterministic one stands in
    ExtractiveSummarizer = None

WINDOW = 32_000
CONFIGS = {
    "defaults": Config(context_window=WINDOW),
    # Masking off and seed batching: compaction alone must keep views inside the window.
    "no-masking": Config(context_window=WINDOW, micro_keep_recent=1_000_000, micro_batch=1),
    # The provider counts 1,500 tokens of tool schemas the view does not hold.
    "usage-overhead": Config(context_window=WINDOW, min_retain_rounds=2),
}


def _summarizer() -> Any:
    return ExtractiveSummarizer() if ExtractiveSummarizer is not None else digest_summarizer


def _replay(messages: list[Message], config: Config, *, overhead: int | None) -> DomainSession:
    session = DomainSession(config, summarizer=_summarizer())
    model: list[Message] = []
    for message in [*messages, None]:
        if message is None or (message.role == "assistant" and session.state.last_seq):
            view = session.step()
            check_view_invariants(
                session.state.history,
                view,
                config,
                checkpoint=session.state.active_checkpoint,
                pins=session.state.pins,
                expected_history=model,
            )
            assert view.view_tokens <= WINDOW, (view.through_seq, view.view_tokens)
            if overhead is not None:
                session.record_usage(view.view_tokens + overhead)
        if message is not None:
            model += session.state.check_append([message])
            session.append(message)
    return session


@pytest.mark.traces
@pytest.mark.parametrize("variant", sorted(CONFIGS))
def test_traces_fit_the_window_and_keep_the_invariants(
    variant: str, traces: dict[str, list[Message]]
) -> None:
    """No served view exceeds the window; every invariant holds; replay rebuilds the state."""
    config = CONFIGS[variant]
    outcomes: Counter[str] = Counter()
    for name, messages in sorted(traces.items()):
        overhead = 1500 if variant == "usage-overhead" else None
        session = _replay(messages, config, overhead=overhead)
        assert session.replay().to_snapshot() == session.state.to_snapshot(), name
        outcomes.update(result.reason for result in session.results)
    assert outcomes["compacted"] > 0
    assert outcomes["summary_unavailable"] == 0


@pytest.mark.traces
def test_the_huge_tool_result_is_truncated_in_every_view(traces: dict[str, list[Message]]) -> None:
    """The 868K-character result is never sent whole: it is truncated with a marker naming it."""
    name = "miniswe-gemini3pro-psf-requests-1142"
    if name not in traces:
        pytest.skip(f"{name} is not among the traces")
    session = _replay(traces[name], CONFIGS["no-masking"], overhead=None)
    huge = max(session.state.history, key=lambda m: len(m.content))
    assert len(huge.content) > 800_000
    limit = max_tool_result_chars(session.state.config)
    shown = [m for view in session.views for m in view.messages if m.seq == huge.seq]
    assert shown and all(len(m.content) <= limit for m in shown)
    assert all(f"message seq {huge.seq}" in m.content for m in shown)
