"""Properties of the domain over generated conversations and operations (DESIGN §2 invariants)."""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
from hypothesis import given, note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ctxledger import Config, Message, ToolCall
from ctxledger.domain import (
    CharTokenizer,
    Compact,
    CompactionPlan,
    ModelView,
    SessionState,
    build_view,
    plan_compaction,
    preview_view,
    render_message,
    render_policy,
)
from ctxledger.errors import ContextOverflowError
from ctxledger.testing import (
    DomainSession,
    check_floor_refusal,
    check_view_invariants,
    conversations,
)

TOKENS = CharTokenizer()


@st.composite
def configs(draw: st.DrawFn) -> Config:
    """Small windows, so that generated conversations compact often."""
    return Config(
        context_window=draw(st.integers(150, 3000)),
        compression_threshold=draw(st.sampled_from([0.5, 0.8, 1.0])),
        min_retain_rounds=draw(st.integers(0, 4)),
        micro_keep_recent=draw(st.integers(0, 4)),
        micro_min_chars=draw(st.sampled_from([0, 50, 100])),
        micro_batch=draw(st.integers(1, 4)),
        micro_preserve_tools=draw(st.sampled_from([(), ("read_file",)])),
        threshold_policy=draw(st.sampled_from(["fixed", "dynamic"])),
        summary_chunk_chars=draw(st.sampled_from([None, 400])),
        keep_first_request=draw(st.booleans()),
    )


def _flaky(data: st.DataObject) -> Any:
    def summarizer(request: Any) -> str | None:
        roll = data.draw(st.integers(0, 9), label="summariser roll")
        if roll == 0:
            return None
        if roll == 1:
            raise RuntimeError("summariser down")
        lines = [request.previous_summary or ""]
        lines += [f"{m.seq}:{m.content[:20]}" for m in request.messages]
        return "\n".join(lines)[: request.max_chars] or "-"

    return summarizer


def _check_step(session: DomainSession, model: list[Message]) -> None:
    """Every invariant of the view just served (the last in session.views).

    The view fits the window: a Config of the two marks serves none that does not (it refuses
    with ContextOverflowError, also when the step's compaction failed).
    """
    state = session.state
    view = session.views[-1]
    check_view_invariants(
        state.history,
        view,
        state.config,
        checkpoint=state.active_checkpoint,
        pins=state.pins,
        expected_history=model,
    )
    again = build_view(state, tokenizer=TOKENS)
    assert msgspec.msgpack.encode(again) == msgspec.msgpack.encode(view), "projection not pure"
    policy = render_policy(state)
    for message in view.messages:
        if message.seq is not None:
            assert render_message(state, policy, message) == message, "masking not idempotent"


def _step(session: DomainSession) -> ModelView | None:
    """Serve a step; None when it is refused (checked: its retained minimum reaches the window)."""
    try:
        return session.step()
    except ContextOverflowError as error:
        check_floor_refusal(session.state, error, tokenizer=TOKENS)
        return None


def _reactive_attempt(session: DomainSession, attempt: int) -> None:
    """One reactive compaction attempt with the given number (the retry loop's single step)."""
    result = session.decide(Compact(trigger="prompt_too_long", attempt=attempt)).result
    assert result is not None
    session.results.append(result)


def _check_compaction(session: DomainSession, boundaries: list[int]) -> None:
    """A successful compaction ends below the threshold unless the retained minimum is larger.

    The retained minimum is the view the same checkpoint would give if it kept only the last
    step (from the last boundary): with pins, an earlier cut may be just as small.
    """
    result = session.results[-1]
    active = session.state.active_checkpoint
    if result.compacted and result.estimated_tokens >= result.threshold:
        assert active is not None
        last = boundaries[-1]
        minimal = msgspec.structs.replace(active, retain_from_seq=last, covers_through_seq=last - 1)
        floor = preview_view(session.state, minimal, tokenizer=TOKENS).view_tokens
        assert floor >= result.threshold, (result, floor)
    cuts = [checkpoint.retain_from_seq for checkpoint in session.state.checkpoints]
    assert cuts == sorted(set(cuts)), f"a cut was paid for twice: {cuts}"


@given(conversation=conversations(max_rounds=5), config=configs(), data=st.data())
def test_every_served_view_keeps_the_invariants(
    conversation: list[Message], config: Config, data: st.DataObject
) -> None:
    """Tool pairing, nothing lost, history intact, pure projection, idempotent masking, fit."""
    session = DomainSession(config, summarizer=_flaky(data))
    model: list[Message] = []
    for message in conversation:
        model += session.state.check_append([message])
        session.append(message)
        if session.state.open_tool_calls():
            continue
        action = data.draw(st.sampled_from(["step", "step", "usage", "pin", "manual", "reactive"]))
        note(f"{action} at seq {session.state.last_seq}")
        boundaries = list(session.state.boundaries)
        if action == "usage":
            session.record_usage(data.draw(st.integers(0, 2 * config.context_window)))
        elif action == "pin":
            session.pin(data.draw(st.integers(1, session.state.last_seq)))
        elif action == "manual":
            session.compact(focus=data.draw(st.sampled_from([None, "keep paths"])))
            _check_compaction(session, boundaries)
        elif action == "reactive":
            _reactive_attempt(session, data.draw(st.integers(0, 3)))
            _check_compaction(session, boundaries)
        session.compact_if_needed()
        _check_compaction(session, boundaries)
        try:
            session.view()
        except ContextOverflowError as error:
            # Refused: nothing served. Only a view over the window is refused; unless the
            # compaction just failed, no compaction could have made it fit.
            failed = session.results[-1].reason == "summary_unavailable"
            if not failed:
                check_floor_refusal(session.state, error, tokenizer=TOKENS)
            assert build_view(session.state, tokenizer=TOKENS).view_tokens > config.context_window
            continue
        _check_step(session, model)
    assert session.state.history == model


