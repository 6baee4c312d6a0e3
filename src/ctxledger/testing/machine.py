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

import contextlib
import itertools
import json
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from hypothesis import event, note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config
from ctxledger.domain import CharTokenizer, CompactionPlan, Tokenizer, build_view, plan_compaction
from ctxledger.errors import (
    ContextOverflowError,
    HostClosedError,
    InvalidCheckpointError,
    InvalidMessageError,
    InvalidSeqError,
)
from ctxledger.events import (
    CheckpointCreated,
    CompactionFailed,
    CompactionStarted,
    SummaryPrepared,
    ToolResultSynthesized,
    ViewServed,
)
from ctxledger.messages import Message, ToolCall
from ctxledger.replay import fold_session, rebuild, verify, view_at
from ctxledger.runtime.host import Host, HostOptions
from ctxledger.runtime.session import INTERRUPTED_RESULT, Session
from ctxledger.storage import Durability, RecordedEvent
from ctxledger.summarizers import ExtractiveSummarizer, Summarizer, SummaryRequest
from ctxledger.testing.invariants import check_floor_refusal, check_view_invariants
from ctxledger.testing.strategies import texts

__all__ = ["FlakySummarizer", "SessionMachine"]

#: The default Config: a small window, so that compaction, masking and truncation happen often.
DEFAULT_CONFIG = Config(
    context_window=2000,
    compression_threshold=0.5,
    min_retain_rounds=1,
    micro_keep_recent=3,
    micro_min_chars=100,
    micro_batch=2,
    snapshot_interval=16,
)
_TOOLS = ("bash", "read_file", "grep")
_FAILURES = st.sampled_from([None, None, None, "raise", "none", "empty"])


#: How long a held summariser call waits for its release before it fails (only a hang reaches it).
_HOLD_LIMIT = 60.0


class FlakySummarizer:
    """Wraps a summariser; while :attr:`mode` is set, every call fails that way.

    It can also hold calls (:meth:`hold`): each call then blocks until :meth:`release`, so that
    a test can act while a (background) summary is being written.

    Attributes:
        inner: The wrapped summariser.
        mode: ``None`` (call ``inner``), ``"raise"``, ``"none"`` (return None) or ``"empty"``,
            read once a call is released.
        entered: Set when a held call has begun (and is blocked).
        calls: Calls made so far.
    """

    def __init__(self, inner: Summarizer) -> None:
        """Wrap ``inner``; calls go through until :attr:`mode` is set."""
        self.inner = inner
        self.mode: str | None = None
        self.entered = threading.Event()
        self.calls = 0
        self._released = threading.Event()
        self._released.set()

    @property
    def holding(self) -> bool:
        """Whether calls are held (between :meth:`hold` and :meth:`release`)."""
        return not self._released.is_set()

    def hold(self) -> None:
        """Hold every call from now on until :meth:`release`."""
        self.entered.clear()
        self._released.clear()

    def release(self) -> None:
        """Let held calls (and every later one) go on."""
        self._released.set()

    def __call__(self, request: SummaryRequest, /) -> str | None:
        """Summarise with ``inner``, or fail as :attr:`mode` says (once released, if held)."""
        self.calls += 1
        if not self._released.is_set():
            self.entered.set()
            if not self._released.wait(_HOLD_LIMIT):
                raise RuntimeError("a held summariser call was never released (SessionMachine)")
        mode = self.mode
        if mode is None:
            return self.inner(request)
        if mode == "raise":
            raise RuntimeError("summariser unavailable (injected by SessionMachine)")
        return None if mode == "none" else ""


@dataclass
class _Model:
    """What one session must hold, kept with plain lists."""

    messages: list[Message] = field(default_factory=list)  # appended, without seqs
    pending: list[Message] = field(default_factory=list)  # synthesised on the next activation
    pins: list[tuple[int, int]] = field(default_factory=list)  # (messages when pinned, seq)
    checkpoints: list[tuple[int, Checkpoint]] = field(default_factory=list)  # (messages, made)
    restorations: set[int] = field(default_factory=set)  # indices of checkpoints a revert made
    none_active: bool = False  # the only checkpoint in force was reverted: the full history
    none_changes: list[tuple[int, bool]] = field(default_factory=list)  # (messages, none_active)

    def set_none_active(self, value: bool) -> None:
        if value != self.none_active:
            self.none_changes.append((len(self.messages), value))
        self.none_active = value

    served: tuple[int, str] | None = None  # (through_seq, view_hash) of the last served view
    reactive_attempts: int = 0
    fits: bool = False  # the view was just served by a step whose compaction did not fail

    def open_calls(self) -> dict[str, ToolCall]:
        return _open_calls([*self.messages, *self.pending])

    def expected(self) -> list[Message]:
        return [message.with_seq(seq) for seq, message in enumerate(self.messages, 1)]


