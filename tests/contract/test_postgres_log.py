"""What the PostgreSQL backend promises beyond the contract (a real server, a schema per test)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from log_backends import flip_byte

from ctxledger.errors import (
    CorruptRecordError,
    InvalidMessageError,
    StorageError,
    VersionConflictError,
)
from ctxledger.events.codec import encode_payload
from ctxledger.events.types import Event, MessageAppended, UsageReported
from ctxledger.messages import Message
from ctxledger.storage import LmdbEventLog, PostgresEventLog, open_log
from pg_fixtures import PgServer

pytestmark = pytest.mark.postgres


def usage(count: int, start: int = 0) -> list[Event]:
    """``count`` small events, told apart by their ``prompt_tokens``."""
    return [UsageReported(prompt_tokens=start + index) for index in range(count)]


def messages(count: int, size: int, start: int = 1) -> list[Event]:
    """``count`` tool-result messages of about ``size`` characters of varied text."""
    events: list[Event] = []
    for seq in range(start, start + count):
        body = " ".join(f"line {seq}.{n}: value={n * seq % 977} ok" for n in range(size // 24))
        events.append(
            MessageAppended(message=Message.tool(body, f"call_{seq}", "bash").with_seq(seq))
        )
    return events


@pytest.fixture
def target(pg_server: PgServer, pg_schema: str) -> tuple[str, str]:
    """The DSN and schema of this test's log."""
    return pg_server.dsn, pg_schema


@pytest.fixture
def log(target: tuple[str, str]) -> Iterator[PostgresEventLog]:
    """An empty PostgreSQL log, durability "sync"."""
    opened = PostgresEventLog.open(target[0], schema=target[1])
    yield opened
    opened.close()


@contextmanager
def head_held(dsn: str, schema: str) -> Iterator[None]:
    """Hold the log's head row locked from another connection: every group waits meanwhile."""
    with psycopg.connect(dsn) as conn:
        conn.execute(f"SELECT 1 FROM {schema}.head FOR UPDATE")
        yield
        conn.rollback()


def appends_in_one_group(
    log: PostgresEventLog, target: tuple[str, str], requests: list[tuple[str, list[Event], int]]
) -> dict[str, object]:
    """Queue ``requests`` (session, events, expected seq) behind a held group; their outcomes.

    A first append takes the head lock's place in line; the requests then queue in the
    committer and form the next group together once the lock is released.
    """
    outcomes: dict[str, object] = {}

    def run(session_id: str, events: list[Event], expected: int) -> None:
        try:
            outcomes[session_id] = log.append(session_id, events, expected_seq=expected)
        except Exception as exc:
            outcomes[session_id] = exc

    with head_held(*target):
        first = threading.Thread(target=run, args=("first", usage(1), 0))
        first.start()
        while not _writer_waiting(target[0]):
            threading.Event().wait(0.005)
        threads = [threading.Thread(target=run, args=request) for request in requests]
        for thread in threads:
            thread.start()
        committer = log._committer
        assert committer is not None
        while committer._queue.qsize() < len(requests):
            threading.Event().wait(0.001)
    for thread in [first, *threads]:
        thread.join()
    return outcomes


def _writer_waiting(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ctxledger' "
            "AND wait_event_type = 'Lock'"
        ).fetchone()
    return bool(row and row[0])


def test_events_survive_reopen(target: tuple[str, str]) -> None:
    """Closing and reopening the schema loses nothing; seqs and positions continue."""
    with PostgresEventLog.open(target[0], schema=target[1]) as log:
        log.append("s", usage(3), expected_seq=0)
    with PostgresEventLog.open(target[0], schema=target[1]) as log:
        recorded = log.append("s", usage(1), expected_seq=3)
        assert [r.event for r in log.read("s")] == [*usage(3), *usage(1)]
    assert (recorded[0].seq, recorded[0].position) == (4, 4)


