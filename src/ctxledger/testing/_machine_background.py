"""The background-compaction rule of :class:`~ctxledger.testing.SessionMachine`.

A summary that a step set off in the background (at the crossing of ``prepare_threshold``) is
held in the summariser while the agent goes on; then it finishes, fails, is awaited by a step or
is cut short by a crash, and the events the host recorded meanwhile are checked.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from ctxledger.actors.session import Session
from ctxledger.domain import session_tokenizer
from ctxledger.errors import ContextOverflowError, HostClosedError
from ctxledger.events import CheckpointCreated, CompactionFailed, CompactionStarted, SummaryPrepared
from ctxledger.messages import Message
from ctxledger.replay import fold_session, rebuild
from ctxledger.testing._machine_base import MachineBase
from ctxledger.testing._machine_model import HOLD_LIMIT

__all__ = ["BackgroundRules"]


def _settle(session: Session, settled: threading.Event) -> None:
    """Set ``settled`` once no background summary is being prepared for ``session``."""
    with contextlib.suppress(HostClosedError):  # the host was closed while one was held
        session.wait_background()
    settled.set()


class BackgroundRules(MachineBase):
    """The ``background_held`` rule, with the steps it takes."""

    def _start_held(
        self, sid: str, start: int, pressures: list[str]
    ) -> CompactionStarted | None:
        """Append the ``pressures`` as user messages until a background summary starts (and is
        held); return its ``CompactionStarted``, or None when none started after them all."""
        session = self.host.session(sid)
        for pressure in pressures:
            self._append(sid, [Message.user(pressure)], now=True)
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
        # Every draw is made up front: after how many appends a summary starts (or whether one
        # does) is decided on the host's threads, and what is drawn must not depend on it.
        chars = self.config.context_window * 3
        sizes = (chars // 8, chars // 4, chars // 2)
        pressures = [self._text(data, "pressure", sizes) for _ in range(6)]
        texts = [self._text(data, "user", self.text_sizes) for a in actions if a == "append"]
        picks = [
            data.draw(st.integers(0, 2**16), label="pin pick") for a in actions if a == "pin"
        ]
        failure = None
        if ending == "fail":
            failure = data.draw(st.sampled_from(["raise", "none", "empty"]), label="failure")
        self.flaky.hold()
        try:
            started = self._start_held(sid, start, pressures)
            if started is None:
                event("background_held: none started")
                return
            served: str | None = None
            for action in actions:
                if action == "append":
                    self._append(sid, [Message.user(texts.pop(0))], now=True)
                elif action == "view":
                    try:
                        view = session.build_model_view()
                    except ContextOverflowError:
                        # No view over the window is served (nothing is recorded).
                        # Counted as the host counts: calibrated once usage reports taught
                        # the default tokenizer the session's ratio.
                        over = rebuild(self.host.log, sid, tokenizer=self.tokenizer).view
                        folded, _ = fold_session(self.host.log, sid)
                        tokenizer = session_tokenizer(folded, self.tokenizer)
                        count = tokenizer.count_messages(over.messages)
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
                    seq = 1 + picks.pop(0) % last
                    session.pin(seq)
                    model.pins.append((last, seq))
                if action != "view":
                    served = None  # the next view may differ: the history changed
            self._end_held(sid, started, ending, failure)
        finally:
            self.flaky.release()
            self.flaky.mode = None
            for waiter in self._waiters:
                waiter.join(HOLD_LIMIT)
            self._waiters.clear()

    def _end_held(
        self, sid: str, started: CompactionStarted, ending: str, failure: str | None
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
                self.flaky.mode = failure
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
        thread.join(HOLD_LIMIT)
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
