"""Properties of retraction and clearing over generated conversations (issue 18).

A plain list models the conversation still shown: an append adds to it, a retraction pops its
newest message, a clear empties it. After every operation the session's shown messages equal the
model, every view keeps the invariants of ``check_view_invariants`` (withdrawn messages never
shown), the planner never hands a withdrawn message to the summariser, and replay (full, or
snapshot + tail) rebuilds the same state and views.
"""

from __future__ import annotations

from hypothesis import given, note
from hypothesis import strategies as st

from ctxledger import Config, InvalidMessageError, Message
from ctxledger.domain import (
    CharTokenizer,
    CompactionPlan,
    SessionState,
    build_view,
    clear_event,
    plan_compaction,
    retraction_events,
    shown_messages,
)
from ctxledger.errors import ContextOverflowError, InvalidSeqError
from ctxledger.testing import (
    DomainSession,
    check_floor_refusal,
    check_view_invariants,
    conversations,
)

TOKENS = CharTokenizer()


@st.composite
def configs(draw: st.DrawFn) -> Config:
    """Small windows and few retained rounds, so that conversations compact between withdrawals."""
    return Config(
        context_window=draw(st.integers(150, 2000)),
        compression_threshold=draw(st.sampled_from([0.5, 1.0])),
        min_retain_rounds=draw(st.integers(0, 3)),
        micro_keep_recent=draw(st.integers(0, 3)),
        micro_min_chars=draw(st.sampled_from([0, 50])),
        micro_batch=draw(st.integers(1, 3)),
        keep_first_request=draw(st.booleans()),
    )


def _check(session: DomainSession, model: list[Message]) -> None:
    state = session.state
    assert shown_messages(state) == model
    view = build_view(state, tokenizer=TOKENS)
    check_view_invariants(
        state.history,
        view,
        state.config,
        checkpoint=state.active_checkpoint,
        pins=state.pins,
        retracted=state.retracted,
        cleared_through=state.cleared_through,
        check_window=False,
    )
    plan = plan_compaction(state, tokenizer=TOKENS, trigger="manual")
    if isinstance(plan, CompactionPlan):
        assert not [m.seq for m in plan.messages if state.is_withdrawn(m.seq or 0)]


def _fits(session: DomainSession, message: Message) -> bool:
    try:
        session.state.check_append([message])
    except InvalidMessageError:
        return False  # it answers a call that was withdrawn, or follows a re-opened one
    return True


@given(conversation=conversations(max_rounds=5), config=configs(), data=st.data())
def test_withdrawn_messages_leave_every_view_and_replay_agrees(
    conversation: list[Message], config: Config, data: st.DataObject
) -> None:
    """Shown messages follow the model; views keep the invariants; replay reproduces them."""
    session = DomainSession(config)
    model: list[Message] = []
    hashes: list[str] = []
    for message in conversation:
        if not _fits(session, message):
            continue
        action = data.draw(
            st.sampled_from(["append", "append", "append", "retract", "undo", "clear", "step"])
        )
        note(f"{action} at seq {session.state.last_seq}")
        if action == "undo":  # an append retracted at once leaves the view as it was
            before = build_view(session.state, tokenizer=TOKENS).view_hash
            session.append(message)
            for event in retraction_events(session.state):
                session.record(event)
            assert build_view(session.state, tokenizer=TOKENS).view_hash == before
            _check(session, model)
            continue
        model += session.state.check_append([message])
        session.append(message)
        if action == "retract":
            try:
                events = retraction_events(session.state)
            except InvalidSeqError:
                assert session.state.active_checkpoint is not None  # covered, not empty
            else:
                for event in events:
                    session.record(event)
                model.pop()
        elif action == "clear":
            session.record(clear_event(session.state))
            model = []
        elif action == "step" and not session.state.open_tool_calls():
            try:
                hashes.append(session.step().view_hash)
            except ContextOverflowError as error:  # refused: checked to be needed
                check_floor_refusal(session.state, error, tokenizer=TOKENS)
        _check(session, model)
    replayed = session.replay()
    assert replayed.to_snapshot() == session.state.to_snapshot()
    split = data.draw(st.integers(1, len(session.events)))
    resumed = SessionState.from_snapshot(session.replay(session.events[:split]).to_snapshot())
    for event in session.events[split:]:
        resumed.apply(event)
    assert resumed.to_snapshot() == session.state.to_snapshot()
    assert build_view(resumed, tokenizer=TOKENS).view_hash == (
        build_view(session.state, tokenizer=TOKENS).view_hash
    )
    assert [view.view_hash for view in session.views] == hashes
