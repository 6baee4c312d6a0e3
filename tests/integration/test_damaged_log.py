"""A damaged log stays usable: listing, the host, verify and salvage around one bad record.

The log: sessions ``s1``, ``s2`` and ``s3``; ``early`` forked from ``s2`` before the damage and
``late`` forked after it. One byte is flipped inside the record of one of ``s2``'s tool results,
so a cut there leaves that tool call unanswered.
"""

from __future__ import annotations

import itertools
import os
import pty
import re
import select
import shutil
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest
from cli_helpers import assert_one_line_error, run

from ctxledger import Config, CorruptRecordError, Host, Message, ToolCall
from ctxledger.events import MessageAppended, RecordLost, SessionForked, ToolResultSynthesized
from ctxledger.replay import find_damage, salvage, verify
from ctxledger.storage import LmdbEventLog, RecordedEvent
from ctxledger.storage import protocol as storage_protocol
from ctxledger.storage._layout import pack_pair, unpack_stamp
from ctxledger.testing import check_view_invariants
from ctxledger.testing.processes import child_process

CONFIG = Config(context_window=6000, compression_threshold=0.8, min_retain_rounds=2)


def agent_steps(session, steps: int, tag: str) -> None:  # type: ignore[no-untyped-def]
    """``steps`` rounds of user, assistant with a tool call, tool result; a view before each."""
    for step in range(steps):
        call = ToolCall(f"{tag}-call-{step}", "bash", '{"command": "ls"}')
        session.append_many([Message.user(f"{tag} step {step}: list the files " + "u" * 150)])
        session.prepare_step()
        session.append(Message.assistant(f"{tag} listing", [call]))
        session.append(Message.tool(f"{tag} file_{step}.py\n" + "t" * 300, call.id, "bash"))


