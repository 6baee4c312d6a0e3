"""The write cases of the EventLog contract: appends, conflicts, races, submit, aappend."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest

from ctxledger.errors import (
    InvalidMessageError,
    InvalidSessionIdError,
    StorageError,
    VersionConflictError,
)
from ctxledger.events.types import Event, MessageAppended
from ctxledger.messages import Message
from ctxledger.storage import EventLog, RecordedEvent
from ctxledger.testing._contract_support import ContractHooks, in_threads, mixed_events, usage

__all__ = ["WriteCases"]

#: Seconds a case waits for a callback that must come; only a hung backend reaches it.
_CALLBACK_WAIT = 60.0
#: Conflicts a retrying writer accepts before the case fails (a correct log causes at most 60).
_MAX_RETRIES = 1000


class _Answer:
    """Receives one :meth:`EventLog.submit` outcome; counts the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[RecordedEvent] | None, BaseException | None]] = []
        self.done = threading.Event()

    def __call__(self, records: list[RecordedEvent] | None, error: BaseException | None) -> None:
        self.calls.append((records, error))
        self.done.set()

    def wait(self) -> tuple[list[RecordedEvent] | None, BaseException | None]:
        assert self.done.wait(_CALLBACK_WAIT), "the submit callback was never called"
        return self.calls[0]