def test_damaged_event_row_names_session_and_seq(
    log: PostgresEventLog, target: tuple[str, str]
) -> None:
    """A flipped byte in a stored event fails its checksum: the error names session and seq."""
    log.append("a", messages(3, 600), expected_seq=0)
    log.append("b", usage(2), expected_seq=0)
    flip_byte(*target, "events", "a", 2)
    for read in (
        lambda: log.read("a"),
        lambda: list(log.iter_bodies("a")),
        lambda: list(log.iter_events("a")),
        lambda: log.read_all(),
    ):
        with pytest.raises(CorruptRecordError) as caught:
            read()
        assert (caught.value.session_id, caught.value.seq) == ("a", 2)
    assert [r.event for r in log.read("b")] == usage(2)
    assert [r.seq for r in log.read("a", 3)] == [3]


def test_requests_queued_together_commit_in_one_transaction(
    log: PostgresEventLog, target: tuple[str, str]
) -> None:
    """Appends that queue while a group waits are committed together (one commit time)."""
    outcomes = appends_in_one_group(log, target, [(f"s{i}", usage(2), 0) for i in range(6)])
    stamps = {r.timestamp for i in range(6) for r in outcomes[f"s{i}"]}  # type: ignore[attr-defined]
    assert len(stamps) == 1 and log.last_position() == 13


def test_conflict_fails_alone_in_its_group(log: PostgresEventLog, target: tuple[str, str]) -> None:
    """A stale expected seq fails only its own append; the rest of the group commits."""
    log.append("old", usage(2), expected_seq=0)
    outcomes = appends_in_one_group(
        log, target, [("a", usage(1), 0), ("old", usage(1), 1), ("b", usage(1), 0)]
    )
    assert isinstance(outcomes["old"], VersionConflictError)
    assert (log.last_seq("a"), log.last_seq("old"), log.last_seq("b")) == (1, 2, 1)


def test_value_the_server_refuses_fails_alone(
    log: PostgresEventLog, target: tuple[str, str]
) -> None:
    """A row the server refuses (a data exception, here from a trigger) fails that append
    alone, with nothing of it written; the others of its group commit."""
    dsn, schema = target
    _refuse_rows(dsn, schema, errcode="22023")
    outcomes = appends_in_one_group(
        log, target, [("a", usage(1), 0), ("refused-1", usage(3), 0), ("b", usage(2), 0)]
    )
    assert isinstance(outcomes["refused-1"], InvalidMessageError)
    assert "refused-1" not in log.sessions() and log.last_seq("refused-1") == 0
    assert (log.last_seq("a"), log.last_seq("b")) == (1, 2)
    assert [r.position for r in log.read_all()] == [1, 2, 3, 4]
    assert log.append("c", usage(1), expected_seq=0)[0].position == 5


def test_server_failure_fails_the_whole_group(
    log: PostgresEventLog, target: tuple[str, str]
) -> None:
    """An error of the server itself (here a disk-full error raised by a trigger) fails every
    append of the group, with nothing visible; the log appends again once it is gone."""
    dsn, schema = target
    _refuse_rows(dsn, schema, errcode="53100")
    outcomes = appends_in_one_group(
        log, target, [("a", usage(1), 0), ("refused-1", usage(1), 0), ("b", usage(1), 0)]
    )
    assert all(isinstance(outcomes[name], StorageError) for name in ("a", "refused-1", "b"))
    assert log.last_position() == 1  # "first", its own group
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TRIGGER refuse ON {schema}.events")
    assert log.append("a", usage(1), expected_seq=0)[0].position == 2