def damage_event(db: Path, session_id: str, seq: int) -> None:
    """Flip one byte in the middle of a stored event record (the log must be closed)."""
    with lmdb.open(str(db), max_dbs=16) as env:
        sessions, events = env.open_db(b"sessions"), env.open_db(b"events")
        with env.begin(write=True) as txn:
            number, _ = unpack_stamp(txn.get(session_id.encode(), db=sessions))
            key = pack_pair(number, seq)
            value = bytearray(txn.get(key, db=events))
            value[len(value) // 2] ^= 0x20
            txn.put(key, bytes(value), db=events)


def tool_result_seq(db: Path, session_id: str, nth: int) -> int:
    """The event seq of the ``nth`` tool result appended to a session."""
    with LmdbEventLog.open(db, readonly=True) as log:
        seqs = [
            record.seq
            for record in log.read(session_id)
            if isinstance(record.event, MessageAppended) and record.event.message.role == "tool"
        ]
    return seqs[nth]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """The undamaged log and the seq of the record that the damaged copies flip."""
    db = tmp_path_factory.mktemp("damaged") / "db"
    with Host.open(db, config=CONFIG) as host:
        for session_id in ("s1", "s2", "s3"):
            agent_steps(host.session(session_id), 12, session_id)
        host.session("s2").fork("early", at_seq=6)
        host.session("s2").fork("late")
        agent_steps(host.session("late"), 2, "late")
    return db, tool_result_seq(db, "s2", 7)


@pytest.fixture
def damaged(pristine: tuple[Path, int], tmp_path: Path) -> tuple[Path, int]:
    """A private copy of the log with one of s2's tool results damaged; and that record's seq."""
    db, bad = pristine
    copy = Path(shutil.copytree(db, tmp_path / "db"))
    damage_event(copy, "s2", bad)
    return copy, bad


# --- the library and the host ---------------------------------------------------------------------


def test_find_damage_names_each_damaged_session_and_its_first_bad_seq(
    damaged: tuple[Path, int],
) -> None:
    """s2 at the damaged record, placed after message 23 (it held message 24, step 7's tool
    result); the late fork at its SessionForked event, naming s2. A path works as an open log."""
    db, bad = damaged
    with LmdbEventLog.open(db, readonly=True) as log:
        found = find_damage(log)
        (forked_at,) = [r.seq for r in log.read("late", 1, 2) if isinstance(r.event, SessionForked)]
    assert [sid for sid, damage in found.items() if damage is None] == ["s1", "s3", "early"]
    assert (found["s2"].seq, found["s2"].after_message_seq) == (bad, 23)
    assert found["s2"].describe() == f"damaged at event {bad} (after message 23)"
    late = found["late"]
    assert (late.seq, late.parent, late.parent_seq) == (forked_at, "s2", bad)
    assert late.describe() == f"damaged: parent 's2' at event {bad} (after message 23)"
    assert find_damage(db) == found  # a folder, as verify and rebuild take
    assert find_damage(str(db), ["s2"]) == {"s2": found["s2"]}


def test_the_host_lists_every_session_and_opens_the_healthy_ones(damaged: tuple[Path, int]) -> None:
    """Host.sessions() lists all; s2 raises CorruptRecordError naming it; others go on."""
    db, bad = damaged
    with Host.open(db, config=CONFIG) as host:
        assert host.sessions() == ["s1", "s2", "s3", "early", "late"]
        with pytest.raises(CorruptRecordError) as caught:
            host.session("s2").history()
        assert (caught.value.session_id, caught.value.seq) == ("s2", bad)
        assert caught.value.after_message_seq == 23  # the error places it among the messages
        assert f"event seq {bad} (after message 23)" in str(caught.value)
        with pytest.raises(CorruptRecordError) as through_parent:
            host.session("late").history()
        assert (through_parent.value.session_id, through_parent.value.seq) == ("s2", bad)
        s1 = host.session("s1")
        before = len(s1.history())
        assert s1.append(Message.user("still here")) == before + 1
        assert len(host.session("early").history()) == 6
        agent_steps(host.session("s3"), 1, "s3-more")
        with pytest.raises(CorruptRecordError):  # and it stays refused, without harm
            host.session("s2").append(Message.user("lost?"))
    with Host.open(db, config=CONFIG) as host:
        assert host.session("s1").history()[-1].content == "still here"


def test_verify_reports_the_exact_bad_seq_and_checks_everything_before_it(
    damaged: tuple[Path, int],
) -> None:
    """The corrupt mismatch names s2's record; every event before it is read and checked."""
    db, bad = damaged
    report = verify(db)
    corrupt = [(m.session, m.seq) for m in report.mismatches if m.kind == "corrupt"]
    with LmdbEventLog.open(db, readonly=True) as log:
        forked_at = [r.seq for r in log.read("late", 1, 2) if isinstance(r.event, SessionForked)]
        total = sum(log.last_seq(sid) for sid in log.sessions())
    assert corrupt == [("s2", bad), ("late", forked_at[0])]
    assert report.mismatches[0].detail.startswith("corrupt record: session 's2'")
    assert "parent 's2'" in report.mismatches[1].detail
    # Read: everything but s2's records from the damaged one on, and late's after its fork.
    assert report.events == total - (_last(db, "s2") - bad + 1) - (_last(db, "late") - forked_at[0])


def _last(db: Path, session_id: str) -> int:
    with LmdbEventLog.open(db, readonly=True) as log:
        return log.last_seq(session_id)


# --- salvage --------------------------------------------------------------------------------------


def as_copied(records: list[RecordedEvent]) -> list[tuple[object, ...]]:
    """What salvage keeps of a record: seq, event, commit time and batch (not the position, as
    sessions are copied one after another)."""
    batches = [0]
    for previous, record in itertools.pairwise(records):
        same = (record.timestamp, record.position) == (previous.timestamp, previous.position + 1)
        batches.append(batches[-1] + (0 if same else 1))
    return [(r.seq, r.event, r.timestamp, batch) for r, batch in zip(records, batches, strict=True)]


def test_salvage_keeps_every_intact_record_and_replaces_the_damaged_one(
    damaged: tuple[Path, int], tmp_path: Path
) -> None:
    """Only the damaged record is lost: a RecordLost at its event seq stands for s2's tool
    result (message 24, answering its call, so views stay valid); every other record of every
    session, the late fork's included, is copied as it was (events, seqs, timestamps,
    batches); verify passes and lists the loss and the views it makes uncomparable."""
    db, bad = damaged
    report = salvage(db, tmp_path / "out")
    entries = {entry.session: entry for entry in report.sessions}
    assert not report.complete and report.replaced == 1 and report.dropped == 0
    s2 = entries["s2"]
    assert (s2.kept, len(s2.replaced), s2.dropped, s2.cut_at, s2.synthesized) == (
        _last(db, "s2") - 1,
        1,
        0,
        None,
        0,
    )
    (lost,) = s2.replaced
    assert (lost.seq, lost.message_seq, lost.reason) == (bad, 24, "damaged")
    assert s2.lost_messages == [24] and "lost message 24" in s2.reason
    assert all(entries[sid].replaced == () for sid in ("s1", "s3", "early", "late"))
    checked = verify(tmp_path / "out")
    assert checked.ok, checked.mismatches
    assert [(m.session, m.seq) for m in checked.lost if m.kind == "record_lost"] == [("s2", bad)]
    uncomparable = [m for m in checked.lost if m.kind == "view_hash"]
    assert uncomparable and all("lost message 24" in m.detail for m in uncomparable)
    with (
        LmdbEventLog.open(db, readonly=True) as old,
        LmdbEventLog.open(tmp_path / "out", readonly=True) as new,
    ):
        assert new.sessions() == old.sessions()
        for sid in ("s1", "s3", "early", "late"):
            assert as_copied(new.read(sid)) == as_copied(old.read(sid))
        before, after = new.read("s2", 1, bad - 1), new.read("s2", bad + 1)
        assert as_copied(before) == as_copied(old.read("s2", 1, bad - 1))
        assert [(r.seq, r.event, r.timestamp) for r in after] == [
            (r.seq, r.event, r.timestamp) for r in old.read("s2", bad + 1)
        ]
        (stand_in,) = new.read("s2", bad, bad)
    event = stand_in.event
    assert isinstance(event, RecordLost) and event.message is not None
    message = event.message
    assert (message.seq, message.role, message.tool_call_id, message.name) == (
        24,
        "tool",
        "s2-call-7",
        "bash",
    )
    assert message.metadata == {"lost": "damaged"} and "message 24" in message.content
    with Host.open(tmp_path / "out", config=CONFIG) as host:
        session = host.session("s2")
        assert [m.seq for m in session.history()] == list(range(1, 37))
        view = session.prepare_step()
        made = session.checkpoints()
        check_view_invariants(
            session.history(), view, CONFIG, checkpoint=made[-1] if made else None
        )
        agent_steps(session, 1, "s2-after")  # and it goes on
    assert verify(tmp_path / "out").ok


def after_a_crash(db: Path) -> ToolResultSynthesized:
    """What the runtime records for a tool call left open when a host stopped mid-step."""
    with Host.open(db) as host:
        host.session("c").append_many(
            [Message.user("go"), Message.assistant("", [ToolCall("open", "bash", "{}")])]
        )
    with Host.open(db) as host:
        host.session("c").history()  # reopening recovers it
        event = host.log.read("c")[-1].event
    assert isinstance(event, ToolResultSynthesized)
    return event


def test_salvage_of_a_whole_log_copies_everything(
    pristine: tuple[Path, int], tmp_path: Path
) -> None:
    """Nothing damaged: every record is copied as it was, and the report says complete."""
    db, _ = pristine
    report = salvage(db, tmp_path / "out")
    assert report.complete and report.dropped == 0
    with (
        LmdbEventLog.open(db, readonly=True) as old,
        LmdbEventLog.open(tmp_path / "out", readonly=True) as new,
    ):
        assert new.sessions() == old.sessions()
        for sid in old.sessions():
            assert as_copied(new.read(sid)) == as_copied(old.read(sid))


# --- the command ----------------------------------------------------------------------------------


def test_sessions_lists_every_session_with_the_damaged_ones_marked(
    damaged: tuple[Path, int],
) -> None:
    """Exit 0; s2 and the late fork are marked damaged, the others listed as usual."""
    db, bad = damaged
    result = run("sessions", "--db", db)
    assert result.exit_code == 0
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[2:]}
    assert list(rows) == ["s1", "s2", "s3", "early", "late"]
    assert rows["s2"].endswith(f"damaged at event {bad} (after message 23)")
    assert rows["late"].endswith(f"damaged: parent 's2' at event {bad} (after message 23)")
    for sid in ("s1", "s3", "early"):
        assert rows[sid].endswith("ok") and rows[sid].split()[1] != "-"
    assert rows["s1"].split()[1] == "36"  # 12 steps of 3 messages
    assert "2 of 5 sessions cannot be read to the end" in result.stderr
    assert "ctxledger salvage" in result.stderr


