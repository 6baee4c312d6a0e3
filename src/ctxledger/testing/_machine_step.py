"""The ``step`` rule of :class:`~ctxledger.testing.SessionMachine`: ``Session.step``.

A step appends the agent's new messages and serves the next view in one call (one commit when no
compaction is due): the appends get the next seqs and are recorded whatever becomes of the view,
and the view is what replay rebuilds, as after ``append_many`` then ``prepare_step``.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from ctxledger.domain import ModelView
from ctxledger.errors import ContextOverflowError
from ctxledger.events import CheckpointCreated, CompactionFailed, MessageAppended
from ctxledger.messages import Message, ToolCall
from ctxledger.replay import rebuild
from ctxledger.storage import RecordedEvent
from ctxledger.testing._machine_base import MachineBase

__all__ = ["FAILURES", "TOOLS", "StepRules"]

#: The tools the machine's assistant messages call.
TOOLS = ("bash", "read_file", "grep")
#: How the summariser fails in a compacting rule (mostly not).
FAILURES = st.sampled_from([None, None, None, "raise", "none", "empty"])


def _outcome(records: Sequence[RecordedEvent]) -> str:
    if any(isinstance(record.event, CheckpointCreated) for record in records):
        return "compacted"
    if any(isinstance(record.event, CompactionFailed) for record in records):
        return "summary failed"
    return "no compaction"


class StepRules(MachineBase):
    """The ``step`` rule, and what it shares with ``append_agent_steps`` and ``prepare_step``."""

    def _agent_steps(self, data: st.DataObject, steps: int, user: bool) -> list[Message]:
        """Whole agent steps (each a call or a few and their results), maybe after a user
        message."""
        batch = [Message.user(self._text(data, "user", self.text_sizes))] if user else []
        for _ in range(steps):
            tools = data.draw(st.lists(st.sampled_from(TOOLS), min_size=1, max_size=3))
            calls = [ToolCall(f"call{next(self._ids)}", tool, "{}") for tool in tools]
            batch.append(Message.assistant(self._text(data, "assistant", self.text_sizes), calls))
            batch += [Message.tool(self._text(data, "result"), c.id, c.name) for c in calls]
        return batch

    @precondition(lambda self: bool(self._idle()))
    @rule(
        data=st.data(),
        steps=st.integers(0, 3),
        user=st.booleans(),
        failure=FAILURES,
        pending=st.sampled_from(["", "run the tests now"]),
    )
    def step(
        self, data: st.DataObject, steps: int, user: bool, failure: str | None, pending: str
    ) -> None:
        """Append agent steps and serve the view in one call (``Session.step``): what
        ``append_many`` then ``prepare_step`` record, the appends durable whatever the view."""
        sid = data.draw(st.sampled_from(self._idle()), label="session")
        batch = self._agent_steps(data, steps, user)
        self._use(sid)  # a recovery's synthetic results come first
        model = self.models[sid]
        first = len(model.messages) + 1
        model.messages += batch
        if batch:
            model.reactive_attempts = 0
        view, records = self._compacting(sid, failure, lambda s: s.step(batch, pending))
        appended = [r.event.message for r in records if isinstance(r.event, MessageAppended)]
        assert [m.seq for m in appended] == list(range(first, first + len(batch))), sid
        if not isinstance(view, ContextOverflowError):
            assert view.appended_seqs == tuple(range(first, first + len(batch))), sid
        self._check_served(sid, view, records, pending, "step")

    def _check_served(
        self,
        sid: str,
        view: ModelView | ContextOverflowError,
        records: list[RecordedEvent],
        pending: str,
        label: str,
    ) -> None:
        """The view served is what replay rebuilds (or it was refused for the window)."""
        model = self.models[sid]
        if isinstance(view, ContextOverflowError):
            self._check_floor_overflow(sid, view, records, pending)
            return
        assert view.through_seq == len(model.messages), f"{sid}: view through {view.through_seq}"
        rebuilt = rebuild(self.host.log, sid, tokenizer=self.tokenizer).view
        assert rebuilt.view_hash == view.view_hash, f"{sid}: served view does not rebuild"
        model.served = (view.through_seq, view.view_hash)
        model.fits = not any(isinstance(r.event, CompactionFailed) for r in records)
        event(f"{label}: {_outcome(records)}")
