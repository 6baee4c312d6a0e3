"""Model-based test: random appends, conflicts, reads, snapshots and reopenings of the LMDB and
PostgreSQL logs, each checked against a plain list-and-dict model of what the log must hold."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ctxledger.errors import VersionConflictError
from ctxledger.events.types import Event, MessageAppended, UsageReported
from ctxledger.messages import Message
from ctxledger.storage import EventLog, LmdbEventLog, PostgresEventLog
from pg_fixtures import PgServer

SESSIONS = st.sampled_from(["alpha", "beta", "gamma"])
EVENTS = st.lists(
    st.one_of(
        st.builds(UsageReported, prompt_tokens=st.integers(0, 10**6)),
        st.builds(
            MessageAppended,
            message=st.builds(Message.user, st.text(max_size=30).map(lambda text: text * 50)),
        ),
    ),
    min_size=0,
    max_size=4,
)


class EventLogMachine(RuleBasedStateMachine):
    """Drives an LmdbEventLog (a subclass: another backend) and a model side by side."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="ctxledger-stateful-"))
        self.log = self._open()
        self.model: dict[str, list[Event]] = {}
        self.order: list[tuple[str, int]] = []  # (session, seq) in commit order
        self.snapshots: dict[str, dict[int, bytes]] = {}

    def _open(self) -> EventLog:
        return LmdbEventLog.open(self.directory / "log", durability="none", map_size=64 * 1024)

    @rule(session=SESSIONS, events=EVENTS)
    def append(self, session: str, events: list[Event]) -> None:
        """Appending at the current seq records the batch after the session's events."""
        stored = self.model.setdefault(session, [])
        recorded = self.log.append(session, events, expected_seq=len(stored))
        assert [r.seq for r in recorded] == list(
            range(len(stored) + 1, len(stored) + 1 + len(events))
        )
        self.order.extend((session, r.seq) for r in recorded)
        stored.extend(events)
        if not stored:
            del self.model[session]

    @precondition(lambda self: any(self.model.values()))
    @rule(data=st.data())
    def append_stale(self, data: st.DataObject) -> None:
        """Appending at an outdated seq conflicts and changes nothing."""
        session = data.draw(st.sampled_from(sorted(self.model)))
        stale = data.draw(st.integers(0, len(self.model[session]) - 1))
        try:
            self.log.append(session, [UsageReported(prompt_tokens=1)], expected_seq=stale)
        except VersionConflictError as exc:
            assert exc.actual == len(self.model[session])
        else:
            raise AssertionError("a stale append was accepted")

    @rule()
    def reopen(self) -> None:
        """Closing and reopening the directory loses nothing."""
        self.log.close()
        self.log = self._open()

    @precondition(lambda self: any(self.model.values()))
    @rule(data=st.data(), payload=st.binary(max_size=3000))
    def snapshot(self, data: st.DataObject, payload: bytes) -> None:
        """A saved snapshot is stored under its session and seq."""
        session = data.draw(st.sampled_from(sorted(self.model)))
        seq = data.draw(st.integers(1, len(self.model[session])))
        self.log.save_snapshot(session, seq, payload)
        self.snapshots.setdefault(session, {})[seq] = payload

    @precondition(lambda self: any(self.model.values()))
    @rule(data=st.data())
    def bounded_read(self, data: st.DataObject) -> None:
        """Any bounded read returns the model's slice."""
        session = data.draw(st.sampled_from(sorted(self.model)))
        size = len(self.model[session])
        first = data.draw(st.integers(1, size + 1))
        last = data.draw(st.none() | st.integers(0, size + 1))
        limit = data.draw(st.none() | st.integers(0, size))
        expected = self.model[session][first - 1 : last]
        if limit is not None:
            expected = expected[:limit]
        got = self.log.read(session, first, last, limit=limit)
        assert [r.event for r in got] == expected

    @invariant()
    def sessions_hold_the_model(self) -> None:
        """Each session reads back exactly the model's events, with dense seqs."""
        for session, events in self.model.items():
            assert [r.event for r in self.log.read(session)] == events
            assert self.log.last_seq(session) == len(events)

    @invariant()
    def sessions_are_listed_in_creation_order(self) -> None:
        """sessions() lists sessions in the order of their first event."""
        assert self.log.sessions() == list(dict.fromkeys(session for session, _ in self.order))

    @invariant()
    def global_order_is_the_commit_order(self) -> None:
        """read_all returns every event once, in commit order, at positions 1..n."""
        recorded = self.log.read_all()
        assert [(r.session_id, r.seq) for r in recorded] == self.order
        assert [r.position for r in recorded] == list(range(1, len(self.order) + 1))

    @invariant()
    def newest_snapshot_is_loaded(self) -> None:
        """load_snapshot returns the newest snapshot of each session."""
        for session, saved in self.snapshots.items():
            newest = max(saved)
            assert self.log.load_snapshot(session) == (newest, saved[newest])

    def teardown(self) -> None:
        """Close the log and delete its directory."""
        self.log.close()
        shutil.rmtree(self.directory, ignore_errors=True)


class PostgresLogMachine(EventLogMachine):
    """The same rules against a PostgresEventLog, in one schema emptied for each example."""

    server: ClassVar[PgServer]
    schema: ClassVar[str]

    def _open(self) -> EventLog:
        if not hasattr(self, "log"):  # a new example: start from an empty log
            self.server.empty_log(self.schema)
        return PostgresEventLog.open(self.server.dsn, schema=self.schema, durability="none")


for machine in (EventLogMachine, PostgresLogMachine):
    machine.TestCase.settings = settings(settings.default, stateful_step_count=25, deadline=None)
TestEventLogMachine = EventLogMachine.TestCase


@pytest.mark.postgres
class TestPostgresLogMachine(PostgresLogMachine.TestCase):
    """The state machine on PostgreSQL (the suite's server)."""

    @pytest.fixture(autouse=True)
    def _server(self, pg_server: PgServer, pg_schema: str) -> Iterator[None]:
        PostgresEventLog.open(pg_server.dsn, schema=pg_schema).close()  # create the tables
        PostgresLogMachine.server, PostgresLogMachine.schema = pg_server, pg_schema
        yield