class WriteCases(ContractHooks):
    """Appends, version conflicts, concurrent writers, ``submit``, ``aappend``, fault isolation."""

    def test_append_assigns_dense_seqs_from_one(self, log: EventLog) -> None:
        """A new session's first batch gets seqs 1..n."""
        recorded = log.append("s", usage(3), expected_seq=0)
        assert [r.seq for r in recorded] == [1, 2, 3]

    def test_append_continues_seqs_after_previous_batch(self, log: EventLog) -> None:
        """A second batch continues where the first ended."""
        log.append("s", usage(2), expected_seq=0)
        recorded = log.append("s", usage(2), expected_seq=2)
        assert [r.seq for r in recorded] == [3, 4]

    def test_batch_shares_one_commit_timestamp(self, log: EventLog) -> None:
        """All events of one batch carry the timestamp of their commit."""
        recorded = log.append("s", usage(3), expected_seq=0)
        assert len({r.timestamp for r in recorded}) == 1

    def test_recorded_events_name_their_session(self, log: EventLog) -> None:
        """Every recorded event names the session it was appended to."""
        recorded = log.append("alpha", usage(2), expected_seq=0)
        assert {r.session_id for r in recorded} == {"alpha"}

    def test_new_session_with_nonzero_expected_seq_conflicts(self, log: EventLog) -> None:
        """Appending to a new session expecting seq 1 is a version conflict."""
        with pytest.raises(VersionConflictError):
            log.append("s", usage(1), expected_seq=1)

    def test_stale_expected_seq_conflicts(self, log: EventLog) -> None:
        """Appending with an outdated expected seq raises VersionConflictError."""
        log.append("s", usage(2), expected_seq=0)
        with pytest.raises(VersionConflictError):
            log.append("s", usage(1), expected_seq=1)

    def test_conflict_reports_expected_and_actual_seq(self, log: EventLog) -> None:
        """The conflict names the session, the expected seq and the actual one."""
        log.append("s", usage(2), expected_seq=0)
        with pytest.raises(VersionConflictError) as caught:
            log.append("s", usage(1), expected_seq=5)
        assert (caught.value.session_id, caught.value.expected, caught.value.actual) == ("s", 5, 2)

    def test_conflicting_batch_writes_nothing(self, log: EventLog) -> None:
        """A batch rejected for its expected seq leaves the log unchanged."""
        log.append("s", usage(2), expected_seq=0)
        with pytest.raises(VersionConflictError):
            log.append("s", usage(3), expected_seq=0)
        assert (log.last_seq("s"), log.last_position()) == (2, 2)

    def test_conflict_on_new_session_does_not_create_it(self, log: EventLog) -> None:
        """A rejected first batch does not create the session."""
        with pytest.raises(VersionConflictError):
            log.append("s", usage(1), expected_seq=3)
        assert log.sessions() == []

    def test_batch_with_a_non_event_writes_nothing(self, log: EventLog) -> None:
        """A batch holding something that is not an event is refused whole."""
        with pytest.raises(TypeError):
            log.append("s", [*usage(2), {"type": "usage_reported"}], expected_seq=0)  # type: ignore[list-item]
        assert log.last_seq("s") == 0

    def test_empty_batch_records_nothing(self, log: EventLog) -> None:
        """Appending no events returns [] and creates no session."""
        assert log.append("s", [], expected_seq=0) == []
        assert log.sessions() == []

    def test_empty_batch_still_checks_expected_seq(self, log: EventLog) -> None:
        """An empty batch with a wrong expected seq is still a conflict."""
        with pytest.raises(VersionConflictError):
            log.append("s", [], expected_seq=2)

    def test_concurrent_appends_with_same_expected_seq_have_one_winner(self, log: EventLog) -> None:
        """K threads appending at the same expected seq: exactly one wins, the others conflict."""
        log.append("s", usage(1), expected_seq=0)
        threads = 8
        outcomes: list[object] = []

        def contend(index: int) -> None:
            try:
                outcomes.append(log.append("s", usage(3, start=index * 10), expected_seq=1))
            except VersionConflictError as exc:
                outcomes.append(exc)

        in_threads(threads, contend)
        winners = [o for o in outcomes if isinstance(o, list)]
        assert len(winners) == 1 and len(outcomes) == threads

    def test_race_losers_write_nothing(self, log: EventLog) -> None:
        """After a race at one expected seq, the log holds only the winner's batch."""
        log.append("s", usage(1), expected_seq=0)
        won: list[list[RecordedEvent]] = []

        def contend(index: int) -> None:
            with contextlib.suppress(VersionConflictError):
                won.append(log.append("s", usage(2, start=index * 10), expected_seq=1))

        in_threads(6, contend)
        assert log.read("s", 2) == won[0] and log.last_position() == 3

    def test_concurrent_retrying_writers_on_one_session_lose_nothing(self, log: EventLog) -> None:
        """Writers that retry on conflict all land, with dense seqs and no duplicates."""

        def writer(index: int) -> None:
            for step in range(10):
                # Each conflict is another writer's success: 60 in all, unless last_seq lies.
                for _ in range(_MAX_RETRIES):
                    try:
                        log.append(
                            "s", usage(1, start=index * 100 + step), expected_seq=log.last_seq("s")
                        )
                        break
                    except VersionConflictError:
                        continue
                else:
                    raise AssertionError(f"{_MAX_RETRIES} conflicts in a row at last_seq")

        in_threads(6, writer)
        recorded = log.read("s")
        tokens = sorted(r.event.prompt_tokens for r in recorded)  # type: ignore[union-attr]
        assert [r.seq for r in recorded] == list(range(1, 61))
        assert tokens == sorted(i * 100 + s for i in range(6) for s in range(10))

    def test_closed_log_refuses_appends(self, log: EventLog) -> None:
        """Appending to a closed log raises StorageError."""
        log.close()
        with pytest.raises(StorageError):
            log.append("s", usage(1), expected_seq=0)

    def test_negative_expected_seq_is_rejected(self, log: EventLog) -> None:
        """expected_seq below zero is a ValueError."""
        with pytest.raises(ValueError):
            log.append("s", usage(1), expected_seq=-1)

    def test_empty_session_id_is_rejected(self, log: EventLog) -> None:
        """An empty session id is a ValueError."""
        with pytest.raises(ValueError):
            log.append("", usage(1), expected_seq=0)

    def test_aappend_records_like_append(self, log: EventLog) -> None:
        """aappend returns the recorded events, and reading gives back the same events."""

        async def go() -> list[RecordedEvent]:
            return await log.aappend("s", mixed_events(), expected_seq=0)

        recorded = asyncio.run(go())
        assert [r.seq for r in recorded] == list(range(1, 7))
        assert log.read("s") == recorded
        assert [r.event for r in recorded] == mixed_events()

    def test_aappend_conflict_raises_and_writes_nothing(self, log: EventLog) -> None:
        """A stale expected_seq fails the awaiting task with VersionConflictError; none written."""
        log.append("s", usage(2), expected_seq=0)

        async def go() -> None:
            await log.aappend("s", usage(1, start=9), expected_seq=1)

        with pytest.raises(VersionConflictError):
            asyncio.run(go())
        assert log.last_seq("s") == 2 and log.last_position() == 2

    def test_many_tasks_aappending_concurrently_lose_nothing(self, log: EventLog) -> None:
        """64 tasks on one loop, each appending to its own session one event at a time, all land."""

        async def writer(index: int) -> None:
            for step in range(5):
                await log.aappend(f"s{index}", usage(1, start=index * 10 + step), expected_seq=step)

        async def go() -> None:
            await asyncio.gather(*(writer(index) for index in range(64)))

        asyncio.run(go())
        assert log.last_position() == 320
        for index in range(64):
            tokens = [r.event.prompt_tokens for r in log.read(f"s{index}")]  # type: ignore[union-attr]
            assert tokens == [index * 10 + step for step in range(5)]

    def test_tasks_on_two_loops_and_threads_append_together(self, log: EventLog) -> None:
        """Awaiting tasks on two event loops and blocking threads share the log without loss."""

        async def tasks(prefix: str) -> None:
            async def writer(index: int) -> None:
                for step in range(4):
                    await log.aappend(f"{prefix}{index}", usage(1), expected_seq=step)

            await asyncio.gather(*(writer(index) for index in range(8)))

        def blocking(index: int) -> None:
            for step in range(4):
                log.append(f"t{index}", usage(1), expected_seq=step)

        def run(index: int) -> None:
            if index < 2:
                asyncio.run(tasks("ab"[index]))
            else:
                blocking(index - 2)

        in_threads(2 + 8, run)
        assert log.last_position() == 3 * 8 * 4
        assert all(log.last_seq(session) == 4 for session in log.sessions())

    def test_closed_log_refuses_aappend(self, log: EventLog) -> None:
        """Awaiting an append on a closed log raises StorageError."""
        log.close()

        async def go() -> None:
            await log.aappend("s", usage(1), expected_seq=0)

        with pytest.raises(StorageError):
            asyncio.run(go())

    def test_submit_calls_back_once_with_the_records(self, log: EventLog) -> None:
        """submit returns at once; its callback gets the recorded batch, exactly once."""
        answer = _Answer()
        log.submit("s", usage(3), expected_seq=0, callback=answer)
        records, error = answer.wait()
        assert error is None and records == log.read("s")
        assert [r.seq for r in records] == [1, 2, 3]
        log.append("s", usage(1), expected_seq=3)  # a later commit calls nothing again
        assert len(answer.calls) == 1

    def test_submit_reports_a_conflict_to_its_callback(self, log: EventLog) -> None:
        """A stale expected_seq reaches the callback as VersionConflictError; nothing written."""
        log.append("s", usage(2), expected_seq=0)
        answer = _Answer()
        log.submit("s", usage(1), expected_seq=0, callback=answer)
        records, error = answer.wait()
        assert records is None and isinstance(error, VersionConflictError)
        assert log.last_seq("s") == 2

    def test_submit_checks_its_arguments_before_queueing(self, log: EventLog) -> None:
        """A bad session id is raised by submit itself; the callback is never called."""
        answer = _Answer()
        with pytest.raises(InvalidSessionIdError):
            log.submit("", usage(1), expected_seq=0, callback=answer)
        assert answer.calls == [] and log.sessions() == []

    def test_submits_from_one_thread_commit_in_order(self, log: EventLog) -> None:
        """Batches submitted one after another from one thread land in that order."""
        answers = [_Answer() for _ in range(20)]
        for index, answer in enumerate(answers):
            log.submit("s", usage(1, start=index), expected_seq=index, callback=answer)
        assert all(answer.wait()[1] is None for answer in answers)
        assert [r.event for r in log.read("s")] == usage(20)

    def test_closed_log_answers_submit_with_storage_error(self, log: EventLog) -> None:
        """A submit to a closed log is answered (raised or called back) with StorageError."""
        log.close()
        answer = _Answer()
        try:
            log.submit("s", usage(1), expected_seq=0, callback=answer)
        except StorageError:
            return
        assert isinstance(answer.wait()[1], StorageError)

    def test_an_event_that_cannot_be_encoded_fails_its_append_alone(self, log: EventLog) -> None:
        """Metadata msgpack cannot hold fails that append; concurrent appends all land."""
        bad = Message(role="user", content="hi", metadata={"handle": object()}).with_seq(1)
        outcomes: dict[int, object] = {}

        def append(index: int) -> None:
            events: list[Event] = usage(2, start=index * 10)
            if index == 0:
                events = [*events, MessageAppended(message=bad)]
            try:
                outcomes[index] = log.append(f"w{index}", events, expected_seq=0)
            except InvalidMessageError as exc:
                outcomes[index] = exc

        in_threads(6, append)
        assert isinstance(outcomes[0], InvalidMessageError)
        assert log.last_seq("w0") == 0 and "w0" not in log.sessions()
        assert all(log.last_seq(f"w{index}") == 2 for index in range(1, 6))
        assert log.last_position() == 10

    def test_closing_twice_is_harmless(self, log: EventLog) -> None:
        """close() may be called again; the log stays closed."""
        log.close()
        log.close()
        with pytest.raises(StorageError):
            log.last_seq("s")
