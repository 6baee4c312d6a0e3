"""An agent's step as one decision: ``ctxledger.domain.step.decide_step`` and
``DomainSession.step`` (issue 28)."""

from __future__ import annotations

import itertools

import pytest

from ctxledger import BudgetExceededError, Message
from ctxledger.domain import CharTokenizer, ReportedUsage
from ctxledger.domain.step import Step, decide_step
from ctxledger.errors import InvalidArgumentError, InvalidMessageError
from ctxledger.events import (
    CheckpointCreated,
    CompactionStarted,
    MessageAppended,
    UsageReported,
    ViewServed,
)

from .builders import rounds, session, step

TIGHT = {"context_window": 2_000, "min_retain_rounds": 1, "prepare_threshold": 0.0}


def _decide(s: object, messages: list[Message], pending: str = "") -> object:
    ids = itertools.count(1)
    return decide_step(
        s.state,  # type: ignore[attr-defined]
        Step(messages=tuple(messages), pending=pending),
        tokenizer=CharTokenizer(),
        new_id=lambda: f"x{next(ids)}",
        now=lambda: 1.0,
    )


def test_the_view_is_decided_on_the_state_with_the_appends_folded() -> None:
    """decide_step folds the step's appends and serves the view that ends with them."""
    s = session(Message.user("one"), Message.assistant("two"))
    stepped = _decide(s, [Message.user("three"), Message.assistant("four")])
    assert stepped.seqs == (3, 4)  # type: ignore[attr-defined]
    assert [type(e) for e in stepped.appended.events] == [MessageAppended, MessageAppended]  # type: ignore[attr-defined]
    assert s.state.last_seq == 4  # folded ahead of the log
    view = stepped.decision.view  # type: ignore[attr-defined]
    assert view is not None and view.through_seq == 4
    assert [m.content for m in view.messages] == ["one", "two", "three", "four"]
    assert [type(e) for e in stepped.decision.events] == [ViewServed]  # type: ignore[attr-defined]


def test_a_refused_message_leaves_the_state_as_it_was() -> None:
    """A message that does not fit raises before anything is folded."""
    s = session(Message.user("one"))
    before = s.state.to_snapshot()
    with pytest.raises(InvalidMessageError, match="never made"):
        _decide(s, [Message.assistant("ok"), Message.tool("out", "nope", "bash")])
    assert s.state.to_snapshot() == before


def test_metadata_the_log_would_refuse_is_refused_before_the_fold() -> None:
    """Metadata that would not read back is refused as the log refuses it, state unchanged."""
    s = session(Message.user("one"))
    before = s.state.to_snapshot()
    bad = Message(role="assistant", content="x", metadata={"k": {1: 2}})
    with pytest.raises(InvalidMessageError, match="message 1 of the batch: the message metadata"):
        _decide(s, [Message.assistant("fine"), bad])
    assert s.state.to_snapshot() == before


def test_step_records_what_append_many_then_prepare_step_record() -> None:
    """On a DomainSession, step == append_many + prepare_step, compactions included, with the
    seqs on the view."""
    stepped = session(**TIGHT)
    twin = session(**TIGHT)
    for index in range(30):
        batch = [Message.user(f"ask {index} " + "q" * 150), *step(f"c{index}", "o" * 250)]
        batch.append(Message.assistant(f"done {index}"))
        view = stepped.step(batch, pending="p" * (index % 3) * 40)
        seqs = twin.append_many(batch)
        expected = twin.prepare_step("p" * (index % 3) * 40)
        assert view.appended_seqs == tuple(seqs)
        assert view.view_hash == expected.view_hash
        assert stepped.events == twin.events
    assert any(isinstance(e, CheckpointCreated) for e in stepped.events)
    assert any(isinstance(e, CompactionStarted) for e in stepped.events)
    assert stepped.results == twin.results
    assert stepped.replay() == stepped.state


def test_step_without_messages_is_prepare_step() -> None:
    """step() appends nothing and serves the view; its appended_seqs are empty."""
    s = session(*rounds(2))
    view = s.step()
    assert view.appended_seqs == () and view.through_seq == 4
    assert isinstance(s.events[-1], ViewServed)


def test_a_view_refused_for_the_budget_keeps_the_appends() -> None:
    """Past max_total_tokens the step's messages are recorded, then the view is refused."""
    s = session(Message.user("one"), max_total_tokens=100)
    s.record_usage(90, 20)
    with pytest.raises(BudgetExceededError):
        s.step([Message.assistant("two")])
    assert [m.content for m in s.history()] == ["one", "two"]


def test_step_checks_its_arguments() -> None:
    """Text instead of messages, or pending that is not text, is refused by name."""
    s = session(Message.user("one"))
    with pytest.raises(InvalidMessageError, match="sequence of Messages, got str"):
        s.step("pending text")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        s.step([Message.assistant("two")], pending=3)  # type: ignore[arg-type]
    assert s.state.last_seq == 1


def _decide_with_usage(s: object, messages: list[Message], usage: ReportedUsage) -> object:
    return decide_step(
        s.state,  # type: ignore[attr-defined]
        Step(messages=tuple(messages), usage=usage),
        tokenizer=CharTokenizer(),
        new_id=lambda: "x1",
        now=lambda: 1.0,
    )


def test_a_steps_usage_goes_first_measured_before_its_messages() -> None:
    """``Step.usage``: its report leads the appends, measured through the seq before them; the
    view is decided with it folded; a usage alone is new input (the reactive attempts restart)."""
    s = session(Message.user("one"))
    usage = ReportedUsage(prompt_tokens=700, completion_tokens=9)
    stepped = _decide_with_usage(s, [Message.assistant("two"), Message.user("three")], usage)
    events = stepped.appended.events  # type: ignore[attr-defined]
    assert [type(e) for e in events] == [UsageReported, MessageAppended, MessageAppended]
    assert (events[0].prompt_tokens, events[0].through_seq) == (700, 1)
    assert stepped.seqs == (2, 3)  # type: ignore[attr-defined]
    assert s.state.usage is not None and (
        s.state.usage.prompt_tokens,
        s.state.usage.through_seq,
    ) == (700, 1)
    assert Step(usage=usage).fresh and not Step().fresh


def test_a_refused_message_with_usage_records_neither() -> None:
    """A step whose message does not fit raises before its usage is folded either."""
    s = session(Message.user("one"))
    before = s.state.to_snapshot()
    with pytest.raises(InvalidMessageError, match="never made"):
        _decide_with_usage(s, [Message.tool("out", "nope", "bash")], ReportedUsage(prompt_tokens=5))
    assert s.state.to_snapshot() == before
