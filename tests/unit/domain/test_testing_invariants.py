"""ctxledger.testing.check_view_invariants: passes valid views, names each broken invariant."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import pytest

from ctxledger import Config, Message
from ctxledger.domain import (
    CharTokenizer,
    ModelView,
    build_view,
    mask_text,
    message_chars,
    session_tokenizer,
    truncate_text,
)
from ctxledger.errors import ContextOverflowError
from ctxledger.testing import DomainSession, check_floor_refusal, check_view_invariants

from .builders import call, session, step

CONFIG = Config(context_window=1000)


def _history() -> list[Message]:
    s = session(
        Message.system("rules"),
        Message.user("go"),
        Message.assistant("", [call("c1"), call("c2")]),
        Message.tool("one", "c1"),
        Message.tool("two" * 100, "c2"),
        Message.assistant("done"),
    )
    return list(s.state.history)


def _view(messages: Sequence[Message], **fields: object) -> ModelView:
    values: dict[str, object] = {
        "mode": "full_history",
        "checkpoint_id": None,
        "estimated_tokens": 0,
        "view_hash": "",
        "through_seq": 6,
    }
    values.update(fields)
    return ModelView(messages=tuple(messages), **values)  # type: ignore[arg-type]


def _broken(invariant: str, history: Sequence[Message], view: ModelView, **kw: object) -> None:
    with pytest.raises(AssertionError, match=f"'{invariant}'"):
        check_view_invariants(history, view, kw.pop("config", CONFIG), **kw)  # type: ignore[arg-type]


def test_a_built_view_passes() -> None:
    """A view from build_view satisfies every invariant."""
    s = session(*_history())
    check_view_invariants(s.state.history, build_view(s.state, tokenizer=CharTokenizer()), CONFIG)


def test_masked_and_truncated_results_pass() -> None:
    """A masked or truncated result counts as shown."""
    history = _history()
    shown = list(history)
    shown[3] = msgspec.structs.replace(history[3], content=mask_text("bash"))
    shown[4] = msgspec.structs.replace(
        history[4], content=truncate_text(history[4].content, 120, 5)
    )
    check_view_invariants(history, _view(shown), CONFIG)


def test_result_without_its_call_is_a_split_tool_call() -> None:
    """Dropping the assistant message leaves orphan results."""
    history = _history()
    _broken("split_tool_call", history, _view([*history[:2], *history[3:]]))


def test_unanswered_call_followed_by_more_is_a_split_tool_call() -> None:
    """Dropping one result of a non-final step splits the call from its result."""
    history = _history()
    _broken("split_tool_call", history, _view([*history[:3], history[4], history[5]]))


def test_pending_last_step_is_allowed() -> None:
    """Calls of the final step may still be unanswered."""
    history = _history()[:3]
    check_view_invariants(history, _view(history, through_seq=3), CONFIG)


def test_missing_uncovered_message_is_lost() -> None:
    """A message neither shown nor covered by a summary is lost."""
    history = _history()
    _broken("lost_message", history, _view([*history[:5]]))


def test_covered_message_may_be_absent() -> None:
    """Messages up to covers_through_seq may be replaced by the summary."""
    history = _history()
    summary = Message(role="summary", content="S", metadata={"covers_through_seq": 5})
    view = _view([history[0], summary, history[5]], mode="compact_checkpoint", checkpoint_id="cp")
    check_view_invariants(history, view, CONFIG.replace(keep_first_request=False))


def test_view_over_the_window_is_flagged() -> None:
    """A view above the window whose retained minimum would fit breaks over_window."""
    history = [m for m in session(*[Message.user("u" * 600) for _ in range(6)]).state.history]
    _broken("over_window", history, _view(history), config=Config(context_window=1000))


def test_view_over_the_window_from_one_huge_last_step_is_allowed() -> None:
    """If the last step alone exceeds the window, the view may too."""
    history = session(Message.user("go"), Message.assistant("a" * 9000)).state.history
    check_view_invariants(history, _view(history, through_seq=2), CONFIG)


def test_history_with_a_seq_gap_is_altered() -> None:
    """History must be numbered 1, 2, 3, ..."""
    history = _history()
    broken = [*history[:2], history[3]]
    _broken("history_altered", broken, _view(broken))


def test_history_differing_from_the_model_is_altered() -> None:
    """expected_history must match exactly."""
    history = _history()
    expected = [*history[:-1], msgspec.structs.replace(history[-1], content="other")]
    _broken("history_altered", history, _view(history), expected_history=expected)


def test_changed_content_is_altered() -> None:
    """A user message shown with different text breaks altered_message."""
    history = _history()
    shown = [*history[:1], msgspec.structs.replace(history[1], content="gone"), *history[2:]]
    _broken("altered_message", history, _view(shown))


def test_duplicated_message_is_flagged() -> None:
    """A seq shown twice breaks duplicate_message."""
    history = _history()
    _broken("duplicate_message", history, _view([*history, history[-1]]))


def test_head_must_open_the_view() -> None:
    """The system preamble first, verbatim."""
    history = _history()
    _broken("head_not_first", history, _view([*history[1:], history[0]]))


def test_pinned_message_must_be_shown() -> None:
    """A pinned message cannot hide behind the summary."""
    history = _history()
    summary = Message(role="summary", content="S", metadata={"covers_through_seq": 5})
    view = _view([history[0], summary, history[5]], mode="compact_checkpoint", checkpoint_id="cp")
    _broken("pinned_not_shown", history, view, pins={2})


def test_two_summaries_are_flagged() -> None:
    """At most one summary, consistent with the mode."""
    history = _history()
    summary = Message(role="summary", content="S", metadata={"covers_through_seq": 0})
    _broken("summary_placement", history, _view([summary, *history, summary]))


def test_unknown_seq_is_flagged() -> None:
    """A view message must name a history message."""
    history = _history()
    _broken("unknown_message", history, _view([*history, Message.user("x").with_seq(99)]))


def test_window_check_can_be_skipped() -> None:
    """check_window=False accepts an over-window view (served after a failed summary)."""
    history = [m for m in session(*[Message.user("u" * 600) for _ in range(6)]).state.history]
    check_view_invariants(history, _view(history), Config(context_window=1000), check_window=False)


def test_pinned_exchange_counts_whole_towards_the_minimum() -> None:
    """Pinning one result keeps its call's sibling results too; over the window is then allowed."""
    s = session(Message.user("go"), Message.assistant("", [call("c1"), call("c2")]))
    s.append_many([Message.tool("a" * 1500, "c1"), Message.tool("b" * 1500, "c2")])
    s.append_many([Message.user("next"), Message.assistant("ok")])
    history = s.state.history
    view = _view(history, through_seq=6)
    check_view_invariants(history, view, Config(context_window=1000), pins={3})
    _broken("over_window", history, view, config=Config(context_window=1000))


