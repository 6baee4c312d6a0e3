"""A model-based state machine over a real LMDB host: :class:`SessionMachine`.

Every rule drives a real :class:`~ctxledger.Host` (actors, journal, LMDB in a temporary folder)
and a plain-Python model of what the host must have recorded: per session the appended messages,
pins, checkpoints, the last served view and the reactive retry count. After every rule the
model, the live sessions and offline replay of the log must agree, and every view must keep the
invariants of :func:`~ctxledger.testing.check_view_invariants`.

Requires the ``hypothesis`` test extra. Use :meth:`SessionMachine.configured` to run it under
your own Config, summariser and tokenizer::

    from ctxledger.testing import SessionMachine

    TestMyPolicy = SessionMachine.configured(config=my_config, summarizer=my_summarizer).TestCase
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import event, note
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from ctxledger.domain import CompactionPlan, build_view, plan_compaction
from ctxledger.errors import (
    ContextOverflowError,
    InvalidCheckpointError,
    InvalidMessageError,
    InvalidSeqError,
)
from ctxledger.events import (
    CheckpointCreated,
    CompactionStarted,
    ToolResultSynthesized,
)
from ctxledger.messages import Message, ToolCall
from ctxledger.replay import fold_session, rebuild, verify
from ctxledger.testing._machine_background import BackgroundRules
from ctxledger.testing._machine_base import DEFAULT_CONFIG as DEFAULT_CONFIG
from ctxledger.testing._machine_model import FlakySummarizer, Model, open_tool_calls
from ctxledger.testing._machine_step import FAILURES, TOOLS, StepRules

__all__ = ["FlakySummarizer", "SessionMachine"]


class SessionMachine(BackgroundRules, StepRules):
    """Hypothesis state machine over a real LMDB host, checked against a plain-Python model.

    Rules: append a user message, an assistant message with 0-3 parallel tool calls (optionally
    with its results in the same batch), a tool result for an open call, whole agent steps in
    one batch, an invalid batch (must be refused whole); record usage; prepare a step; a
    ``Session.step`` (agent steps appended and the view served in one call); manual
    compaction with a focus; reactive compaction (``ContextOverflowError`` only once
    ``max_reactive_retries`` attempts are used); pin a seq; record a new Config; fork a
    session; close and reopen the host (open tool calls get ``interrupted`` results); verify
    the log. Compacting rules may make the summariser fail (raise, None or ""). Background
    compaction: a summary started at the crossing of ``prepare_threshold`` is held while the
    agent appends, pins and is served views, then finishes, fails, is awaited by a step or is
    cut short by a restart (``background_held``).

    Invariants after every rule, for every session: history equals the model; full replay,
    snapshot + tail and the live state are byte-identical; the live view equals
    ``replay.rebuild``; ``view_at`` of the last served seq reproduces the served hash; the rebuilt
    view keeps :func:`check_view_invariants` (the window is checked for views just served).

    Customise with :meth:`configured`; collect ``.TestCase`` with pytest.
    """

    @classmethod
    def configured(cls, *, name: str | None = None, **settings: Any) -> type[SessionMachine]:
        """Return a subclass running under other settings; collect its ``.TestCase``.

        Args:
            name: The class name shown in test reports.
            **settings: Any of ``config`` (the sessions' Config), ``summarizer`` (wrapped so
                that it can be made to fail), ``tokenizer``, ``sessions`` (opened at the start),
                ``max_sessions`` (forks stop there), ``max_active_sessions`` (the host's, small
                so that passivation happens), ``durability`` (``"none"`` for speed; reopen works
                with every mode) and ``result_sizes`` (tool result lengths to draw from).

        Raises:
            TypeError: A setting is unknown.
        """
        known = {"config", "summarizer", "tokenizer", "sessions", "max_sessions",
                 "max_active_sessions", "durability", "result_sizes"}  # fmt: skip
        unknown = sorted(set(settings) - known)
        if unknown:
            raise TypeError(f"unknown SessionMachine setting(s): {', '.join(unknown)}")
        for key in ("summarizer", "tokenizer"):
            if settings.get(key) is not None:  # a plain function must not become a method
                settings[key] = staticmethod(settings[key])
        return type(name or f"Configured{cls.__name__}", (cls,), dict(settings))

    # --- appends ---------------------------------------------------------------------------------

    @precondition(lambda self: bool(self._idle()))
    @rule(data=st.data())
    def append_user(self, data: st.DataObject) -> None:
        """Append a user message to an idle session."""
        sid = data.draw(st.sampled_from(self._idle()), label="session")
        self._append(sid, [Message.user(self._text(data, "user", self.text_sizes))])

    @precondition(lambda self: bool(self._idle()))
    @rule(
        data=st.data(),
        tools=st.lists(st.sampled_from(TOOLS), max_size=3),
        answer_now=st.booleans(),
    )
    def append_assistant(self, data: st.DataObject, tools: list[str], answer_now: bool) -> None:
        """Append an assistant message with 0-3 parallel calls, maybe with their results."""
        sid = data.draw(st.sampled_from(self._idle()), label="session")
        calls = [
            ToolCall(f"call{next(self._ids)}", tool, json.dumps({"n": index}))
            for index, tool in enumerate(tools)
        ]
        batch = [Message.assistant(self._text(data, "assistant", self.text_sizes), calls)]
        if answer_now and calls:
            order = data.draw(st.permutations(calls), label="result order")
            batch += [Message.tool(self._text(data, "result"), c.id, c.name) for c in order]
        self._append(sid, batch)

    @precondition(lambda self: bool(self._idle()))
    @rule(data=st.data(), steps=st.integers(1, 4), user=st.booleans())
    def append_agent_steps(self, data: st.DataObject, steps: int, user: bool) -> None:
        """Append whole agent steps (maybe after a user message) as one batch."""
        sid = data.draw(st.sampled_from(self._idle()), label="session")
        self._append(sid, self._agent_steps(data, steps, user))

    @precondition(lambda self: bool(self._waiting()))
    @rule(data=st.data(), named=st.booleans())
    def append_tool_result(self, data: st.DataObject, named: bool) -> None:
        """Answer one open tool call (parallel calls in any order)."""
        sid = data.draw(st.sampled_from(self._waiting()), label="session")
        calls = list(self.models[sid].open_calls().values())
        call = data.draw(st.sampled_from(calls), label="call")
        content = self._text(data, "result")
        self._append(sid, [Message.tool(content, call.id, call.name if named else None)])

    @rule(data=st.data())
    def append_invalid(self, data: st.DataObject) -> None:
        """A batch with an invalid message is refused whole; nothing is written."""
        sid = data.draw(st.sampled_from(sorted(self.models)), label="session")
        session = self._use(sid)
        model = self.models[sid]
        used = [call for message in model.messages for call in message.tool_calls]
        bad = [Message.tool("stray", "no-such-call")]
        if model.open_calls():
            bad.append(Message.user("too early: calls are open"))
        if used:
            bad.append(Message.assistant("reused id", [used[0]]))
        batch = [data.draw(st.sampled_from(bad), label="invalid message")]
        if not model.open_calls() and data.draw(st.booleans(), label="valid first"):
            batch.insert(0, Message.user("valid, but in a refused batch"))
        before = self.host.log.last_seq(sid)
        try:
            session.append_many(batch)
        except InvalidMessageError:
            pass
        else:
            raise AssertionError(f"{sid}: invalid batch {batch} was accepted")
        written = self.host.log.read(sid, before + 1)
        # Only a recovery (the first call after a restart) may have written something.
        assert all(isinstance(r.event, ToolResultSynthesized) for r in written), (
            f"{sid}: a refused batch wrote events"
        )

    # --- budget and compaction -------------------------------------------------------------------

    @rule(data=st.data())
    def record_usage(self, data: st.DataObject) -> None:
        """Record a provider usage figure (0 to twice the window)."""
        sid = data.draw(st.sampled_from(sorted(self.models)), label="session")
        tokens = data.draw(st.integers(0, 2 * self.config.context_window), label="prompt tokens")
        self._use(sid).record_usage(tokens, data.draw(st.integers(0, 500), label="completion"))
        self.models[sid].reactive_attempts = 0
        self.models[sid].fits = False

    @rule(data=st.data(), failure=FAILURES, pending=st.sampled_from(["", "run the tests now"]))
    def prepare_step(self, data: st.DataObject, failure: str | None, pending: str) -> None:
        """Compact if needed and serve the view; it is what replay rebuilds."""
        sid = data.draw(st.sampled_from(sorted(self.models)), label="session")
        view, records = self._compacting(sid, failure, lambda s: s.prepare_step(pending))
        self._check_served(sid, view, records, pending, "prepare_step")

    @rule(
        data=st.data(),
        failure=FAILURES,
        focus=st.sampled_from([None, "keep the API signatures", "keep file paths and errors"]),
    )
    def compact(self, data: st.DataObject, failure: str | None, focus: str | None) -> None:
        """Manual compaction with a focus: compacted exactly when a checkpoint was recorded."""
        sid = data.draw(st.sampled_from(sorted(self.models)), label="session")
        result, records = self._compacting(sid, failure, lambda s: s.compact(focus))
        made = [r.event.checkpoint for r in records if isinstance(r.event, CheckpointCreated)]
        assert result.compacted == bool(made), f"{sid}: {result} but {len(made)} checkpoints"
        event(f"compact: {result.reason}")
        if made:
            assert result.checkpoint_id == made[0].id
            assert (made[0].reason, made[0].focus) == ("manual", focus), made[0]

    @rule(
        data=st.data(),
        failure=FAILURES,
        error=st.sampled_from([None, "prompt is too long: 212000 tokens > 200000 maximum"]),
    )
    def reactive_compact(self, data: st.DataObject, failure: str | None, error: Any) -> None:
        """Compact harder per attempt; overflow only once every allowed attempt is used."""
        sid = data.draw(st.sampled_from(sorted(self.models)), label="session")
        model = self.models[sid]
        first = model.reactive_attempts
        outcome, records = self._compacting(sid, failure, lambda s: s.reactive_compact(error))
        if any(isinstance(r.event, CheckpointCreated) and r.event.prepared for r in records):
            # The summary prepared in the background was activated: the first attempt used it.
            assert not isinstance(outcome, ContextOverflowError) and outcome.prepared, outcome
            assert not any(isinstance(r.event, CompactionStarted) for r in records)
            event("reactive_compact: prepared")
            model.reactive_attempts = first + 1
            return
        started = [(r.seq, r.event) for r in records if isinstance(r.event, CompactionStarted)]
        attempts = [e.attempt for _, e in started]
        limit = rebuild(self.host.log, sid, tokenizer=self.tokenizer).config.max_reactive_retries
        assert attempts == sorted(set(attempts)), f"{sid}: attempts {attempts}"
        assert all(first <= a < limit for a in attempts), f"{sid}: attempts {attempts} from {first}"
        assert all(e.reason == "prompt_too_long" for _, e in started)
        overflow = isinstance(outcome, ContextOverflowError)
        if not overflow:
            assert outcome.compacted and attempts, f"{sid}: reactive_compact returned {outcome}"
        end = limit if overflow else attempts[-1] + 1
        # Failed attempts change no planning input: every attempt planned on the same state.
        state, _ = fold_session(
            self.host.log, sid, through_event_seq=started[0][0] - 1 if started else None
        )
        for attempt in range(first, end):
            plan = plan_compaction(
                state, tokenizer=self.tokenizer, trigger="prompt_too_long", attempt=attempt
            )
            planned = isinstance(plan, CompactionPlan)
            assert planned == (attempt in attempts), f"{sid}: attempt {attempt} planned={planned}"
            if isinstance(plan, CompactionPlan):
                recorded = started[attempts.index(attempt)][1]
                assert recorded.retain_from_seq == plan.retain_from_seq, f"{sid}: attempt {attempt}"
        note(f"{sid}: reactive attempts {first}..{end - 1}, overflow={overflow}")
        event(f"reactive_compact: {'overflow' if overflow else 'compacted'}")
        model.reactive_attempts = end

    @rule(data=st.data(), scale=st.sampled_from([1.0, 0.6, 1.5]), micro_batch=st.booleans())
    def reconfigure(self, data: st.DataObject, scale: float, micro_batch: bool) -> None:
        """Record a new Config (window scaled, maybe micro_batch=1); it applies from then on."""
        sid = data.draw(st.sampled_from(sorted(self.models)), label="session")
        config = self.config.replace(
            context_window=max(1, int(self.config.context_window * scale)),
            micro_batch=1 if micro_batch else self.config.micro_batch,
        )
        self._use(sid)  # reading the session's config below activates (recovers) it
        self.host.session(sid, config=config)
        assert rebuild(self.host.log, sid, tokenizer=self.tokenizer).config == config
        self.models[sid].fits = False

    # --- pins, forks, restarts -------------------------------------------------------------------

    @rule(data=st.data())
    def pin(self, data: st.DataObject) -> None:
        """Pin an existing seq; a seq that names no message raises InvalidSeqError."""
        sid = data.draw(st.sampled_from(sorted(self.models)), label="session")
        session = self._use(sid)
        model = self.models[sid]
        last = len(model.messages)
        # A pick mapped onto 0..last+1, not a draw bounded by the length: how many pressure
        # messages background_held appends depends on when a summary starts, which eviction's
        # timing can move (see _machine_background), and a draw whose bounds differ between a
        # run and its replay makes hypothesis fail with FlakyStrategyDefinition.
        seq = data.draw(st.integers(0, 2**16), label="seq pick") % (last + 2)
        if 1 <= seq <= last:
            session.pin(seq)
            model.pins.append((last, seq))
            model.fits = False
            return
        try:
            session.pin(seq)
        except InvalidSeqError:
            return
        raise AssertionError(f"{sid}: pinning seq {seq} of {last} messages was accepted")

    @precondition(lambda self: len(self.models) < self.max_sessions)
    @rule(data=st.data())
    def fork(self, data: st.DataObject) -> None:
        """Fork a session at its end or at an earlier seq; the fork is a new model."""
        sid = data.draw(st.sampled_from(sorted(self.models)), label="parent")
        session = self._use(sid)
        parent = self.models[sid]
        last = len(parent.messages)
        # A pick mapped onto 0..last, as pin's: the length may differ between a run and its
        # replay (see pin), and a draw bounded by it makes hypothesis fail as flaky.
        pick = data.draw(st.none() | st.integers(0, 2**16), label="at_seq pick")
        at = None if pick is None else pick % (last + 1)
        new_id = f"f{next(self._ids)}"
        session.fork(new_id, at)
        cut = last if at is None else at
        inherited = [made for made in parent.checkpoints if made[0] <= cut]
        changes = [change for change in parent.none_changes if change[0] <= cut]
        self.models[new_id] = Model(
            messages=parent.messages[:cut],
            pins=[pin for pin in parent.pins if pin[0] <= cut],
            checkpoints=inherited,
            restorations={index for index in parent.restorations if index < len(inherited)},
            none_active=changes[-1][1] if changes else False,
            none_changes=changes,
        )

    @rule(data=st.data())
    def revert(self, data: st.DataObject) -> None:
        """Revert the newest compaction: the checkpoint before it is active again (none, and the
        full history shown, when it was the first). Refused (InvalidCheckpointError, nothing
        written) without one, or twice."""
        sid = data.draw(st.sampled_from(sorted(self.models)), label="session")
        session = self._use(sid)
        model = self.models[sid]
        made = model.checkpoints
        first = bool(made) and made[-1][1].previous_checkpoint_id is None
        allowed = (
            bool(made)
            and not model.none_active
            and len(made) - 1 not in model.restorations
            and (first or (len(made) >= 2 and made[-1][1].previous_checkpoint_id == made[-2][1].id))
        )
        start = self.host.log.last_seq(sid)
        if not allowed:
            try:
                session.revert_compaction()
            except InvalidCheckpointError:
                assert self.host.log.last_seq(sid) == start, f"{sid}: a refused revert wrote"
                return
            raise AssertionError(
                f"{sid}: a revert of {[(c.id, c.previous_checkpoint_id) for _, c in made]} was "
                f"accepted (restorations {sorted(model.restorations)}, "
                f"none active {model.none_active})"
            )
        restored = session.revert_compaction()
        model.fits = False
        if first:
            assert restored is None, f"{sid}: reverting the first restored {restored!r}"
            model.set_none_active(True)
            event("revert the first")
            return
        assert restored == made[-2][1], f"{sid}: restored {restored!r}"
        model.restorations.add(len(made))
        made.append((len(model.messages), restored))
        event("revert")

    @rule(eager=st.booleans())
    def reopen(self, eager: bool) -> None:
        """Close and reopen the host; open tool calls are answered as ``interrupted``."""
        log = self.host.log
        before = {
            sid: rebuild(log, sid, tokenizer=self.tokenizer).view.view_hash
            for sid, model in self.models.items()
            if not open_tool_calls(model.messages)
        }
        self._restart()
        event(f"reopen: {sum(bool(m.pending) for m in self.models.values())} sessions interrupted")
        if not eager:
            return
        for sid in self.models:
            session = self._use(sid)
            session.history()  # activates, and so recovers, the session
            if sid in before:
                live = build_view(session._live_state(), tokenizer=self.tokenizer)
                assert live.view_hash == before[sid], f"{sid}: the view changed over a restart"

    @rule()
    def verify_log(self) -> None:
        """``replay.verify`` finds nothing wrong with the log."""
        report = verify(self.host.log, tokenizer=self.tokenizer)
        assert report.ok, f"verify found {report.mismatches}"
