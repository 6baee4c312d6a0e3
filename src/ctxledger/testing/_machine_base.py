"""The harness of :class:`~ctxledger.testing.SessionMachine`: the host under test and its model.

:class:`MachineBase` opens a real :class:`~ctxledger.Host` (LMDB in a temporary folder) and one
:class:`~ctxledger.testing._machine_model.Model` per session, holds the helpers the rules share
(appending, compacting with the summariser made to fail, restarting the host) and checks, after
every rule, that the model, the live sessions and offline replay of the log agree. The rules
are in :mod:`ctxledger.testing.machine` and :mod:`ctxledger.testing._machine_background`.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant

from ctxledger.actors.host import Host, HostOptions
from ctxledger.actors.session import Session
from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config
from ctxledger.domain import CharTokenizer, Tokenizer, build_view, session_tokenizer
from ctxledger.errors import ContextOverflowError
from ctxledger.events import CheckpointCreated, CompactionFailed, ViewServed
from ctxledger.messages import Message
from ctxledger.replay import fold_session, rebuild, view_at
from ctxledger.storage import Durability, RecordedEvent
from ctxledger.summarizers import ExtractiveSummarizer, Summarizer
from ctxledger.testing._machine_model import (
    FlakySummarizer,
    Model,
    open_tool_calls,
    synthetic_result,
)
from ctxledger.testing.invariants import check_floor_refusal, check_view_invariants
from ctxledger.testing.strategies import texts

__all__ = ["DEFAULT_CONFIG", "MachineBase"]

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


class MachineBase(RuleBasedStateMachine):
    """A real LMDB host and its plain-Python model; the invariant every rule must keep.

    The class attributes are the settings :meth:`SessionMachine.configured
    <ctxledger.testing.SessionMachine.configured>` replaces.
    """

    config: ClassVar[Config] = DEFAULT_CONFIG
    summarizer: ClassVar[Summarizer | None] = None  # None: the host's default (extractive)
    tokenizer: ClassVar[Tokenizer] = CharTokenizer()
    sessions: ClassVar[int] = 2
    max_sessions: ClassVar[int] = 4
    max_active_sessions: ClassVar[int] = 3
    durability: ClassVar[Durability] = "none"
    result_sizes: ClassVar[tuple[int, ...] | None] = None  # None: scaled to the window

    def __init__(self) -> None:
        """Open a host on a fresh temporary folder with the configured sessions."""
        super().__init__()
        self.folder = tempfile.mkdtemp(prefix="ctxledger-machine-")
        self.flaky = FlakySummarizer(self.summarizer or ExtractiveSummarizer())
        self._waiters: list[threading.Thread] = []  # background_held's wait_background threads
        # Sessions used since their background work was last awaited: a summary one rule set
        # off in the background may still run while the next rule uses another session.
        self._touched: set[str] = set()
        self._ids = itertools.count(1)
        # The host's clock stands still. The host reads it from several threads (event times,
        # the timing of summaries), and any clock that moves makes what they read depend on how
        # those threads interleave; the background pace decision (``ready_in_time``) is taken on
        # those readings, and with it whether a summary starts, so the rules would draw different
        # data on different runs (hypothesis: FlakyStrategyDefinition), even with a clock that
        # moves only between the machine's calls (another session's background summary may
        # still run then). Standing still, every pace is unknown and a summary is prepared
        # whenever the policy says it is due; the pace itself is tested with an injected clock
        # in tests/integration/test_background_pace.py.
        self.now = 1_000_000.0
        try:
            self.host = self._open_host()
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        chars = self.config.context_window * 3  # the window in characters, roughly
        self.sizes = self.result_sizes or (0, 40, chars // 30, chars // 8, chars // 4, chars * 2)
        self.text_sizes = (0, 20, max(1, chars // 40), max(1, chars // 10))
        self.models: dict[str, Model] = {}
        for index in range(self.sessions):
            self.host.session(f"s{index}")
            self.models[f"s{index}"] = Model()

    def _open_host(self) -> Host:
        return Host.open(
            self.folder,
            config=self.config,
            summarizer=self.flaky,
            tokenizer=self.tokenizer,
            options=HostOptions(
                durability=self.durability, max_active_sessions=self.max_active_sessions
            ),
            clock=lambda: self.now,
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
        # Every session's background summary first, not only this one's: a summary still
        # running elsewhere would take a summariser call (or a hold) this rule expects for its
        # own session, at a moment that depends on the threads' timing.
        for other in sorted(self._touched - {sid}):
            self.host.session(other).wait_background()
        self._touched = {sid}
        session = self.host.session(sid)
        session.wait_background()
        return session

    def _text(self, data: st.DataObject, label: str, sizes: Sequence[int] = ()) -> str:
        # A short drawn text repeated to a drawn size: cheap to generate and to shrink.
        size = data.draw(st.sampled_from(sizes or self.sizes), label=f"{label} size")
        seed = data.draw(texts(max_size=40), label=f"{label} text") + " "
        return (seed * (size // len(seed) + 1))[:size]

    def _append(self, sid: str, batch: list[Message], *, now: bool = False) -> None:
        """Append ``batch`` and check its seqs; ``now``: without waiting for the session's
        background summary (it may be held)."""
        model = self.models[sid]
        session = self.host.session(sid) if now else self._use(sid)
        seqs = session.append_many(batch)
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
        assert not open_tool_calls(model.messages[: cut - 1]), f"{sid}: cut {cut} splits a call"

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
            tokenizer = session_tokenizer(state, self.tokenizer)  # calibrated, as the host counts
            count = tokenizer.count_messages([*view.messages, *extra])
            assert count > state.config.context_window, f"{sid}: refused {count} tokens"
        else:
            check_floor_refusal(state, error, tokenizer=self.tokenizer, pending=pending)
        self.models[sid].fits = False
        event("prepare_step: floor over the window")

    def _restart(self) -> None:
        """Close and reopen the host; open tool calls will be answered as ``interrupted``."""
        self.host.close()
        self.host = self._open_host()
        self._touched.clear()  # nothing runs in the background of a fresh host
        for model in self.models.values():
            model.pending = [
                synthetic_result(call) for call in open_tool_calls(model.messages).values()
            ]
            model.reactive_attempts = 0

    # --- invariants ------------------------------------------------------------------------------

    @invariant()
    def sessions_match_model_and_replay(self) -> None:
        """History = model; replay = snapshot + tail = live; served views rebuild; invariants."""
        for sid in self.host.active_sessions():
            self.host.session(sid).wait_background()  # compare at a quiet point
        active = set(self.host.active_sessions())
        for sid, model in self.models.items():
            self._check_session(sid, model, live=sid in active)

    def _check_session(self, sid: str, model: Model, *, live: bool) -> None:
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
