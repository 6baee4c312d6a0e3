"""The host's commit observer (the OpenTelemetry instrumentor's hook): told every durable batch
before its caller is answered, and unable to fail a commit."""

from __future__ import annotations

from pathlib import Path

from ctxledger import Host, Message
from ctxledger.events import MessageAppended, ViewServed
from ctxledger.storage import RecordedEvent
from log_capture import capture_logs


def test_a_call_returns_after_the_observer_was_told_its_own_events(tmp_path: Path) -> None:
    told: list[tuple[str, list[RecordedEvent]]] = []
    with Host.open(tmp_path / "db") as host:
        session = host.session("watched")
        host._observe_commits(lambda session_id, records: told.append((session_id, records)))
        session.append(Message.user("hello"))
        assert told and told[-1][0] == "watched"
        assert isinstance(told[-1][1][-1].event, MessageAppended)
        view = session.prepare_step()
        assert isinstance(told[-1][1][-1].event, ViewServed)
        assert told[-1][1][-1].event.through_seq == view.through_seq
        seqs = [record.seq for _, records in told for record in records]
        assert seqs == list(range(seqs[0], host.log.last_seq("watched") + 1))
        host._observe_commits(None)
        session.append(Message.user("unwatched"))
        assert told[-1][1][-1].seq == seqs[-1]


def test_an_observer_that_raises_fails_no_commit_and_is_logged(tmp_path: Path) -> None:
    def broken(session_id: str, records: list[RecordedEvent]) -> None:
        raise RuntimeError("observer bug")

    with capture_logs() as logs, Host.open(tmp_path / "db") as host:
        host._observe_commits(broken)
        session = host.session("s")
        for index in range(5):
            session.append(Message.user(f"m{index}"))
        view = session.prepare_step()
        assert [m.content for m in view.messages][-1] == "m4"
        last = host.log.last_seq("s")
    with Host.open(tmp_path / "db") as host:
        assert host.log.last_seq("s") == last
        assert len(host.session("s").prepare_step().messages) == 5
    failures = [e for e in logs if e["event"] == "the commit observer failed"]
    assert failures and all(e["log_level"] == "error" for e in failures)
    assert {e["session_id"] for e in failures} == {"s"}
