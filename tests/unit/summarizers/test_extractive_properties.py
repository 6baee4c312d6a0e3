"""Properties of ExtractiveSummarizer over generated conversations."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from ctxledger.messages import Message, ToolCall
from ctxledger.summarizers import ExtractiveSummarizer, SummaryRequest

summarize = ExtractiveSummarizer()

# Fragments that exercise every extractor and the summary's own syntax (headings, bullets).
FRAGMENTS = [
    "src/app/main.py", "./run.sh", "/usr/lib/x.so", "README.md", "Traceback (most recent call "
    "last):\n  File \"a.py\"\nValueError: bad", "Error: boom", "FAILED tests/t.py::x", "TODO fix",
    "I decided to", "`load_all()`", "#123", "## Files", "- item", "Summary of messages 1-3",
    "Latest: x", "(x3)", "Focus: y", "  indented", "\n", "\n\n", "<returncode>1</returncode>",
    "cat <<'EOF' > f.py\nx\nEOF", "ÿ∂≈", "   ",
]
text = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=40)), max_size=12
).map(" ".join)


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    """Conversations of users, assistants with shell and editor calls, and tool results."""
    messages: list[Message] = []
    for index in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["user", "assistant", "call", "system"]))
        if kind == "call":
            command = draw(text)
            tool = draw(st.sampled_from(["bash", "Read", "str_replace_editor"]))
            arguments = json.dumps({"command": command, "path": draw(text)})
            call = ToolCall(f"c{index}", tool, arguments)
            messages.append(Message.assistant(draw(text), [call]))
            messages.append(Message.tool(draw(text), call.id, call.name))
        else:
            messages.append(Message(role=kind, content=draw(text)))
    start = draw(st.integers(1, 1000))
    return [m.with_seq(start + i) for i, m in enumerate(messages)]


requests = st.builds(
    SummaryRequest.of,
    conversations(),
    previous_summary=st.none() | text,
    focus=st.none() | text,
    max_chars=st.integers(-5, 3000),
)


@given(requests)
def test_never_longer_than_max_chars(request: SummaryRequest) -> None:
    """Whatever the input, the summary fits max_chars."""
    assert len(summarize(request)) <= max(request.max_chars, 0)


@given(requests)
def test_same_request_same_summary(request: SummaryRequest) -> None:
    """The summary is a pure function of the request."""
    assert summarize(request) == ExtractiveSummarizer()(request)


@given(conversations(), conversations(), st.none() | text, st.integers(1, 3000))
def test_chained_summaries_stay_within_budget(
    first: list[Message], second: list[Message], focus: str | None, max_chars: int
) -> None:
    """Merging a summary into the next one never grows past the budget."""
    previous = summarize(SummaryRequest.of(first, focus=focus, max_chars=max_chars))
    merged = summarize(SummaryRequest.of(second, previous_summary=previous, max_chars=max_chars))
    assert len(merged) <= max_chars


@given(conversations(), st.none() | text, st.integers(120, 3000))
def test_merging_nothing_new_is_a_fixpoint(
    messages: list[Message], focus: str | None, max_chars: int
) -> None:
    """A summary merged with no new messages (same focus and budget) comes back unchanged."""
    summary = summarize(SummaryRequest.of(messages, focus=focus, max_chars=max_chars))
    again = SummaryRequest.of([], previous_summary=summary, focus=focus, max_chars=max_chars)
    assert summarize(again) == summary