def _refuse_rows(dsn: str, schema: str, errcode: str) -> None:
    """Make the server refuse event rows of sessions named ``refused-*`` with ``errcode``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f"CREATE FUNCTION {schema}.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF EXISTS (SELECT 1 FROM {schema}.sessions WHERE number = NEW.session "
            f"AND session_id LIKE 'refused-%') THEN "
            f"RAISE EXCEPTION 'refused by the test' USING ERRCODE = '{errcode}'; END IF; "
            "RETURN NEW; END $$"
        )
        conn.execute(
            f"CREATE TRIGGER refuse BEFORE INSERT ON {schema}.events "
            f"FOR EACH ROW EXECUTE FUNCTION {schema}.refuse()"
        )


@pytest.mark.parametrize(
    ("durability", "setting"), [("sync", "on"), ("group", "on"), ("none", "off")]
)
def test_durability_reaches_synchronous_commit(
    target: tuple[str, str], durability: str, setting: str
) -> None:
    """Appends commit with synchronous_commit on ("sync", "group") or off ("none")."""
    with PostgresEventLog.open(target[0], schema=target[1], durability=durability) as log:  # type: ignore[arg-type]
        log.append("s", usage(1), expected_seq=0)
        writer = log._writer
        assert writer is not None and writer._conn is not None
        (value,) = writer._conn.execute("SHOW synchronous_commit").fetchone() or ("",)
        writer._conn.rollback()
    assert value == setting


def test_two_handles_share_one_dense_global_order(target: tuple[str, str]) -> None:
    """Two handles writing one schema interleave without gaps; a stale seq still conflicts."""
    with (
        PostgresEventLog.open(target[0], schema=target[1]) as one,
        PostgresEventLog.open(target[0], schema=target[1]) as two,
    ):
        one.append("a", usage(2), expected_seq=0)
        two.append("b", usage(1), expected_seq=0)
        two.append("a", usage(1), expected_seq=2)
        with pytest.raises(VersionConflictError):
            one.append("a", usage(1), expected_seq=2)
        one.append("a", usage(1), expected_seq=3)
        recorded = two.read_all()
    assert [(r.session_id, r.seq, r.position) for r in recorded] == [
        ("a", 1, 1),
        ("a", 2, 2),
        ("b", 1, 3),
        ("a", 3, 4),
        ("a", 4, 5),
    ]


def test_readonly_log_reads_but_refuses_writes(
    log: PostgresEventLog, target: tuple[str, str]
) -> None:
    """A read-only handle reads everything and refuses appends, snapshots and leases."""
    log.append("s", usage(2), expected_seq=0)
    with PostgresEventLog.open(target[0], schema=target[1], readonly=True) as readonly:
        assert [r.seq for r in readonly.read("s")] == [1, 2]
        for write in (
            lambda: readonly.append("s", usage(1), expected_seq=2),
            lambda: readonly.save_snapshot("s", 2, b"x"),
            lambda: readonly.acquire_lease("s", "h"),
        ):
            with pytest.raises(StorageError, match="read-only"):
                write()


def test_readonly_open_of_a_missing_log_fails_and_creates_nothing(pg_server: PgServer) -> None:
    """Opening a schema that holds no log read-only is a StorageError; no schema is created."""
    schema = pg_server.new_schema()
    with pytest.raises(StorageError, match="no ctxledger event log"):
        PostgresEventLog.open(pg_server.dsn, schema=schema, readonly=True)
    with psycopg.connect(pg_server.dsn) as conn:
        row = conn.execute("SELECT to_regnamespace(%s)", [schema]).fetchone()
    assert row == (None,)


def test_log_of_another_format_is_refused(log: PostgresEventLog, target: tuple[str, str]) -> None:
    """A schema whose format row names another format is refused on open."""
    with psycopg.connect(target[0], autocommit=True) as conn:
        conn.execute(f"UPDATE {target[1]}.meta SET value = 'other/9' WHERE name = 'format'")
    with pytest.raises(StorageError, match="other/9"):
        PostgresEventLog.open(target[0], schema=target[1])


def test_invalid_schema_name_is_a_config_error(pg_server: PgServer) -> None:
    """A schema name that is not a plain identifier is refused before connecting."""
    with pytest.raises(ValueError, match="schema"):
        PostgresEventLog.open(pg_server.dsn, schema="x; DROP TABLE y")


def test_unreachable_server_is_a_storage_error(tmp_path: Path) -> None:
    """A DSN naming no server fails to open with a StorageError that names it."""
    with pytest.raises(StorageError, match="cannot connect"):
        PostgresEventLog.open(f"postgresql://nobody@/x?host={tmp_path}&port=1", timeout=2)


def test_trained_dictionary_is_read_by_another_handle(target: tuple[str, str]) -> None:
    """Records compressed with a dictionary trained by one handle decode in another opened
    before the training."""
    with (
        PostgresEventLog.open(target[0], schema=target[1], durability="none") as one,
        PostgresEventLog.open(target[0], schema=target[1], durability="none") as two,
    ):
        one.append("s", messages(300, 700), expected_seq=0)
        dict_id = one.train_dictionary()
        one.append("s", messages(5, 700, start=301), expected_seq=300)
        assert [r.event for r in two.read("s", 301)] == messages(5, 700, start=301)
        assert list(two.iter_bodies("s", 301)) == [
            (seq, event) for seq, event in enumerate(messages(5, 700, start=301), start=301)
        ]
        assert one.stats()["active_dictionary"] == dict_id == 1


def test_stats_counts_events_and_bytes(log: PostgresEventLog) -> None:
    """stats() reports each session's events, the payload bytes and the schema's size."""
    log.append("a", messages(20, 6000), expected_seq=0)
    log.append("b", usage(3), expected_seq=0)
    stats = log.stats()
    assert (stats["events_per_session"], stats["events"]) == ({"a": 20, "b": 3}, 23)
    raw = sum(len(encode_payload(event)) for event in [*messages(20, 6000), *usage(3)])
    assert stats["raw_bytes"] == raw and stats["compression_ratio"] > 1.5
    assert stats["file_bytes"] > stats["stored_bytes"]


def test_wait_for_position_wakes_when_another_handle_appends(
    log: PostgresEventLog, target: tuple[str, str]
) -> None:
    """A waiter blocked on the last position returns once another handle commits past it."""
    log.append("s", usage(1), expected_seq=0)
    assert log.wait_for_position(1, timeout=0.05) == 1  # nothing new: the time runs out

    def append_later() -> None:
        with PostgresEventLog.open(target[0], schema=target[1]) as other:
            other.append("t", usage(2), expected_seq=0)

    timer = threading.Timer(0.2, append_later)
    timer.start()
    try:
        assert log.wait_for_position(1, timeout=60) == 3
    finally:
        timer.join()


def test_open_log_picks_the_backend_from_the_target(pg_database: str, tmp_path: Path) -> None:
    """open_log opens PostgreSQL for a postgresql:// or postgres:// URI, LMDB for a folder."""
    with open_log(pg_database) as pg_log:
        assert isinstance(pg_log, PostgresEventLog) and pg_log.schema == "ctxledger"
        pg_log.append("s", usage(1), expected_seq=0)
    with open_log(pg_database.replace("postgresql://", "postgres://", 1), readonly=True) as again:
        assert isinstance(again, PostgresEventLog) and again.last_seq("s") == 1
    with open_log(tmp_path / "folder") as lmdb_log:
        assert isinstance(lmdb_log, LmdbEventLog)