@given(conversation=conversations(max_rounds=4), config=configs(), data=st.data())
def test_replay_and_snapshots_rebuild_the_same_state(
    conversation: list[Message], config: Config, data: st.DataObject
) -> None:
    """Full replay = snapshot + tail = the live state, byte for byte, with the same view."""
    session = DomainSession(config)
    for message in conversation:
        session.append(message)
        if not session.state.open_tool_calls():
            _step(session)
    split = data.draw(st.integers(1, len(session.events)))
    resumed = SessionState.from_snapshot(session.replay(session.events[:split]).to_snapshot())
    for event in session.events[split:]:
        resumed.apply(event)
    replayed = session.replay()
    assert replayed.to_snapshot() == resumed.to_snapshot() == session.state.to_snapshot()
    assert (
        build_view(resumed, tokenizer=TOKENS).view_hash
        == build_view(session.state, tokenizer=TOKENS).view_hash
    )


@given(conversation=conversations(max_rounds=4, huge_outputs=True), config=configs())
def test_no_progress_never_repeats_a_cut(conversation: list[Message], config: Config) -> None:
    """Planning right after any outcome never proposes a cut already paid for."""
    session = DomainSession(config)
    for message in conversation:
        session.append(message)
        if session.state.open_tool_calls():
            continue
        session.compact_if_needed()
        active = session.state.active_checkpoint
        plan = plan_compaction(session.state, tokenizer=TOKENS, trigger="manual")
        if active is not None and isinstance(plan, CompactionPlan):
            assert plan.retain_from_seq > active.retain_from_seq


@given(conversation=conversations(pending_last_step=True))
def test_generated_conversations_are_appendable(conversation: list[Message]) -> None:
    """The strategy only makes valid, tool-paired conversations."""
    session = DomainSession(Config())
    session.extend(conversation)
    assert len(session.state.open_tool_calls()) <= 1


@given(
    conversations(
        parallel_tool_calls=False, consecutive_users=False, allow_no_user=False, min_rounds=1
    )
)
def test_strategy_knobs_are_respected(conversation: list[Message]) -> None:
    """Without parallel calls, consecutive users or user-less conversations, none appear."""
    assert all(len(m.tool_calls) <= 1 for m in conversation)
    roles = [m.role for m in conversation]
    assert "user" in roles
    assert all(not (a == b == "user") for a, b in itertools.pairwise(roles))


class DomainMachine(RuleBasedStateMachine):
    """Model-based: every rule hits a DomainSession and a plain list of appended messages."""

    @initialize(config=configs())
    def open(self, config: Config) -> None:
        self.session = DomainSession(config)
        self.model: list[Message] = []
        self.ids = 0

    def _append(self, *messages: Message) -> None:
        self.model += self.session.state.check_append(messages)
        self.session.append_many(messages)

    def _idle(self) -> bool:
        return not self.session.state.open_tool_calls()

    @precondition(lambda self: self._idle())
    @rule(text=st.text(max_size=400))
    def user(self, text: str) -> None:
        self._append(Message.user(text))

    @precondition(lambda self: self._idle())
    @rule(width=st.integers(0, 3), text=st.text(max_size=200))
    def assistant(self, width: int, text: str) -> None:
        calls = []
        for _ in range(width):
            self.ids += 1
            calls.append(ToolCall(f"t{self.ids}", "bash", "{}"))
        self._append(Message.assistant(text, calls))

    @precondition(lambda self: not self._idle())
    @rule(size=st.sampled_from([0, 50, 500, 5000, 50_000]), data=st.data())
    def tool_result(self, size: int, data: st.DataObject) -> None:
        call_id = data.draw(st.sampled_from(sorted(self.session.state.open_tool_calls())))
        self._append(Message.tool("r" * size, call_id, "bash"))

    @rule(tokens=st.integers(0, 5000))
    def usage(self, tokens: int) -> None:
        self.session.record_usage(tokens)

    @precondition(lambda self: self.session.state.last_seq > 0)
    @rule(data=st.data())
    def pin(self, data: st.DataObject) -> None:
        self.session.pin(data.draw(st.integers(1, self.session.state.last_seq)))

    @precondition(lambda self: self._idle())
    @rule(trigger=st.sampled_from(["threshold_exceeded", "manual", "prompt_too_long"]))
    def compact(self, trigger: str) -> None:
        boundaries = list(self.session.state.boundaries)
        if trigger == "threshold_exceeded":
            self.session.compact_if_needed()
        elif trigger == "manual":
            self.session.compact()
        else:
            _reactive_attempt(self.session, 0)
        _check_compaction(self.session, boundaries)

    @precondition(lambda self: self._idle())
    @rule()
    def step(self) -> None:
        if _step(self.session) is not None:
            _check_step(self.session, self.model)

    @rule(window=st.integers(150, 3000))
    def change_window(self, window: int) -> None:
        self.session.change_config(self.session.state.config.replace(context_window=window))

    @rule()
    def toggle_keep_first_request(self) -> None:
        config = self.session.state.config
        self.session.change_config(config.replace(keep_first_request=not config.keep_first_request))

    @invariant()
    def history_equals_model(self) -> None:
        assert self.session.state.history == self.model

    @invariant()
    def replay_equals_live_state(self) -> None:
        assert self.session.replay().to_snapshot() == self.session.state.to_snapshot()


TestDomainMachine = DomainMachine.TestCase
