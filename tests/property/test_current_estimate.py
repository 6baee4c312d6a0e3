"""The estimate a background measure takes without assembling the view equals the draft's.

``current_estimate`` (what budget's ``Measure`` and a background decision read) counts the view's
tail from the tail the last view or estimate kept (``SessionState.tail_memo``), plus the messages
appended since and the tool results the masking boundary passed meanwhile; every other event
that may change how a message is shown starts the count afresh (``SessionState.shown_epoch``).
After every command of a random session (appends of every kind, pins, usage, retractions,
clears, compactions, reverts, Config changes, served views, prepared summaries) it must equal
the estimate of the view drafted afresh, for the default estimator and a calibrated one.

The candidates of a new checkpoint's fact block are kept on the state the same way
(``SessionState.fact_memo``, by shown epoch, last seq and checkpoint): a checkpoint made after
any command has the block it has when nothing is kept.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
from hypothesis import given, note
from hypothesis import strategies as st

from ctxledger import Checkpoint, Config, Message, ToolCall
from ctxledger.checkpoints import Remask
from ctxledger.config import upcast_config
from ctxledger.domain import (
    CharTokenizer,
    SessionState,
    current_estimate,
    draft_view,
    remask_of,
    render_policy,
    tail_chars,
    view_chars,
)
from ctxledger.domain.calibration import CalibratedTokenizer, session_tokenizer
from ctxledger.domain.compaction import finish_checkpoint, finished_with_draft
from ctxledger.domain.projection import tail_messages
from ctxledger.domain.render import render_unmasked
from ctxledger.domain.view import ModelView
from ctxledger.errors import CtxLedgerError
from ctxledger.events import MessageAppended
from ctxledger.testing import DomainSession

BASE = Config(
    context_window=4_000, min_retain_rounds=1, micro_keep_recent=2, micro_batch=2,
    micro_min_chars=10,
)  # fmt: skip
GAIN_FIELDS = {
    "context_window": 4_000, "min_compaction_gain_tokens": 40, "micro_keep_recent": 1,
    "micro_batch": 1, "micro_min_chars": 5,
}  # fmt: skip
CONFIGS = [
    BASE,
    BASE.replace(micro_batch=1, micro_preserve_tools=("keep",), keep_first_request=True),
    BASE.replace(prepare_threshold=0.0, max_tool_result_chars=120),
    # The gain rule is a one-mark Config's (schema 3, as recorded before the two marks).
    msgspec.convert(upcast_config(GAIN_FIELDS), Config),
]
ACTIONS = [
    "user", "tool_step", "tool_step", "tool_step", "system", "pin", "usage", "retract",
    "clear", "compact", "revert", "config", "view", "background", "step",
]  # fmt: skip


def _fresh(state: SessionState, tokenizer: Any) -> int:
    """The estimate of the view drafted with no memo of any earlier draft."""
    return draft_view(_scratch(state), tokenizer=tokenizer).estimated_tokens


def _scratch(state: SessionState) -> SessionState:
    """A copy of ``state`` that keeps nothing of its earlier drafts."""
    scratch = state.copy()
    scratch.draft_memo = None
    scratch.tail_memo = None
    scratch.view_encodings = None
    scratch.render_cache = {}
    return scratch


def _tool_step(session: DomainSession, data: st.DataObject, n: int) -> None:
    names = data.draw(st.lists(st.sampled_from(["bash", "keep", "read"]), min_size=1, max_size=3))
    calls = [ToolCall(f"t{n}_{i}", name, '{"a": 1}') for i, name in enumerate(names)]
    session.append(Message.assistant(f"calling {n}", calls))
    for call in calls:
        size = data.draw(st.sampled_from([3, 30, 200, 900]))
        # Paths, so that fact blocks have facts to list (and to leave out once shown).
        session.append(Message.tool(f"src/m{n % 7}_{size}.py " + "r" * size, call.id, call.name))


def _act(session: DomainSession, action: str, data: st.DataObject, n: int) -> None:
    state = session.state
    if action == "user":
        session.append(
            Message.user(f"fix src/m{n % 7}_3.py " + "u" * data.draw(st.integers(1, 400)))
        )
    elif action == "system":
        session.append(Message.system(f"note {n}"))
    elif action == "tool_step":
        _tool_step(session, data, n)
    elif action == "pin" and state.last_seq:
        session.pin(data.draw(st.integers(1, state.last_seq)))
    elif action == "usage" and state.last_seq:
        session.record_usage(data.draw(st.integers(100, 3_000)), 10)
    elif action == "retract":
        session.retract_last()
    elif action == "clear":
        session.clear()
    elif action == "compact":
        session.compact()
    elif action == "revert":
        session.revert_compaction()
    elif action == "config":
        session.change_config(data.draw(st.sampled_from(CONFIGS)))
    elif action == "view":
        session.build_model_view()
    elif action == "background":
        session.wait_background()
    elif action == "step":
        session.step([Message.user("s" * data.draw(st.integers(1, 300)))])


def _commands(session: DomainSession, data: st.DataObject) -> Iterator[SessionState]:
    """Run 5 to 40 random commands on ``session`` (after a system message); its state after
    each."""
    session.append(Message.system("you are a test"))
    for n in range(data.draw(st.integers(5, 40))):
        action = data.draw(st.sampled_from(ACTIONS))
        note(action)
        # A refusal (nothing to retract, an overflow...) leaves the state as it was.
        with contextlib.suppress(CtxLedgerError):
            _act(session, action, data, n)
        yield session.state


@given(config=st.sampled_from(CONFIGS), calibrated=st.booleans(), data=st.data())
def test_the_estimate_without_a_view_is_the_drafted_one(
    config: Config, calibrated: bool, data: st.DataObject
) -> None:
    tokenizer = CalibratedTokenizer(2.5) if calibrated else CharTokenizer()
    session = DomainSession(config, tokenizer=tokenizer)
    kept = 0
    for state in _commands(session, data):
        memo = state.tail_memo
        assert current_estimate(state, tokenizer=tokenizer) == _fresh(state, tokenizer)
        if memo is not None and memo[0][0] == state.shown_epoch:
            kept += 1
        active = state.active_checkpoint
        cut = active.retain_from_seq if active is not None else 1
        policy = render_policy(state)
        assert tail_chars(state, cut, policy) == view_chars(list(tail_messages(state, cut, policy)))
    note(f"memo reused {kept} times")


@given(config=st.sampled_from(CONFIGS), data=st.data())
def test_a_checkpoint_made_after_any_command_has_the_block_made_afresh(
    config: Config, data: st.DataObject
) -> None:
    tokenizer = CharTokenizer()
    session = DomainSession(config.replace(fact_index_chars=400), tokenizer=tokenizer)
    kept = 0
    for state in _commands(session, data):
        active = state.active_checkpoint
        first = active.retain_from_seq + 1 if active is not None else state.cleared_through + 2
        if first > state.last_seq + 1:
            continue
        # Few cuts and one summary: the same checkpoint is probed again after later commands.
        cut = data.draw(st.sampled_from(sorted({first, min(first + 3, state.last_seq + 1)})))
        checkpoint = Checkpoint(
            id="probe", summary="probe summary of src/m1_30.py", retain_from_seq=cut,
            covers_through_seq=cut - 1, reason="manual",
        )  # fmt: skip
        scratch = state.copy()
        scratch.fact_memo = None
        fresh = finish_checkpoint(scratch, checkpoint, fact_chars=400, tokenizer=tokenizer)
        memo = state.fact_memo
        if memo is not None and memo[0][2] == checkpoint:
            kept += 1
        made = finish_checkpoint(state, checkpoint, fact_chars=400, tokenizer=tokenizer)
        assert made == fresh
        # What the background reads as the estimate of the view a prepared summary gives, and
        # the draft it plans from.
        drafted = draft_view(state, tokenizer=tokenizer, checkpoint=made)
        assert made.tokens_after == drafted.estimated_tokens
        assert finished_with_draft(state, checkpoint, fact_chars=400, tokenizer=tokenizer) == (
            made,
            drafted,
        )
        assert finish_checkpoint(state, checkpoint, fact_chars=200, tokenizer=tokenizer) == (
            finish_checkpoint(scratch, checkpoint, fact_chars=200, tokenizer=tokenizer)
        )
    note(f"memo reused {kept} times")


@given(config=st.sampled_from(CONFIGS), calibrated=st.booleans(), data=st.data())
def test_the_view_drafted_from_the_kept_tail_is_the_view_drafted_afresh(
    config: Config, calibrated: bool, data: st.DataObject
) -> None:
    """``draft_view`` extends the tail it kept (``SessionState.tail_memo``) by the messages
    appended since: after every command the draft, its characters and the view's hash are
    those of a draft made with nothing kept. The re-mask a served view records is counted
    from the draft's characters as the messages count it."""
    tokenizer = CalibratedTokenizer(2.5) if calibrated else CharTokenizer()
    session = DomainSession(config, tokenizer=tokenizer)
    kept = remasks = 0
    for state in _commands(session, data):
        memo = state.tail_memo
        if memo is not None and memo[0][0] == state.shown_epoch:
            kept += 1
        scratch = _scratch(state)
        made = draft_view(state, tokenizer=tokenizer)
        fresh = draft_view(scratch, tokenizer=tokenizer)
        assert made == fresh
        view = made.view(state)
        assert view == fresh.view(scratch)
        remask = remask_of(state, view, tokenizer=tokenizer, chars=made.chars)
        assert remask == remask_of(state, view, tokenizer=tokenizer)
        assert remask == _remask_walking_the_whole_view(state, view, tokenizer)
        remasks += remask is not None
    note(f"tail reused {kept} times, {remasks} re-masks")