def test_stats_names_the_damaged_sessions(damaged: tuple[Path, int]) -> None:
    """Exit 0; the storage table counts and names them; the session table marks them."""
    db, bad = damaged
    result = run("stats", "--db", db)
    assert result.exit_code == 0
    assert (
        f"damaged sessions   2: s2 (damaged at event {bad} (after message 23)), "
        f"late (damaged: parent 's2' at event {bad} (after message 23))" in result.stdout
    )
    statuses = {
        line.split()[0]: line.split(maxsplit=2)[2]
        for line in result.stdout.split("SESSION")[-1].splitlines()[2:]
    }
    assert statuses["s2"] == f"damaged at event {bad} (after message 23)"
    assert statuses["s1"] == "ok"


def test_stats_of_a_whole_log_reports_no_damage(pristine: tuple[Path, int]) -> None:
    """A healthy log says so."""
    result = run("stats", "--db", pristine[0])
    assert result.exit_code == 0 and "damaged sessions   none" in result.stdout


def test_show_prints_what_is_readable_of_a_damaged_session(damaged: tuple[Path, int]) -> None:
    """Every message but the lost one, which is marked; then one error line naming the event
    seq and the message before it; exit 1."""
    db, bad = damaged
    result = run("show", "s2", "--db", db)
    assert_one_line_error(
        result, "corrupt record", "'s2'", f"event seq {bad}", "(after message 23)"
    )
    shown = [line.split()[0] for line in result.stdout.splitlines()]
    assert shown == [f"#{seq}" for seq in range(1, 37)]  # before and after the damage
    (lost,) = [line for line in result.stdout.splitlines() if line.startswith("#24 ")]
    assert "tool bash lost" in lost and "could not be read" in lost
    assert "'ctxledger salvage'" in result.stderr


