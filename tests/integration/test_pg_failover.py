"""Failover between host processes sharing one PostgreSQL database (real processes, signals).

A ``serve`` child runs agent steps on a session under a short lease; a ``standby`` child takes
the session over once the first one is gone (SIGKILL) or paused (SIGSTOP). See
``pg_failover_child.py`` for the protocol.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from queue import Empty, Queue

import pytest

from ctxledger.domain import CharTokenizer, build_view
from ctxledger.events import MessageAppended, ToolResultSynthesized, ViewServed
from ctxledger.replay import verify
from ctxledger.replay.loading import fold_session
from ctxledger.storage import PostgresEventLog
from ctxledger.testing.processes import kill, reap

pytestmark = pytest.mark.postgres

CHILD = Path(__file__).with_name("pg_failover_child.py")
TTL = "1.0"  # seconds: a short lease, so the takeover comes quickly
SESSION = "agent-1"


class Child:
    """A child process whose stdout lines are read by a thread into a queue."""

    def __init__(self, dsn: str, host_id: str, role: str, *extra: str, ttl: str = TTL) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), dsn, host_id, ttl, SESSION, role, *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: Queue[str | None] = Queue()
        self.seen: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.endswith("\n"):  # a line torn by SIGKILL says nothing
                self.lines.put(line.strip())
        self.lines.put(None)

    def expect(self, prefix: str, timeout: float = 60) -> str:
        """The next line starting with ``prefix`` (earlier lines are kept in ``seen``)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except Empty:
                message = f"no {prefix!r} line within {timeout} s: {self.seen}"
                raise AssertionError(message) from None
            if line is None:
                assert self.proc.stderr is not None
                raise AssertionError(f"child ended before {prefix!r}: {self.proc.stderr.read()}")
            self.seen.append(line)
            if line.startswith(prefix):
                return line

    def drain(self) -> None:
        """Collect the lines printed so far (the process has ended)."""
        self._reader.join(timeout=30)
        while True:
            try:
                line = self.lines.get_nowait()
            except Empty:
                return
            if line is not None:
                self.seen.append(line)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def acked(self) -> list[int]:
        acks = [line.split()[1:] for line in self.seen if line.startswith("ack")]
        return [int(seq) for seqs in acks for seq in seqs]

    def views(self) -> list[str]:
        return [line.split()[2] for line in self.seen if line.startswith("view")]

    def close(self) -> None:
        kill(self.proc)
        self._reader.join(timeout=30)  # it reads to the end of the pipe before it is closed
        reap(self.proc)


@pytest.fixture
def dsn(pg_database: str) -> Iterator[str]:
    yield pg_database


def message_seqs(log: PostgresEventLog) -> list[int]:
    return [
        record.event.message.seq
        for record in log.read(SESSION)
        if isinstance(record.event, MessageAppended | ToolResultSynthesized)
        and record.event.message.seq is not None
    ]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_sigkill_mid_step_fails_over_to_the_other_host(dsn: str, seed: int) -> None:
    """Kill the serving host while it appends; the standby takes over (at once: the killed
    process ran on this machine, so its death is proven, see test_pg_restart.py).

    Every acknowledged append is there, message seqs are dense, verify passes, the pending tool
    call (if the kill fell between a call and its result) is answered, and the standby's
    recovered view equals the last view served by the killed host (or, when the killed host
    appended after its last view, that view rebuilds from the log to the hash it served).
    """
    rng = random.Random(seed)
    serving = Child(dsn, "host-a", "serve")
    standby = Child(dsn, "host-b", "standby")
    try:
        for _ in range(5):
            serving.expect("view")
        standby.expect("ready")
        deadline = time.monotonic() + rng.uniform(0.05, 0.4)
        while time.monotonic() < deadline:
            serving.expect("ack")  # kill while it is appending
        serving.proc.send_signal(signal.SIGKILL)
        serving.proc.wait(timeout=30)
        serving.drain()
        standby.send("go")
        standby.expect("took")
        recovered = standby.expect("recovered").split()[1]
        standby.expect("ack")
        standby.send("quit")
        assert standby.proc.wait(timeout=60) == 0
    finally:
        serving.close()
        standby.close()

    with PostgresEventLog.open(dsn) as log:
        seqs = message_seqs(log)
        assert seqs == list(range(1, len(seqs) + 1)), "message seqs are not dense"
        missing = set(serving.acked()) - set(seqs)
        assert not missing, f"acknowledged appends lost: {sorted(missing)}"
        report = verify(log, SESSION)
        assert report.ok, report
        records = log.read(SESSION)
        served = [r for r in records if isinstance(r.event, ViewServed)]
        taken = next(r for r in reversed(served) if r.event.view_hash == recovered)
        before = [r for r in served if r.seq < taken.seq]
        last_served = before[-1]
        assert serving.views()[-1] in [r.event.view_hash for r in before]
        appended_after = [
            r
            for r in records
            if isinstance(r.event, MessageAppended) and last_served.seq < r.seq < taken.seq
        ]
        if appended_after:
            state, _ = fold_session(log, SESSION, through_event_seq=last_served.seq)
            rebuilt = build_view(state, tokenizer=CharTokenizer()).view_hash
            assert rebuilt == last_served.event.view_hash
        else:
            assert recovered == last_served.event.view_hash
        # Recovered as after a crash: no tool call is left unanswered.
        state, _ = fold_session(log, SESSION)
        history = list(state.history)
        called = {call.id for message in history for call in message.tool_calls}
        answered = {m.tool_call_id for m in history if m.tool_call_id is not None}
        assert called <= answered
        # The recovered view shows every acknowledged message.
        assert taken.event.through_seq >= max(serving.acked())