def _remask_walking_the_whole_view(
    state: SessionState, view: ModelView, tokenizer: Any
) -> Remask | None:
    """``remask_of`` as it was first written: every message of the view looked at, every
    count made on the messages."""
    start, stop = state.served_masked, state.masked_results()
    if (
        stop <= start
        or state.last_view_hash is None
        or view.checkpoint_id != state.served_checkpoint_id
    ):
        return None
    candidates = set(state.tool_seqs[max(start, state.tool_seqs.before) : stop])
    policy = render_policy(state)
    shown_before = list(view.messages)
    first = None
    results = 0
    for index, message in enumerate(view.messages):
        seq = message.seq
        if message.role != "tool" or seq not in candidates:
            continue
        assert seq is not None
        unmasked = render_unmasked(state, policy, state.history[seq - 1])
        if unmasked.content == message.content:
            continue
        shown_before[index] = unmasked
        results += 1
        first = index if first is None else first
    if first is None:
        return None
    counting = session_tokenizer(state, tokenizer)
    return Remask(
        results=results,
        first_seq=view.messages[first].seq or 0,
        tokens_before=counting.count_messages(shown_before),
        tokens_after=view.view_tokens,
        prefix_kept_tokens=counting.count_messages(view.messages[:first]),
    )


def test_a_re_mask_in_the_pinned_slot_is_counted() -> None:
    """A pinned call brings its results into the view's pinned slot, before the summary; they
    are not pinned themselves and are masked like any other: the re-mask counts them. (Found
    by the property above in a run of 60 examples: the walk from the view's end stopped at the
    summary.)"""
    tokenizer = CharTokenizer()
    session = DomainSession(BASE, tokenizer=tokenizer)
    session.append(Message.system("you are a test"))
    session.append(Message.user("fix src/m0_3.py u"))
    _tool_step_of(session, 1)
    session.append(Message.user("fix src/m2_3.py u"))
    session.compact()
    session.pin(3)  # the call of step 1: its two results (seqs 4 and 5) join the slot
    session.step([Message.user("s")])
    _tool_step_of(session, 6)  # the boundary passes seqs 4 and 5
    state = session.state
    made = draft_view(state, tokenizer=tokenizer)
    view = made.view(state)
    remask = remask_of(state, view, tokenizer=tokenizer, chars=made.chars)
    assert remask is not None and (remask.results, remask.first_seq) == (2, 4)
    assert remask == _remask_walking_the_whole_view(state, view, tokenizer)
    assert remask == remask_of(state, view, tokenizer=tokenizer)