def test_show_events_lists_the_damaged_record_among_the_others(
    damaged: tuple[Path, int],
) -> None:
    """--events: the records around it as usual, the damaged one named where it is."""
    db, bad = damaged
    result = run("show", "s2", "--db", db, "--events", "--from", str(bad - 2), "--limit", "5")
    assert result.exit_code == 1
    rows = result.stdout.splitlines()
    assert [int(row.split()[0]) for row in rows] == list(range(bad - 2, bad + 3))
    assert "(damaged)" in rows[2] and "checksum" in rows[2]
    assert "message_appended" in rows[3]
    assert f"event seq {bad}" in result.stderr


def test_show_of_a_fork_damaged_through_its_parent(damaged: tuple[Path, int]) -> None:
    """The late fork shows its parent's prefix (with the lost message marked) and its own."""
    db, bad = damaged
    result = run("show", "late", "--db", db)
    assert result.exit_code == 1
    shown = [line.split()[0] for line in result.stdout.splitlines()]
    assert shown == [f"#{seq}" for seq in range(1, 43)]
    assert f"'s2' event seq {bad} (after message 23)" in result.stderr


def test_salvage_verb_reports_per_session_and_exits_one(
    damaged: tuple[Path, int], tmp_path: Path
) -> None:
    """The table says what was kept, replaced and dropped; exit 1; verify passes on the new
    log and lists the loss."""
    db, bad = damaged
    result = run("salvage", "--db", db, "--out", tmp_path / "out")
    assert result.exit_code == 1
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[2:]}
    s2_events = _last(db, "s2")
    assert rows["s2"][1:6] == [str(s2_events), str(s2_events - 1), "1", "0", "0"]
    assert " ".join(rows["s2"][6:]) == f"lost message 24 (event {bad})"
    assert rows["s1"][3:7] == ["0", "0", "0", "whole"]
    assert rows["late"][2:5] == [str(_last(db, "late")), "0", "0"]
    assert result.stderr.startswith("salvage lost events of 1 session(s)")
    assert "1 replaced as lost, 0 dropped" in result.stderr
    verified = run("verify", "--db", tmp_path / "out")
    assert verified.exit_code == 0, verified.output
    assert verified.stdout.splitlines()[-1].startswith("verify ok: 5 sessions")
    assert "1 record(s) lost in a salvage" in verified.stdout
    assert f"s2{' ' * 14}{bad}  record_lost" in verified.stdout


def test_salvage_verb_on_a_whole_log_exits_zero(pristine: tuple[Path, int], tmp_path: Path) -> None:
    """Nothing dropped: exit 0 and a line saying the salvage is complete."""
    result = run("salvage", "--db", pristine[0], "--out", tmp_path / "out")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[-1].startswith("salvage complete")