def _open_calls(messages: Sequence[Message]) -> dict[str, ToolCall]:
    calls: dict[str, ToolCall] = {}
    for message in messages:
        if message.role == "tool":
            calls.pop(message.tool_call_id or "", None)
        for call in message.tool_calls:
            calls[call.id] = call
    return calls


def _outcome(records: Sequence[RecordedEvent]) -> str:
    if any(isinstance(record.event, CheckpointCreated) for record in records):
        return "compacted"
    if any(isinstance(record.event, CompactionFailed) for record in records):
        return "summary failed"
    return "no compaction"


def _settle(session: Session, settled: threading.Event) -> None:
    """Set ``settled`` once no background summary is being prepared for ``session``."""
    with contextlib.suppress(HostClosedError):  # the host was closed while one was held
        session.wait_background()
    settled.set()


def _synthetic(call: ToolCall) -> Message:
    return Message(
        role="tool",
        content=INTERRUPTED_RESULT,
        tool_call_id=call.id,
        name=call.name,
        metadata={"synthetic": "interrupted"},
    )


class SessionMachine(RuleBasedStateMachine):
    """Hypothesis state machine over a real LMDB host, checked against a plain-Python model.

    Rules: append a user message, an assistant message with 0-3 parallel tool calls (optionally
    with its results in the same batch), a tool result for an open call, whole agent steps in
    one batch, an invalid batch (must be refused whole); record usage; prepare a step; manual
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

    config: ClassVar[Config] = DEFAULT_CONFIG
    summarizer: ClassVar[Summarizer | None] = None  # None: the host's default (extractive)
    tokenizer: ClassVar[Tokenizer] = CharTokenizer()
    sessions: ClassVar[int] = 2
    max_sessions: ClassVar[int] = 4
    max_active_sessions: ClassVar[int] = 3
    durability: ClassVar[Durability] = "none"
    result_sizes: ClassVar[tuple[int, ...] | None] = None  # None: scaled to the window

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

    def __init__(self) -> None:
        """Open a host on a fresh temporary folder with the configured sessions."""
        super().__init__()
        self.folder = tempfile.mkdtemp(prefix="ctxledger-machine-")
        self.flaky = FlakySummarizer(self.summarizer or ExtractiveSummarizer())
        self._waiters: list[threading.Thread] = []  # background_held's wait_background threads
        self._ids = itertools.count(1)
        self._ticks = itertools.count(1)
        try:
            self.host = self._open_host()
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        chars = self.config.context_window * 3  # the window in characters, roughly
        self.sizes = self.result_sizes or (0, 40, chars // 30, chars // 8, chars // 4, chars * 2)
        self.text_sizes = (0, 20, max(1, chars // 40), max(1, chars // 10))
        self.models: dict[str, _Model] = {}
        for index in range(self.sessions):
            self.host.session(f"s{index}")
            self.models[f"s{index}"] = _Model()

    def _open_host(self) -> Host:
        return Host.open(
            self.folder,
            config=self.config,
            summarizer=self.flaky,
            tokenizer=self.tokenizer,
            options=HostOptions(
                durability=self.durability, max_active_sessions=self.max_active_sessions
            ),
            clock=lambda: float(next(self._ticks)),
            id_factory=lambda: f"id{next(self._ids)}",
        )

    def teardown(self) -> None:
        """Close the host and delete its folder."""
        try:
            self.host.close()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    # --- helpers ---------------------------------------------------------------------------------

    def _idle(self) -> list[str]:
        return [sid for sid, model in self.models.items() if not model.open_calls()]

    def _waiting(self) -> list[str]:
        return [sid for sid, model in self.models.items() if model.open_calls()]

    def _use(self, sid: str) -> Session:
        """Return session ``sid``; the call about to be made recovers it after a restart.

        A summary the last rule set off in the background is recorded first, so that each rule
        sees only the events of its own call.
        """
        model = self.models[sid]
        if model.pending:
            model.messages += model.pending
            model.pending = []
            model.fits = False
        session = self.host.session(sid)
        session.wait_background()
        return session

    def _text(self, data: st.DataObject, label: str, sizes: Sequence[int] = ()) -> str:
        # A short drawn text repeated to a drawn size: cheap to generate and to shrink.
        size = data.draw(st.sampled_from(sizes or self.sizes), label=f"{label} size")
        seed = data.draw(texts(max_size=40), label=f"{label} text") + " "
        return (seed * (size // len(seed) + 1))[:size]

    def _append(self, sid: str, batch: list[Message]) -> None:
        model = self.models[sid]
        seqs = self._use(sid).append_many(batch)
        first = len(model.messages) + 1
        assert seqs == list(range(first, first + len(batch))), f"{sid}: seqs {seqs}"
        model.messages += batch
        model.reactive_attempts = 0
        model.fits = False

    def _compacting(
        self, sid: str, failure: str | None, action: Callable[[Session], Any]
    ) -> tuple[Any, list[RecordedEvent]]:
        """Run a compacting call with the summariser failing as asked; check its checkpoint."""
        start = self.host.log.last_seq(sid)
        session = self._use(sid)
        self.flaky.mode = failure
        try:
            outcome = action(session)
        except ContextOverflowError as exc:
            outcome = exc
        finally:
            self.flaky.mode = None
        records = self.host.log.read(sid, start + 1)
        created = [r.event for r in records if isinstance(r.event, CheckpointCreated)]
        made = [event.checkpoint for event in created]
        model = self.models[sid]
        assert len(made) <= 1, f"{sid}: {len(made)} checkpoints from one call"
        if made:
            # A summary prepared in the background needs no summariser call to be activated.
            assert failure is None or created[0].prepared, (
                f"{sid}: a checkpoint although the summariser failed"
            )
            self._check_new_checkpoint(sid, made[0])
            model.checkpoints.append((len(model.messages), made[0]))
            model.set_none_active(False)
        model.fits = False
        return outcome, records

    def _check_new_checkpoint(self, sid: str, checkpoint: Checkpoint) -> None:
        model = self.models[sid]
        previous = model.checkpoints[-1][1] if model.checkpoints and not model.none_active else None
        cut = checkpoint.retain_from_seq
        assert checkpoint.previous_checkpoint_id == (previous.id if previous else None)
        assert checkpoint.covers_through_seq == cut - 1, checkpoint
        assert cut <= len(model.messages) + 1, f"{sid}: cut {cut} past the end"
        assert previous is None or cut > previous.retain_from_seq, f"{sid}: paid twice for {cut}"
        assert not _open_calls(model.messages[: cut - 1]), f"{sid}: cut {cut} splits a tool call"

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
        tools=st.lists(st.sampled_from(_TOOLS), max_size=3),
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
        batch = [Message.user(self._text(data, "user", self.text_sizes))] if user else []
        for _ in range(steps):
            tools = data.draw(st.lists(st.sampled_from(_TOOLS), min_size=1, max_size=3))
            calls = [ToolCall(f"call{next(self._ids)}", tool, "{}") for tool in tools]
            batch.append(Message.assistant(self._text(data, "assistant", self.text_sizes), calls))
            batch += [Message.tool(self._text(data, "result"), c.id, c.name) for c in calls]
        self._append(sid, batch)

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

    @rule(data=st.data(), failure=_FAILURES, pending=st.sampled_from(["", "run the tests now"]))
    def prepare_step(self, data: st.DataObject, failure: str | None, pending: str) -> None:
        """Compact if needed and serve the view; it is what replay rebuilds."""
        sid = data.draw(st.sampled_from(sorted(self.models)), label="session")
        view, records = self._compacting(sid, failure, lambda s: s.prepare_step(pending))
        model = self.models[sid]
        if isinstance(view, ContextOverflowError):
            self._check_floor_overflow(sid, view, records, pending)
            return
        assert view.through_seq == len(model.messages), f"{sid}: view through {view.through_seq}"
        rebuilt = rebuild(self.host.log, sid, tokenizer=self.tokenizer).view
        assert rebuilt.view_hash == view.view_hash, f"{sid}: served view does not rebuild"
        model.served = (view.through_seq, view.view_hash)
        model.fits = not any(isinstance(r.event, CompactionFailed) for r in records)
        event(f"prepare_step: {_outcome(records)}")

    def _check_floor_overflow(
        self,
        sid: str,
        error: ContextOverflowError,
        records: list[RecordedEvent],
        pending: str = "",
    ) -> None:
        """A refused step: only when even the retained minimum of the view is over the window.

        The view the session would serve uncompacted is checked with the window invariant: it
        must be over the window and its retained minimum (system messages, pins, the summary,
        the last step) too, which no compaction can shrink; nothing is served.
        """
        assert not any(isinstance(r.event, ViewServed) for r in records), f"{sid}: view served"
        state, _ = fold_session(self.host.log, sid)
        failed = any(
            isinstance(r.event, CompactionFailed) and not r.event.background for r in records
        )
        if failed:
            # The summariser failed: the view that stays is refused once it does not fit.
            view = rebuild(self.host.log, sid, tokenizer=self.tokenizer).view
            extra = [Message(role="user", content=pending)] if pending else []
            count = self.tokenizer.count_messages([*view.messages, *extra])
            assert count > state.config.context_window, f"{sid}: refused {count} tokens"
        else:
            check_floor_refusal(state, error, tokenizer=self.tokenizer, pending=pending)
        self.models[sid].fits = False
        event("prepare_step: floor over the window")

    @rule(
        data=st.data(),
        failure=_FAILURES,
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
        failure=_FAILURES,
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
        seq = data.draw(st.integers(0, last + 1), label="seq")
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
        at = data.draw(st.none() | st.integers(0, last), label="at_seq")
        new_id = f"f{next(self._ids)}"
        session.fork(new_id, at)
        cut = last if at is None else at
        inherited = [made for made in parent.checkpoints if made[0] <= cut]
        changes = [change for change in parent.none_changes if change[0] <= cut]
        self.models[new_id] = _Model(
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

    def _restart(self) -> None:
        """Close and reopen the host; open tool calls will be answered as ``interrupted``."""
        self.host.close()
        self.host = self._open_host()
        for model in self.models.values():
            model.pending = [_synthetic(call) for call in _open_calls(model.messages).values()]
            model.reactive_attempts = 0

    @rule(eager=st.booleans())
    def reopen(self, eager: bool) -> None:
        """Close and reopen the host; open tool calls are answered as ``interrupted``."""
        log = self.host.log
        before = {
            sid: rebuild(log, sid, tokenizer=self.tokenizer).view.view_hash
            for sid, model in self.models.items()
            if not _open_calls(model.messages)
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

    # --- background compaction --------------------------------------------------------------------

    def _append_now(self, sid: str, batch: list[Message]) -> None:
        """Append without waiting for the session's background summary (it may be held)."""
        model = self.models[sid]
        seqs = self.host.session(sid).append_many(batch)
        first = len(model.messages) + 1
        assert seqs == list(range(first, first + len(batch))), f"{sid}: seqs {seqs}"
        model.messages += batch
        model.reactive_attempts = 0
        model.fits = False

    def _start_held(self, data: st.DataObject, sid: str, start: int) -> CompactionStarted | None:
        """Append user messages until a background summary starts (and is held); return its
        ``CompactionStarted``, or None when none started after a few appends."""
        chars = self.config.context_window * 3
        sizes = (chars // 8, chars // 4, chars // 2)
        session = self.host.session(sid)
        for _ in range(6):
            self._append_now(sid, [Message.user(self._text(data, "pressure", sizes))])
            # Either a background summary starts (and is held), or the session settles
            # without one: wait_background answers only then (or once the held one ends).
            settled = threading.Event()
            waiter = threading.Thread(
                target=_settle, args=(session, settled), name="machine-settle", daemon=True
            )
            waiter.start()
            self._waiters.append(waiter)
            while not (self.flaky.entered.wait(0.002) or settled.is_set()):
                pass
            if self.flaky.entered.is_set():
                break
        else:
            return None
        started = [
            r.event
            for r in self.host.log.read(sid, start + 1)
            if isinstance(r.event, CompactionStarted) and r.event.background
        ]
        assert len(started) == 1, f"{sid}: {len(started)} background compactions at once"
        return started[0]

    @precondition(lambda self: bool(self._idle()))
    @rule(
        data=st.data(),
        actions=st.lists(st.sampled_from(["append", "view", "pin"]), max_size=4),
        ending=st.sampled_from(["finish", "fail", "step", "crash"]),
    )
    def background_held(self, data: st.DataObject, actions: list[str], ending: str) -> None:
        """A background summary starts at the crossing of ``prepare_threshold`` and is held
        while the agent appends, is served views (which do not change) and pins; then it
        finishes (``SummaryPrepared``), fails (a background ``CompactionFailed``), is awaited by
        a step (never started twice), or the host crashes (closes and reopens) while it runs."""
        sid = data.draw(st.sampled_from(self._idle()), label="session")
        session = self._use(sid)
        model = self.models[sid]
        start = self.host.log.last_seq(sid)
        active = session._live_state().active_checkpoint
        self.flaky.hold()
        try:
            started = self._start_held(data, sid, start)
            if started is None:
                event("background_held: none started")
                return
            served: str | None = None
            for action in actions:
                if action == "append":
                    self._append_now(sid, [Message.user(self._text(data, "user", self.text_sizes))])
                elif action == "view":
                    try:
                        view = session.build_model_view()
                    except ContextOverflowError:
                        # No view over the window is served (nothing is recorded).
                        over = rebuild(self.host.log, sid, tokenizer=self.tokenizer).view
                        count = self.tokenizer.count_messages(over.messages)
                        window = session.config.context_window
                        assert count > window, f"{sid}: refused {count} of {window}"
                        continue
                    assert view.checkpoint_id == (active.id if active else None), view
                    assert served is None or view.view_hash == served, f"{sid}: the view changed"
                    rebuilt = rebuild(self.host.log, sid, tokenizer=self.tokenizer).view
                    assert rebuilt.view_hash == view.view_hash, f"{sid}: view while held"
                    model.served = (view.through_seq, view.view_hash)
                    served = view.view_hash
                else:
                    last = len(model.messages)
                    seq = data.draw(st.integers(1, last), label="pinned seq")
                    session.pin(seq)
                    model.pins.append((last, seq))
                if action != "view":
                    served = None  # the next view may differ: the history changed
            self._end_held(data, sid, started, ending)
        finally:
            self.flaky.release()
            self.flaky.mode = None
            for waiter in self._waiters:
                waiter.join(_HOLD_LIMIT)
            self._waiters.clear()

    def _end_held(
        self, data: st.DataObject, sid: str, started: CompactionStarted, ending: str
    ) -> None:
        model = self.models[sid]
        mark = self.host.log.last_seq(sid)
        ours = started.compaction_id
        if ending == "crash":
            self._restart()  # the summariser is still held: its answer goes nowhere
            self.flaky.release()
            session = self._use(sid)  # activates, and so recovers, the session
            records = self.host.log.read(sid, mark + 1)
            failed = [r.event for r in records if isinstance(r.event, CompactionFailed)]
            assert any(
                e.compaction_id == ours and e.background and e.reason == "interrupted"
                for e in failed
            ), f"{sid}: the background compaction running at the crash was not closed"
            event("background_held: crash")
            return
        session = self.host.session(sid)
        if ending in ("finish", "fail"):
            if ending == "fail":
                self.flaky.mode = data.draw(st.sampled_from(["raise", "none", "empty"]))
            self.flaky.release()
            session.wait_background()
            self.flaky.mode = None
            records = self.host.log.read(sid, mark + 1)
            ended = [
                r.event
                for r in records
                if isinstance(r.event, SummaryPrepared | CompactionFailed)
                and r.event.compaction_id == ours
            ]
            assert len(ended) == 1, f"{sid}: background {ours} ended {len(ended)} times"
            kind = SummaryPrepared if ending == "finish" else CompactionFailed
            assert isinstance(ended[0], kind), f"{sid}: {ending} recorded {ended[0]}"
            if ending == "fail":
                assert ended[0].background, ended[0]  # type: ignore[union-attr]
            event(f"background_held: {ending}")
            return
        # A step while the summary runs: it serves at once, or awaits the running summary (it
        # never starts the same one again) and then activates or extends it.
        outcome: list[Any] = []

        def step() -> None:
            try:
                outcome.append(session.prepare_step())
            except BaseException as exc:  # re-raised in the test's thread
                outcome.append(exc)

        thread = threading.Thread(target=step, name="machine-step")
        thread.start()
        self.flaky.release()
        thread.join(_HOLD_LIMIT)
        assert not thread.is_alive(), f"{sid}: prepare_step never returned"
        (view,) = outcome
        if isinstance(view, ContextOverflowError):
            session.wait_background()
            self._check_floor_overflow(sid, view, self.host.log.read(sid, mark + 1))
            return
        if isinstance(view, BaseException):
            raise view
        session.wait_background()
        records = self.host.log.read(sid, mark + 1)
        ended_at = next(
            (
                r.seq
                for r in records
                if isinstance(r.event, SummaryPrepared | CompactionFailed)
                and r.event.compaction_id == ours
            ),
            None,
        )
        for record in records:
            if isinstance(record.event, CompactionStarted) and not record.event.background:
                assert ended_at is not None and record.seq > ended_at, (
                    f"{sid}: a compaction started while background {ours} was running"
                )
        created = [r.event for r in records if isinstance(r.event, CheckpointCreated)]
        assert len(created) <= 1, f"{sid}: {len(created)} checkpoints from one step"
        if created:
            self._check_new_checkpoint(sid, created[0].checkpoint)
            model.checkpoints.append((len(model.messages), created[0].checkpoint))
            model.set_none_active(False)
        assert view.through_seq == len(model.messages), f"{sid}: view through {view.through_seq}"
        model.served = (view.through_seq, view.view_hash)
        prepared = bool(created) and created[0].prepared
        event(f"background_held: step ({'prepared' if prepared else 'no activation'})")

    @rule()
    def verify_log(self) -> None:
        """``replay.verify`` finds nothing wrong with the log."""
        report = verify(self.host.log, tokenizer=self.tokenizer)
        assert report.ok, f"verify found {report.mismatches}"

    # --- invariants ------------------------------------------------------------------------------

    @invariant()
    def sessions_match_model_and_replay(self) -> None:
        """History = model; replay = snapshot + tail = live; served views rebuild; invariants."""
        for sid in self.host.active_sessions():
            self.host.session(sid).wait_background()  # compare at a quiet point
        active = set(self.host.active_sessions())
        for sid, model in self.models.items():
            self._check_session(sid, model, live=sid in active)

    def _check_session(self, sid: str, model: _Model, *, live: bool) -> None:
        log, tokenizer = self.host.log, self.tokenizer
        state = rebuild(log, sid, tokenizer=tokenizer)
        expected = model.expected()
        if state.history != expected:
            diverged = next(
                (m.seq for m, want in zip(state.history, expected, strict=False) if m != want),
                min(len(state.history), len(expected)) + 1,
            )
            raise AssertionError(f"{sid}: history differs from the model at seq {diverged}")
        assert state.checkpoints == [made for _, made in model.checkpoints], f"{sid}: checkpoints"
        assert set(state.pins) == {seq for _, seq in model.pins}, f"{sid}: pins {state.pins}"
        fast, _ = fold_session(log, sid)
        full, _ = fold_session(log, sid, use_snapshots=False)
        assert fast.to_snapshot() == full.to_snapshot(), f"{sid}: snapshot + tail != full replay"
        assert fast.history == full.history, f"{sid}: history read back from chunks differs"
        if live:
            current = self.host.session(sid)._live_state()
            assert current.to_snapshot() == full.to_snapshot(), f"{sid}: live state != replay"
            assert build_view(current, tokenizer=tokenizer).view_hash == state.view.view_hash
        if model.served is not None:
            seq, served_hash = model.served
            again = view_at(log, sid, seq, tokenizer=tokenizer).view_hash
            assert again == served_hash, f"{sid}: view_at({seq}) does not reproduce the served view"
        if model.fits:
            over = tokenizer.count_messages(state.view.messages) > state.config.context_window
            event(f"served view {'over' if over else 'within'} the window")
        check_view_invariants(
            state.history,
            state.view,
            state.config,
            checkpoint=state.checkpoints[-1]
            if state.checkpoints and not model.none_active
            else None,
            pins=state.pins,
            tokenizer=tokenizer,
            expected_history=expected,
            check_window=model.fits,
        )