def _tool_step_of(session: DomainSession, n: int) -> None:
    calls = [ToolCall(f"t{n}_{i}", "bash", '{"a": 1}') for i in range(2)]
    session.append(Message.assistant(f"calling {n}", calls))
    for call in calls:
        session.append(Message.tool(f"src/m{n % 7}_3.py rrr", call.id, call.name))


def _asked_after_one_more_step(
    measure: Callable[[SessionState], Any],
) -> tuple[Any, Any, list[int], SessionState]:
    """``measure`` of a 30-step session, then of the same session one tool step later, the
    render-cache entries the second one asked for, and the state."""
    session = DomainSession(BASE)
    for n in range(30):
        _tool_step_fixed(session, n)
    state = session.state
    first = measure(state)
    _tool_step_fixed(session, 99)
    asked: list[int] = []

    class Spy(dict[int, Any]):
        def get(self, key: int, default: Any = None) -> Any:
            asked.append(key)
            return super().get(key, default)

    state.render_cache = Spy(state.render_cache)
    return first, measure(state), asked, state


def test_the_view_renders_only_what_was_appended_since() -> None:
    """After appends alone a view's tail is not walked again: a message the last view
    rendered is not rendered again (its render-cache entry is not asked for)."""
    tokenizer = CharTokenizer()
    first, second, asked, state = _asked_after_one_more_step(
        lambda state: draft_view(state, tokenizer=tokenizer)
    )
    assert second == draft_view(_scratch(state), tokenizer=tokenizer)
    assert second.messages[: len(first.messages)] == first.messages
    assert 0 < len(asked) <= 4, asked