def test_connections_the_server_drops_are_replaced_without_an_error(
    log: PostgresEventLog, target: tuple[str, str]
) -> None:
    """After the server terminates every connection of the log, the next append and read
    succeed: the group is written again on a new connection (nothing was committed)."""
    log.append("s", usage(1), expected_seq=0)
    assert [r.seq for r in log.read("s")] == [1]
    with psycopg.connect(target[0], autocommit=True) as conn:
        killed = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = 'ctxledger' AND pid <> pg_backend_pid()"
        ).fetchone()
    assert killed is not None and killed[0] >= 2  # the writer's and the pool's
    assert log.append("s", usage(1, start=1), expected_seq=1)[0].seq == 2
    assert [r.event for r in log.read("s")] == usage(2)
    assert log.last_position() == 2


def test_an_open_idle_log_holds_no_lock(log: PostgresEventLog, target: tuple[str, str]) -> None:
    """Opened, read, or between appends, no connection of the log sits in a transaction: DDL
    on its tables (a migration, a DROP) does not wait for it."""
    log.read("s")
    with psycopg.connect(target[0]) as conn:
        conn.execute("SET lock_timeout = '5s'")
        conn.execute(f"LOCK TABLE {target[1]}.events, {target[1]}.head IN ACCESS EXCLUSIVE MODE")
        conn.rollback()
        idle = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ctxledger' "
            "AND state = 'idle in transaction'"
        ).fetchone()
    assert idle == (0,)