@pytest.mark.slow
def test_sigkill_while_a_tool_runs_answers_the_call_on_takeover(dsn: str) -> None:
    """Killed while its tool call is pending: the other host answers it as interrupted."""
    serving = Child(dsn, "host-a", "serve", "4")
    standby = Child(dsn, "host-b", "standby")
    try:
        serving.expect("calling")
        standby.expect("ready")
        serving.proc.send_signal(signal.SIGKILL)
        serving.proc.wait(timeout=30)
        serving.drain()
        standby.send("go")
        standby.expect("took")
        recovered = standby.expect("recovered").split()[1]
        standby.expect("ack")
        standby.send("quit")
        assert standby.proc.wait(timeout=60) == 0
    finally:
        serving.close()
        standby.close()
    with PostgresEventLog.open(dsn) as log:
        records = log.read(SESSION)
        synthesized = [r.event for r in records if isinstance(r.event, ToolResultSynthesized)]
        assert [event.message.tool_call_id for event in synthesized] == ["call-4"]
        seqs = message_seqs(log)
        assert seqs == list(range(1, len(seqs) + 1))
        assert set(serving.acked()) <= set(seqs)
        assert verify(log, SESSION).ok
        served = [r.event for r in records if isinstance(r.event, ViewServed)]
        assert served[-2].view_hash == serving.views()[-1]  # host-a's last view was step 3's
        assert served[-1].view_hash == recovered
        assert served[-1].through_seq == synthesized[0].message.seq


@pytest.mark.slow
def test_paused_host_fails_its_next_append_and_writes_nothing(dsn: str) -> None:
    """SIGSTOP the serving host, let the standby take over, SIGCONT: the paused host's next
    step fails with a lease error and the log does not change."""
    serving = Child(dsn, "host-a", "serve")
    standby = Child(dsn, "host-b", "standby")
    try:
        for _ in range(3):
            serving.expect("view")
        standby.expect("ready")
        serving.proc.send_signal(signal.SIGSTOP)
        standby.send("go")
        standby.expect("took")
        standby.expect("recovered")
        standby.expect("ack")
        with PostgresEventLog.open(dsn) as log:
            position = log.last_position()
            last_seq = log.last_seq(SESSION)
            lease = log.current_lease(SESSION)
        assert lease is not None and lease.host_id == "host-b"
        serving.proc.send_signal(signal.SIGCONT)
        error = serving.expect("error", timeout=120).split()
        assert error[1] in {"LeaseLostError", "LeaseHeldError"}, error
        assert serving.proc.wait(timeout=60) == 0
        with PostgresEventLog.open(dsn) as log:
            assert log.last_position() == position, "the paused host wrote after the takeover"
            assert log.last_seq(SESSION) == last_seq
            now = log.current_lease(SESSION)
            assert now is not None and (now.host_id, now.epoch) == (lease.host_id, lease.epoch)
            assert verify(log, SESSION).ok
        standby.send("quit")
        assert standby.proc.wait(timeout=60) == 0
    finally:
        if serving.proc.poll() is None:
            os.kill(serving.proc.pid, signal.SIGCONT)
        serving.close()
        standby.close()