def test_the_memo_counts_only_what_was_appended_since() -> None:
    """After appends alone the tail is not walked again: a message the memo counted is not
    rendered again (its render-cache entry is not asked for)."""
    tokenizer = CharTokenizer()
    first, second, asked, state = _asked_after_one_more_step(
        lambda state: current_estimate(state, tokenizer=tokenizer)
    )
    assert second == _fresh(state, tokenizer) > first
    # The step's own result, and the results the boundary passed when it moved: not all 30.
    assert 0 < len(asked) <= 4, asked


def _tool_step_fixed(session: DomainSession, n: int) -> None:
    call = ToolCall(f"f{n}", "bash", "{}")
    session.append(Message.user(f"do {n}"))
    session.append(Message.assistant("", [call]))
    session.append(Message.tool("x" * 300, call.id, "bash"))


def test_a_copy_of_the_state_never_changes_the_tail_the_state_kept() -> None:
    """The kept tail is brought up to date in place: a copy of the state (what
    ``Session.state()`` hands out) starts without it, so the copy's drafts, on any thread,
    leave the original's as they were."""
    tokenizer = CharTokenizer()
    session = DomainSession(BASE)
    for n in range(30):
        _tool_step_fixed(session, n)
    state = session.state
    before = current_estimate(state, tokenizer=tokenizer)
    kept = state.tail_memo
    assert kept is not None
    copy = state.copy()
    assert copy.tail_memo is None and copy.fact_memo is None
    for n in range(30, 40):  # the copy grows, and its masking boundary moves
        copy.apply(MessageAppended(message=Message.user(f"more {n}").with_seq(copy.last_seq + 1)))
        current_estimate(copy, tokenizer=tokenizer)
    assert state.tail_memo is kept
    assert kept[3] == list(tail_messages(_scratch(state), kept[0][1] + 1))
    assert current_estimate(state, tokenizer=tokenizer) == before == _fresh(state, tokenizer)