def _task_view(task_content: str, **config: object) -> tuple[list[Message], ModelView, Config]:
    """History: rules, a long task, one step, "done"; a view with the task covered and kept."""
    history = _history()
    history[1] = msgspec.structs.replace(history[1], content="t" * 3000)
    summary = Message(role="summary", content="S", metadata={"covers_through_seq": 5})
    task = msgspec.structs.replace(history[1], content=task_content)
    view = _view(
        [history[0], task, summary, history[5]], mode="compact_checkpoint", checkpoint_id="cp"
    )
    return history, view, Config(context_window=1000, **config)  # type: ignore[arg-type]


def test_truncated_kept_first_request_passes() -> None:
    """Under keep_first_request the covered task may be shown truncated in the pinned slot."""
    history, view, config = _task_view(truncate_text("t" * 3000, 600, 2))
    check_view_invariants(history, view, config)


def test_truncated_first_request_is_altered_when_the_flag_is_off_or_it_is_pinned() -> None:
    """Only the kept request may be cut: not with the flag off, nor when pinned explicitly."""
    history, view, config = _task_view(truncate_text("t" * 3000, 600, 2))
    _broken("altered_message", history, view, config=config.replace(keep_first_request=False))
    _broken("altered_message", history, view, config=config, pins={2})


def test_truncated_later_user_message_is_altered() -> None:
    """Another user message is never truncated."""
    history = session(Message.user("go"), Message.user("u" * 3000)).state.history
    cut = msgspec.structs.replace(history[1], content=truncate_text("u" * 3000, 600, 2))
    _broken("altered_message", history, _view([history[0], cut], through_seq=2))


def test_covered_first_request_must_be_kept() -> None:
    """Under keep_first_request a covered task cannot hide behind the summary."""
    history, view, config = _task_view("t" * 3000)
    without = _view(
        [view.messages[0], *view.messages[2:]], mode="compact_checkpoint", checkpoint_id="cp"
    )
    _broken("pinned_not_shown", history, without, config=config)


def test_kept_first_request_counts_towards_the_minimum() -> None:
    """The pinned slot is part of the retained minimum; over the window is then allowed."""
    history, view, config = _task_view("t" * 3000)
    check_view_invariants(history, view, config)


def test_floor_refusal_counts_in_the_sessions_calibrated_tokens() -> None:
    """A refusal is judged in the tokens the session counts with: once usage reports taught
    the default tokenizer a denser ratio, a newest step under the window in ``chars // 3`` can
    be over it. Found by the state machine (``test_machine_with_small_chunks``), where it
    depended on whether a usage report was paired with a view, which the background's timing
    decides."""
    config = Config(context_window=2000, compression_threshold=0.5, calibrate_after_reports=3)
    s = DomainSession(config)
    s.append(Message.system("rules"))
    s.append(Message.user("go"))
    for n, size in enumerate((150, 600, 300, 900, 450)):
        s.append_many(step(f"c{n}", "x" * size))
        view = s.step()
        chars = sum(message_chars(m) for m in view.messages)
        s.record_usage(chars // 2, 10)  # two characters a token: denser than // 3
    tokenizer = session_tokenizer(s.state, CharTokenizer())
    assert type(tokenizer) is not CharTokenizer  # calibrated
    s.append(Message.assistant("y" * 4_800))  # 1,600 tokens by // 3, 2,400 calibrated
    with pytest.raises(ContextOverflowError) as refused:
        s.step()
    check_floor_refusal(s.state, refused.value, tokenizer=CharTokenizer())