def test_salvage_refuses_a_folder_that_is_not_empty(
    pristine: tuple[Path, int], tmp_path: Path
) -> None:
    """The new log goes into an empty folder; anything else is a one-line error."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    result = run("salvage", "--db", pristine[0], "--out", tmp_path / "out")
    assert_one_line_error(result, "not empty")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]


# --- progress on a terminal -----------------------------------------------------------------------


def run_on_a_terminal(*args: str | os.PathLike[str]) -> tuple[int, str]:
    """Run the command in a child process whose stderr is a pseudo-terminal; return what it
    wrote there."""
    main, child = pty.openpty()
    command = [sys.executable, "-m", "ctxledger", *map(str, args)]
    try:
        with child_process(command, stdout=subprocess.DEVNULL, stderr=child) as process:
            os.close(child)
            chunks = []
            while True:
                ready, _, _ = select.select([main], [], [], 60)
                if not ready:
                    break
                try:
                    data = os.read(main, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            status = process.wait(timeout=60)
    finally:
        os.close(main)
    return status, b"".join(chunks).decode(errors="replace")


@pytest.mark.parametrize(
    ("verb", "extra"),
    [
        ("verify", ()),
        ("whatif", ("s1", "--threshold", "0.5")),
        ("export", ("s1", "-o", "{tmp}")),
        ("salvage", ("--out", "{tmp}/new")),
    ],
)
def test_long_verbs_show_progress_on_a_terminal(
    pristine: tuple[Path, int], tmp_path: Path, verb: str, extra: tuple[str, ...]
) -> None:
    """verify, whatif, export and salvage draw a progress bar with a count on stderr."""
    db = Path(shutil.copytree(pristine[0], tmp_path / "db"))
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in extra]
    status, terminal = run_on_a_terminal(verb, "--db", db, *args)
    assert status == 0, terminal
    label = verb if verb in ("verify", "salvage") else f"{verb} s1"
    assert label in terminal
    counts = re.findall(r"(\d+)/(\d+)", terminal)
    assert counts, terminal
    done, total = map(int, counts[-1])
    assert done == total > 0, terminal


def test_a_session_whose_own_entry_is_damaged_is_listed_and_not_salvaged(
    pristine: tuple[Path, int], tmp_path: Path
) -> None:
    """Damage in the sessions table, not in an event: listed as damaged at seq 1; salvage
    cannot even count its events, drops it and says so (exit 1)."""
    db = Path(shutil.copytree(pristine[0], tmp_path / "db"))
    with lmdb.open(str(db), max_dbs=16) as env:
        sessions = env.open_db(b"sessions")
        with env.begin(write=True, db=sessions) as txn:
            entry = bytearray(txn.get(b"s3"))
            entry[3] ^= 0x20
            txn.put(b"s3", bytes(entry))
    listed = run("sessions", "--db", db)
    assert listed.exit_code == 0
    row = next(line for line in listed.stdout.splitlines() if line.startswith("s3 "))
    assert row.split()[1:6] == ["-"] * 5 and row.endswith("damaged at event 1")
    report = salvage(db, tmp_path / "out")
    (s3,) = [entry for entry in report.sessions if entry.session == "s3"]
    assert (s3.events, s3.kept, s3.dropped, s3.cut_at) == (None, 0, None, 1)
    assert "its own entry" not in s3.reason and "unreadable" in s3.reason
    assert not report.complete
    result = run("salvage", "--db", db, "--out", tmp_path / "out2")
    assert result.exit_code == 1
    assert next(line for line in result.stdout.splitlines() if line.startswith("s3 ")).split()[
        1:5
    ] == ["?", "0", "0", "all"]


def test_salvage_drops_a_session_whose_id_no_longer_passes_the_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An id an earlier version stored (300 bytes) is read and verified, but not copied: the
    new log refuses it, so salvage says so instead of failing."""
    long_id = "L" * 300
    with monkeypatch.context() as patched:
        patched.setattr(storage_protocol, "MAX_SESSION_ID_BYTES", 511)
        with Host.open(tmp_path / "db", config=CONFIG) as host:
            agent_steps(host.session(long_id), 2, "long")
            agent_steps(host.session("short"), 2, "short")
    assert verify(tmp_path / "db").ok
    report = salvage(tmp_path / "db", tmp_path / "out")
    entries = {entry.session: entry for entry in report.sessions}
    assert (entries[long_id].kept, entries[long_id].cut_at) == (0, 1)
    assert "the limit is 255" in entries[long_id].reason
    assert entries["short"].cut_at is None and not report.complete
    with LmdbEventLog.open(tmp_path / "out", readonly=True) as new:
        assert new.sessions() == ["short"]

