"""run_summarizer: chunked incremental calls, empty answers, errors and the size cap."""

from __future__ import annotations

from typing import Any

import pytest

from ctxledger import Message, SummaryRequest
from ctxledger.domain import CharTokenizer, CompactionPlan, plan_compaction, run_summarizer

from .builders import session


def _plan(
    *, chunk: int = 0, previous: str | None = None, sizes: tuple[int, ...] = (300,) * 6
) -> CompactionPlan:
    messages = tuple(
        Message.user(str(index) * size).with_seq(index + 1) for index, size in enumerate(sizes)
    )
    return CompactionPlan(
        reason="manual",
        retain_from_seq=len(messages) + 1,
        covers_through_seq=len(messages),
        covered=messages,
        previous_summary=previous,
        previous_checkpoint_id=None,
        focus="f",
        max_chars=50,
        chunk_chars=chunk or 100_000,
        estimated_tokens=0,
        threshold=0,
        target_tokens=0,
        planned_tokens=0,
    )


class Recorder:
    """Answers "S<n>" and keeps every request."""

    def __init__(self, answers: list[Any] | None = None) -> None:
        self.requests: list[SummaryRequest] = []
        self.answers = answers

    def __call__(self, request: SummaryRequest) -> Any:
        self.requests.append(request)
        if self.answers is not None:
            return self.answers[len(self.requests) - 1]
        return f"S{len(self.requests)}"


def test_small_input_is_one_call_with_the_previous_summary() -> None:
    """Input within the budget: one call carrying previous summary, focus and max_chars."""
    recorder = Recorder()
    assert run_summarizer(_plan(previous="old"), recorder) == "S1"
    (request,) = recorder.requests
    assert (request.previous_summary, request.focus, request.max_chars) == ("old", "f", 50)
    assert len(request.messages) == 6


def test_large_input_is_summarised_in_chunks_incrementally() -> None:
    """Each chunk is summarised with the previous chunk's summary."""
    recorder = Recorder()
    assert run_summarizer(_plan(chunk=700, previous="old"), recorder) == "S3"
    assert [r.previous_summary for r in recorder.requests] == ["old", "S1", "S2"]
    assert [len(r.messages) for r in recorder.requests] == [2, 2, 2]
    assert [m.seq for r in recorder.requests for m in r.messages] == [1, 2, 3, 4, 5, 6]


def test_every_chunk_fits_the_budget() -> None:
    """No chunk's messages exceed chunk_chars, a single huge message included (truncated)."""
    plan = _plan(chunk=700, sizes=(100, 5000, 100))
    for chunk in plan.chunks():
        assert sum(len(m.content) for m in chunk) <= 700
    assert "message seq 2" in plan.chunks()[1][0].content


def test_none_from_any_chunk_is_none() -> None:
    """One missing chunk summary fails the whole compaction."""
    assert run_summarizer(_plan(chunk=700), Recorder(["S1", None, "S3"])) is None


def test_empty_answer_is_none() -> None:
    """An empty string counts as no summary."""
    assert run_summarizer(_plan(), Recorder([""])) is None


def test_exceptions_propagate() -> None:
    """The caller (the actor) decides what a raising summariser means."""

    def broken(request: SummaryRequest) -> str:
        raise TimeoutError("slow")

    with pytest.raises(TimeoutError):
        run_summarizer(_plan(), broken)


def test_answer_is_cut_to_max_chars() -> None:
    """A longer answer is cut to the reserved room."""
    assert run_summarizer(_plan(), Recorder(["x" * 500])) == "x" * 50


def test_non_string_answer_raises_type_error() -> None:
    """A summariser must return str or None."""
    with pytest.raises(TypeError, match="str or None"):
        run_summarizer(_plan(), Recorder([42]))


def test_auto_chunk_size_is_half_the_window_in_chars() -> None:
    """window 1000 tokens -> 1500 characters per summariser call."""
    s = session(*[Message.user("u" * 100) for _ in range(4)], context_window=1000)
    plan = plan_compaction(s.state, tokenizer=CharTokenizer(), trigger="prompt_too_long")
    assert isinstance(plan, CompactionPlan) and plan.chunk_chars == 1500
