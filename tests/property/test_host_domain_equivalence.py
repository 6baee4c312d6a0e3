"""The host and ``DomainSession`` record the same events for the same commands (issue 28).

``step`` included: the host writes a step's appends and view in one batch, the kit records
them one after the other, and both call :func:`ctxledger.domain.step.decide_step`; so are a
step's and an ``append_many``'s ``usage`` (recorded before the messages, in the same batch).

Every decision is one pure domain function that the history actor and the testing kit both
call, so a random command sequence run on a real :class:`~ctxledger.Host` (an in-memory or an
LMDB log, a fixed clock, counted ids, a deterministic summariser, background compaction off so
that nothing races) and on a :class:`~ctxledger.testing.DomainSession` must give byte-identical
committed events, the same answers and the same errors for invalid commands.

``fork`` included: a fork at a drawn point (or a bad one) must record the same first events and
serve the same first view on both, and fail with the same error.

``prepare_step(defer_record=True)`` included: the host folds the view at once and commits its
``ViewServed`` with the session's next batch (a read of the session commits it alone), so until
then its log lacks that one event, and nothing else.

Fields left out of the comparison, because they legitimately differ:

* ``SessionOpened.created_at``: the host stamps a new session with its clock; a DomainSession
  records no creation time.
* ``summary_seconds`` on a checkpoint (also the one a ``CheckpointReverted`` restores): the
  wall time of the summariser call, measured by the host, not measured by the kit.
* ``CompactionResult.waited_seconds`` (an answer, not an event): the host's wall time waiting
  for the summariser.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import given, note, settings
from hypothesis import strategies as st

from ctxledger import Config, Host, Message, SummaryRequest, ToolCall
from ctxledger.checkpoints import Checkpoint
from ctxledger.domain import CompactionResult
from ctxledger.errors import CtxLedgerError
from ctxledger.events import (
    CheckpointCreated,
    CheckpointReverted,
    Event,
    SessionOpened,
    ViewServed,
)
from ctxledger.events.codec import encode_payload
from ctxledger.storage import MemoryEventLog
from ctxledger.testing import DomainSession, digest_summarizer

BASE = Config(context_window=2_000, min_retain_rounds=1, prepare_threshold=0.0)
CONFIGS = [
    BASE,
    BASE.replace(context_window=3_000, keep_first_request=False),
    BASE.replace(max_total_tokens=1_000),
    BASE.replace(max_reactive_retries=1, compression_threshold=0.6),
]
NOW = 1_765_000_000.0
REFUSE = "refuse"  # a manual compaction with this focus gets no summary

ACTIONS = [
    "user", "user", "tool_step", "tool_step", "open_call", "tool_result", "bad_tool_result",
    "pin", "usage", "retract", "retract_replacing", "clear", "compact", "compact_if_needed",
    "revert", "reactive", "prepare_step", "prepare_step", "build_model_view", "config",
    "wait_background", "current_messages", "explain", "view_at", "audit", "step", "step",
    "prepare_deferred", "prepare_deferred", "fork",
]  # fmt: skip


def _summarizer(request: SummaryRequest) -> str:
    """:func:`digest_summarizer`, failing for a focus of :data:`REFUSE` (a failed compaction)."""
    if request.focus == REFUSE:
        raise RuntimeError("the summariser refuses")
    return digest_summarizer(request)


def _counter() -> Callable[[], str]:
    ids = itertools.count(1)
    return lambda: f"c{next(ids)}"


@contextmanager
def _host(config: Config, backend: str = "memory") -> Iterator[Host]:
    options: dict[str, Any] = {
        "config": config,
        "summarizer": _summarizer,
        "clock": lambda: NOW,
        "id_factory": _counter(),
    }
    if backend == "memory":
        with Host(MemoryEventLog(), **options) as host:
            yield host
        return
    with tempfile.TemporaryDirectory() as folder, Host.open(Path(folder) / "db", **options) as host:
        yield host


def _comparable(value: Any) -> Any:
    """``value`` without the fields that legitimately differ (see the module docstring)."""
    if isinstance(value, SessionOpened):
        return msgspec.structs.replace(value, created_at=0.0)
    if isinstance(value, Checkpoint):
        return msgspec.structs.replace(value, summary_seconds=0.0)
    if isinstance(value, CheckpointCreated):
        return msgspec.structs.replace(value, checkpoint=_comparable(value.checkpoint))
    if isinstance(value, CheckpointReverted) and value.restored is not None:
        return msgspec.structs.replace(value, restored=_comparable(value.restored))
    if isinstance(value, CompactionResult):
        return msgspec.structs.replace(value, waited_seconds=0.0)
    return value


def _encoded(events: list[Event]) -> list[bytes]:
    return [encode_payload(_comparable(event)) for event in events]


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("answer", _comparable(call()))
    except CtxLedgerError as exc:
        return ("error", (type(exc).__name__, str(exc)))


class _Driver:
    """Draws one command and runs it on both sessions."""

    def __init__(self, host: Host, domain: DomainSession, data: st.DataObject) -> None:
        self.host = host
        self.live = host.session("s")
        self.domain = domain
        self.data = data
        self.calls = itertools.count(1)
        self.forks = itertools.count(1)
        self.deferred = False  # a view served with defer_record may not be in the log yet

    def draw(self, strategy: st.SearchStrategy[Any]) -> Any:
        return self.data.draw(strategy)

    def text(self, label: str) -> str:
        return f"{label} " + "x" * self.draw(st.integers(0, 700))

    def call(self) -> ToolCall:
        return ToolCall(f"t{next(self.calls)}", "bash", '{"command": "ls"}')

    def open_call_id(self) -> str:
        """A tool call left open, if the conversation has one (else an unknown id)."""
        open_calls = list(self.domain.state.open_tool_calls())
        return open_calls[0] if open_calls else "nope"

    def usage(self) -> dict[str, int] | None:
        """The usage a step or a batch comes with, if any (the call that answered with it)."""
        if not self.draw(st.booleans()):
            return None
        prompt = self.draw(st.integers(0, 3_000))
        return {"prompt_tokens": prompt, "completion_tokens": self.draw(st.integers(0, 200))}

    def step(self) -> None:
        # An open tool call is answered more often than not (as agents do), and a checkpoint
        # is reverted now and then.
        state = self.domain.state
        likely = ["tool_result"] * 3 if state.open_tool_calls() else []
        likely += ["revert", "audit"] if state.active_checkpoint is not None else []
        action = self.draw(st.sampled_from(likely + ACTIONS))
        both: tuple[Callable[[Any], Any], ...]
        last = self.domain.state.last_seq
        if action == "user":
            message = Message.user(self.text("ask"))
            both = (lambda s: s.append(message),)
        elif action == "tool_step":
            call = self.call()
            batch = [
                Message.assistant("run", [call]),
                Message.tool(self.text("output"), call.id, "bash"),
                Message.assistant(self.text("done")),
            ]
            usage = self.usage()
            both = (lambda s: s.append_many(batch, usage=usage),)
        elif action == "open_call":
            call = self.call()
            opened = Message.assistant("run", [call])
            both = (lambda s: s.append(opened),)
        elif action in ("tool_result", "bad_tool_result"):
            call_id = self.open_call_id() if action == "tool_result" else "unknown-call"
            result = Message.tool(self.text("result"), call_id, "bash")
            both = (lambda s: s.append(result),)
        elif action == "pin":
            seq = self.draw(st.integers(0, last + 1))
            both = (lambda s: s.pin(seq),)
        elif action == "usage":
            prompt = self.draw(st.integers(0, 3_000))
            both = (lambda s: s.record_usage(prompt, 50, cached_tokens=prompt // 2),)
        elif action == "retract":
            both = (lambda s: s.retract_last(),)
        elif action == "retract_replacing":
            replacement = [Message.user(self.text("instead"))]
            both = (lambda s: s.retract_last(replacement),)
        elif action == "clear":
            both = (lambda s: s.clear(),)
        elif action == "compact":
            focus = self.draw(st.sampled_from([None, "keep the file names", REFUSE]))
            both = (lambda s: s.compact(focus),)
        elif action == "compact_if_needed":
            both = (lambda s: s.compact_if_needed(),)
        elif action == "revert":
            both = (lambda s: s.revert_compaction(reason="bad summary"),)
        elif action == "reactive":
            both = (lambda s: s.reactive_compact(),)
        elif action == "step":
            # An agent's step: what it appends (a tool round, an answer, a new request, an
            # answer to an open call, nothing, or a result for a call never made) and the view.
            call = self.call()
            kind = self.draw(st.sampled_from(["tool", "answer", "user", "result", "none", "bad"]))
            batch = {
                "tool": [
                    Message.assistant("run", [call]),
                    Message.tool(self.text("output"), call.id, "bash"),
                ],
                "answer": [Message.assistant(self.text("done"))],
                "user": [Message.assistant(self.text("done")), Message.user(self.text("ask"))],
                "result": [Message.tool(self.text("result"), self.open_call_id(), "bash")],
                "none": [],
                "bad": [Message.user("fine"), Message.tool("x", "unknown-call", "bash")],
            }[kind]
            pending = self.draw(st.sampled_from(["", "p" * 300]))
            usage = self.usage()
            both = (lambda s: s.step(batch, pending, usage=usage),)
        elif action in ("prepare_step", "build_model_view"):
            pending = self.draw(st.sampled_from(["", "p" * 300]))
            both = (lambda s: getattr(s, action)(pending),)
        elif action == "prepare_deferred":
            pending = self.draw(st.sampled_from(["", "p" * 300]))
            both = (lambda s: s.prepare_step(pending, defer_record=True),)
            self.deferred = True
        elif action == "config":
            config = self.draw(st.sampled_from(CONFIGS))
            host_side = _outcome(lambda: self.host.session("s", config=config) and None)
            domain_side = _outcome(lambda: self.domain.change_config(config))
            self.compare(action, host_side, domain_side)
            return
        elif action == "fork":
            fresh = f"f{next(self.forks)}"
            new_id = self.draw(st.sampled_from([fresh, fresh, "s", ""]))
            at_seq = self.draw(st.none() | st.integers(-1, last + 1))
            both = (lambda s: self.forked(s.fork(new_id, at_seq)),)
        elif action == "wait_background":
            both = (lambda s: s.wait_background(),)
        elif action == "current_messages":
            limit = self.draw(st.sampled_from([None, 0, 2]))
            both = (lambda s: s.current_messages(limit),)
        elif action == "audit":
            both = (lambda s: s.audit(),)
        else:
            seq = self.draw(st.integers(0, last + 1))
            read = "explain" if action == "explain" else "view_at"
            both = (lambda s: getattr(s, read)(seq),)
        (run,) = both
        self.compare(action, _outcome(lambda: run(self.live)), _outcome(lambda: run(self.domain)))

    def forked(self, fork: Any) -> tuple[Any, list[bytes]]:
        """A new fork's first view (or error), then its events."""
        view = _outcome(fork.build_model_view)
        if isinstance(fork, DomainSession):
            return view, _encoded(fork.events)
        return view, _encoded([record.event for record in self.host.log.read(fork.id)])

    def compare(self, action: str, host_side: Any, domain_side: Any) -> None:
        note(f"{action}: {domain_side[0]} {str(domain_side[1])[:160]}")
        assert host_side == domain_side, (action, host_side, domain_side)

    def events(self) -> tuple[list[bytes], list[bytes]]:
        host_events = [record.event for record in self.host.log.read("s")]
        return _encoded(host_events), _encoded(self.domain.events)

    def check_events(self) -> None:
        """The host's log holds the kit's events; only a view served with ``defer_record``
        since the session last wrote may be missing, at the end."""
        host_events, domain_events = self.events()
        if host_events == domain_events:
            self.deferred = False
            return
        assert self.deferred, "the logs differ"
        assert host_events == domain_events[:-1], "more than a held view is missing"
        assert isinstance(self.domain.events[-1], ViewServed)


def _run(config: Config, steps: int, data: st.DataObject, backend: str) -> None:
    domain = DomainSession(
        config,
        summarizer=_summarizer,
        session_id="s",
        clock=lambda: NOW,
        id_factory=_counter(),
    )
    with _host(config, backend) as host:
        driver = _Driver(host, domain, data)
        for _ in range(steps):
            driver.step()
            driver.check_events()
        driver.live.current_messages(0)  # a read records a held view first
        host_events, domain_events = driver.events()
        assert host_events == domain_events


@given(config=st.sampled_from(CONFIGS), steps=st.integers(1, 40), data=st.data())
def test_host_and_domain_session_record_the_same_events(
    config: Config, steps: int, data: st.DataObject
) -> None:
    """The same commands on a Host and a DomainSession: same answers, errors and events."""
    _run(config, steps, data, "memory")


@settings(max_examples=8)
@given(config=st.sampled_from(CONFIGS), steps=st.integers(1, 40), data=st.data())
def test_the_same_events_on_an_lmdb_log(config: Config, steps: int, data: st.DataObject) -> None:
    """As above, on the default LMDB log (what the host reads back after the journal)."""
    _run(config, steps, data, "lmdb")
