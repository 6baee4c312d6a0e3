"""Damage costs only the damaged record: salvage over every kind of record a log holds.

One log, written by a real host: sessions with tool calls (one and two per step), served views,
usage reports, compactions (automatic and with a focus), a reverted compaction, pins, a
retraction, a Config change and forks, with snapshots every few events. Property: damage any
few records of a session (checksums broken in LMDB), salvage, and every intact record is still
there at its event seq, each damaged one is a ``RecordLost``, messages stay dense with a
stand-in for each lost message, ``verify`` passes, and a host serves provider-valid views.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import lmdb
import pytest
from cli_helpers import assert_one_line_error, run
from hypothesis import given
from hypothesis import strategies as st
from salvage_helpers import damage

from ctxledger import Config, Host, Message, ToolCall
from ctxledger.events import (
    MessageAppended,
    RecordLost,
    SessionForked,
    SessionOpened,
    ToolResultSynthesized,
    UsageReported,
    carried_message,
)
from ctxledger.replay import rebuild, salvage, verify, view_at, what_if
from ctxledger.storage import LmdbEventLog, MemoryEventLog
from ctxledger.storage._layout import pack_pair, unpack_stamp
from ctxledger.testing import check_view_invariants, digest_summarizer

CONFIG = Config(
    context_window=4000,
    compression_threshold=0.6,
    min_retain_rounds=1,
    snapshot_interval=7,
    prepare_threshold=0.0,  # no background summaries: the pristine log is the same every run
)
SESSIONS = ("main", "side")
FORKS = ("fork-early", "fork-late")


def step(session, tag: str, n: int, calls: int = 1) -> None:  # type: ignore[no-untyped-def]
    """A user turn, an assistant message with ``calls`` tool calls, their results, a view."""
    session.append(Message.user(f"{tag} {n}: look at module_{n}.py " + "u" * 120))
    made = [
        ToolCall(f"{tag}-{n}-{k}", "bash" if k == 0 else "read_file", "{}") for k in range(calls)
    ]
    session.append(Message.assistant(f"{tag} {n}: checking", made))
    session.append_many(
        [
            Message.tool(f"{tag} {n} out {k}\n" + "t" * 240, call.id, call.name)
            for k, call in enumerate(made)
        ]
    )
    view = session.prepare_step()
    session.record_usage({"prompt_tokens": view.estimated_tokens + 50, "completion_tokens": 20})
    session.append(Message.assistant(f"{tag} {n}: done"))
    session.prepare_step()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The undamaged log."""
    db = tmp_path_factory.mktemp("salvage-losses") / "db"
    with Host.open(db, config=CONFIG, summarizer=digest_summarizer) as host:
        main, side = (host.session(sid) for sid in SESSIONS)
        for n in range(6):
            step(main, "main", n, calls=1 + n % 2)
        main.pin(2)
        main.compact(focus="module_3")
        step(main, "main", 50)
        main.compact()
        main.revert_compaction()
        main.fork("fork-early", at_seq=9)
        for n in range(6, 9):
            step(main, "main", n)
        main.retract_last()
        main.prepare_step()
        host.session("main", config=CONFIG.replace(micro_keep_recent=1))
        for n in range(9, 12):
            step(main, "main", n, calls=2)
        main.fork("fork-late")
        step(host.session("fork-late"), "late", 0)
        for n in range(5):
            step(side, "side", n)
    return db


def test_the_pristine_log_has_every_kind_of_record(pristine: Path) -> None:
    """Snapshots, checkpoints, pins, a revert, a retraction, a Config change and forks."""
    with LmdbEventLog.open(pristine, readonly=True) as log:
        tags = {
            type(r.event).__struct_config__.tag for sid in log.sessions() for r in log.read(sid)
        }
        assert log.snapshot_seqs("main")
    assert {
        "checkpoint_created",
        "checkpoint_reverted",
        "message_pinned",
        "message_retracted",
        "config_changed",
        "session_forked",
        "usage_reported",
        "view_served",
    } <= tags
    assert verify(pristine).ok


@given(data=st.data())
def test_salvage_loses_only_the_damaged_records(
    pristine: Path, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """Any few damaged records of a session (never its SessionOpened): all else is kept."""
    session_id = data.draw(st.sampled_from([*SESSIONS, "fork-late"]), label="session")
    with LmdbEventLog.open(pristine, readonly=True) as log:
        original = {sid: log.read(sid) for sid in log.sessions()}
    events = len(original[session_id])
    first = 3 if session_id in FORKS else 2  # a fork's SessionForked is its base
    bad = data.draw(
        st.lists(st.integers(first, events), min_size=1, max_size=3, unique=True).map(sorted),
        label="damaged",
    )
    work = tmp_path_factory.mktemp("example")
    db = Path(shutil.copytree(pristine, work / "db"))
    damage(db, session_id, bad)
    report = salvage(db, work / "out")

    entry = next(e for e in report.sessions if e.session == session_id)
    assert [r.seq for r in entry.replaced if r.reason == "damaged"] == bad
    assert entry.cut_at is None and entry.dropped == 0, entry
    checked = verify(work / "out")
    assert checked.ok, checked.mismatches
    assert sorted(
        m.seq for m in checked.lost if m.kind == "record_lost" and m.session == session_id
    ) == sorted(r.seq for r in entry.replaced)

    with LmdbEventLog.open(work / "out", readonly=True) as new:
        assert new.sessions() == list(original)
        for sid, records in original.items():
            copied = new.read(sid)
            # Recovery may answer a call that a loss left open, after the copied records.
            answered = copied[len(records) :]
            assert all(isinstance(r.event, ToolResultSynthesized) for r in answered)
            assert len(answered) == next(e for e in report.sessions if e.session == sid).synthesized
            copied = copied[: len(records)]
            assert [r.seq for r in copied] == [r.seq for r in records]
            for old, now in zip(records, copied, strict=True):
                if sid != session_id or old.seq not in {r.seq for r in entry.replaced}:
                    assert now.event == old.event, (sid, old.seq)
                else:
                    assert isinstance(now.event, RecordLost)
            messages = [m for r in copied if (m := carried_message(r.event)) is not None]
            own_first = messages[0].seq if messages else 1
            assert [m.seq for m in messages] == list(range(own_first, own_first + len(messages)))
    # Every lost message has a stand-in (as many as the damaged records that held one) when a
    # record after it shows that it existed; a lost tool result answers the call it answered.
    held = [r for r in original[session_id] if r.seq in bad and carried_message(r.event)]
    shown_after = any(carried_message(r.event) for r in original[session_id] if r.seq > bad[-1])
    if shown_after:
        assert len(entry.lost_messages) == len(held)
    else:
        assert len(entry.lost_messages) <= len(held)
    # Alone between the readable messages around it: what it was is plain from its neighbours.
    readable = [
        r.seq for r in original[session_id] if carried_message(r.event) and r.seq not in bad
    ]
    isolated = [
        seq
        for seq in bad
        if sum(
            max([p for p in readable if p < seq], default=0)
            < other
            < min([n for n in readable if n > seq], default=events + 1)
            for other in bad
        )
        == 1
    ]
    by_seq = {r.seq: r for r in original[session_id]}
    stand_ins = {r.seq: r.message_seq for r in entry.replaced}
    for seq in isolated if shown_after else []:
        lost = carried_message(by_seq[seq].event)
        assert stand_ins[seq] == (None if lost is None else lost.seq)
    with Host.open(work / "out", config=CONFIG, summarizer=digest_summarizer) as host:
        for sid in original:
            session = host.session(sid)
            history = session.history()
            view = session.prepare_step()
            made = session.checkpoints()
            check_view_invariants(
                history,
                view,
                session.config,
                checkpoint=made[-1] if made else None,
                check_window=False,
            )
            own = {m.seq: m for r in original[sid] if (m := carried_message(r.event))}
            calls_kept = {
                call.id
                for r in original[sid]
                if (m := carried_message(r.event)) and not (sid == session_id and r.seq in bad)
                for call in m.tool_calls
            }
            guessed = {  # consecutive lost messages: their roles are the neighbours' guess
                stand_ins[seq] for seq in bad if seq not in isolated and sid == session_id
            }
            for message in history:
                before = own.get(message.seq)
                if before is None or message.seq in guessed:
                    continue
                if message.metadata.get("lost"):
                    if before.role == "tool" and before.tool_call_id in calls_kept:
                        # A lost result whose call is readable is stood in for by a result.
                        assert (message.role, message.tool_call_id) == ("tool", before.tool_call_id)
                elif not message.metadata.get("synthetic"):
                    assert message == before


def test_a_lost_assistant_message_is_stood_in_for_with_the_calls_its_results_answer(
    pristine: Path, tmp_path: Path
) -> None:
    """The results that follow it answer calls the stand-in makes: tool pairing holds."""
    with LmdbEventLog.open(pristine, readonly=True) as log:
        records = log.read("main")
    (target,) = [
        r.seq
        for r in records
        if (m := carried_message(r.event)) is not None
        and m.role == "assistant"
        and len(m.tool_calls) == 2
        and m.tool_calls[0].id == "main-1-0"
    ]
    db = Path(shutil.copytree(pristine, tmp_path / "db"))
    damage(db, "main", [target])
    salvage(db, tmp_path / "out")
    with LmdbEventLog.open(tmp_path / "out", readonly=True) as new:
        (stand_in,) = new.read("main", target, target)
    assert isinstance(stand_in.event, RecordLost) and stand_in.event.message is not None
    message = stand_in.event.message
    assert message.role == "assistant" and message.metadata == {"lost": "damaged"}
    assert [(c.id, c.name) for c in message.tool_calls] == [
        ("main-1-0", "bash"),
        ("main-1-1", "read_file"),
    ]
    assert verify(tmp_path / "out").ok


def test_a_lost_last_tool_result_is_answered_as_after_a_crash(tmp_path: Path) -> None:
    """Nothing after it tells that it held a message: it is lost without a stand-in, and the
    call it answered is answered by recovery, as after a crash."""
    db = tmp_path / "db"
    with Host.open(db, config=CONFIG) as host:
        session = host.session("s")
        step(session, "s", 0)
        session.append(Message.user("and now?"))
        session.append(Message.assistant("", [ToolCall("last", "bash", "{}")]))
        session.append(Message.tool("the last output", "last", "bash"))
    with LmdbEventLog.open(db, readonly=True) as log:
        last = log.last_seq("s")
    damage(db, "s", [last])
    report = salvage(db, tmp_path / "out")
    (entry,) = report.sessions
    assert [(r.seq, r.message_seq) for r in entry.replaced] == [(last, None)]
    assert entry.synthesized == 1
    with LmdbEventLog.open(tmp_path / "out", readonly=True) as new:
        answer = new.read("s")[-1].event
    assert isinstance(answer, ToolResultSynthesized) and answer.message.tool_call_id == "last"
    assert verify(tmp_path / "out").ok


def test_a_lost_view_or_config_change_leaves_later_folds_working(
    pristine: Path, tmp_path: Path
) -> None:
    """A RecordLost without a message: later views that differ are listed as not comparable,
    never as mismatches, and the host goes on from the salvaged log."""
    with LmdbEventLog.open(pristine, readonly=True) as log:
        records = log.read("main")
    changed = next(
        r.seq for r in records if type(r.event).__struct_config__.tag == "config_changed"
    )
    db = Path(shutil.copytree(pristine, tmp_path / "db"))
    damage(db, "main", [changed])
    report = salvage(db, tmp_path / "out")
    entry = next(e for e in report.sessions if e.session == "main")
    assert [(r.seq, r.message_seq) for r in entry.replaced] == [(changed, None)]
    checked = verify(tmp_path / "out")
    assert checked.ok
    later = [m for m in checked.lost if m.session == "main" and m.kind == "view_hash"]
    assert later and all(f"(event {changed})" in m.detail for m in later)
    with Host.open(tmp_path / "out", config=CONFIG, summarizer=digest_summarizer) as host:
        step(host.session("main"), "again", 0)
    assert verify(tmp_path / "out").ok


def test_a_session_whose_first_record_is_lost_is_dropped_with_its_forks(
    pristine: Path, tmp_path: Path
) -> None:
    """Without its SessionOpened nothing of it can be folded: dropped whole, saying so; its
    forks cannot be built on it and are dropped too; the other sessions are copied whole."""
    db = Path(shutil.copytree(pristine, tmp_path / "db"))
    damage(db, "main", [1])
    report = salvage(db, tmp_path / "out")
    entries = {e.session: e for e in report.sessions}
    assert (entries["main"].kept, entries["main"].cut_at) == (0, 1)
    assert "first record cannot be read" in entries["main"].reason
    assert all(entries[f].kept == 0 and "does not reach" in entries[f].reason for f in FORKS)
    assert entries["side"].replaced == () and entries["side"].cut_at is None
    assert verify(tmp_path / "out").ok
    with LmdbEventLog.open(tmp_path / "out", readonly=True) as new:
        assert new.sessions() == ["side"]
        assert isinstance(new.read("side", 1, 1)[0].event, SessionOpened)


def test_a_lost_last_message_that_a_fork_shows_is_stood_in_for(
    pristine: Path, tmp_path: Path
) -> None:
    """The parent's last message, lost with nothing readable after it in its own session, is
    shown by the fork taken after it: it gets a stand-in, so the fork's own messages still
    follow its base and nothing of the fork is lost (found by `make fuzz`: the fork's first
    own message was replaced as unfoldable, "message seq 59 does not follow 57")."""
    db = Path(shutil.copytree(pristine, tmp_path / "db"))
    with LmdbEventLog.open(db, readonly=True) as log:
        main, fork = log.read("main"), log.read("fork-late")
    forked = fork[1].event
    assert isinstance(forked, SessionForked) and forked.parent_event_seq == main[-1].seq
    last = max(r.seq for r in main if carried_message(r.event) is not None)
    lost = carried_message(next(r for r in main if r.seq == last).event)
    assert lost is not None and lost.seq == forked.at_seq
    damage(db, "main", list(range(last, main[-1].seq + 1)))  # it and everything after it
    report = salvage(db, tmp_path / "out")
    entries = {e.session: e for e in report.sessions}
    assert entries["main"].lost_messages == [lost.seq]
    assert entries["fork-late"].replaced == () and entries["fork-late"].cut_at is None
    assert verify(tmp_path / "out").ok
    with LmdbEventLog.open(tmp_path / "out", readonly=True) as new:
        assert [r.event for r in new.read("fork-late")][: len(fork)] == [r.event for r in fork]


def test_a_fork_whose_fork_record_is_lost_is_dropped(pristine: Path, tmp_path: Path) -> None:
    """Its messages start after the parent's prefix, which nothing names any more."""
    db = Path(shutil.copytree(pristine, tmp_path / "db"))
    with LmdbEventLog.open(db, readonly=True) as log:
        assert isinstance(log.read("fork-late", 2, 2)[0].event, SessionForked)
    damage(db, "fork-late", [2])
    report = salvage(db, tmp_path / "out")
    entry = next(e for e in report.sessions if e.session == "fork-late")
    assert (entry.kept, entry.cut_at) == (0, 1) and "SessionForked" in entry.reason
    assert verify(tmp_path / "out").ok


def test_verify_reports_a_damaged_snapshot(pristine: Path, tmp_path: Path) -> None:
    """A snapshot that fails its checksum is a mismatch of kind snapshot (the host skips it and
    folds the events, so the log still serves the same views)."""
    db = Path(shutil.copytree(pristine, tmp_path / "db"))
    with LmdbEventLog.open(db, readonly=True) as log:
        seqs = log.snapshot_seqs("main")
    report = verify(db)
    assert report.ok and report.snapshots_checked >= len(seqs) > 0
    with lmdb.open(str(db), max_dbs=16) as env:
        sessions, snapshots = env.open_db(b"sessions"), env.open_db(b"snapshots")
        with env.begin(write=True) as txn:
            number, _ = unpack_stamp(txn.get(b"main", db=sessions))
            key = pack_pair(number, seqs[0])
            value = bytearray(txn.get(key, db=snapshots))
            value[len(value) // 2] ^= 0x20
            txn.put(key, bytes(value), db=snapshots)
    report = verify(db)
    assert not report.ok
    assert [(m.session, m.seq, m.kind) for m in report.mismatches] == [
        ("main", seqs[0], "snapshot")
    ]
    assert "damaged" in report.mismatches[0].detail
    with Host.open(db, config=CONFIG) as host:  # the host folds around it
        assert len(host.session("main").history()) > 0


def test_a_salvaged_log_replays_like_any_other(pristine: Path, tmp_path: Path) -> None:
    """Time travel, what-if and the timeline fold a stand-in as the message it stands for."""
    with LmdbEventLog.open(pristine, readonly=True) as log:
        records = log.read("side")
    (target,) = [
        r.seq for r in records if (m := carried_message(r.event)) and m.tool_call_id == "side-2-0"
    ]
    db = Path(shutil.copytree(pristine, tmp_path / "db"))
    damage(db, "side", [target])
    salvage(db, tmp_path / "out")
    lost_seq = carried_message(next(r.event for r in records if r.seq == target))
    assert lost_seq is not None and lost_seq.seq is not None
    shown = view_at(tmp_path / "out", "side", lost_seq.seq)
    assert any(m.metadata.get("lost") for m in shown.messages)
    report = what_if(tmp_path / "out", "side", CONFIG.replace(compression_threshold=0.5))
    assert report.steps and report.steps[-1].through_seq == len(
        rebuild(tmp_path / "out", "side").history
    )
    assert session_timeline_of(tmp_path / "out", "side").messages == len(
        rebuild(tmp_path / "out", "side").history
    )


def session_timeline_of(db: Path, session_id: str):  # type: ignore[no-untyped-def]
    """The timeline `ctxledger plot` draws."""
    from ctxledger.tooling.timeline import session_timeline

    with LmdbEventLog.open(db, readonly=True) as log:
        return session_timeline(log, session_id)


def test_a_record_that_reads_but_cannot_be_folded_is_replaced_as_unfoldable(
    tmp_path: Path,
) -> None:
    """A log written wrongly (a message seq skipped): the record that does not fold becomes a
    RecordLost naming its type, the records after it are kept, and verify passes on the copy."""
    source = MemoryEventLog()
    events = [
        SessionOpened(session_id="s", config=CONFIG),
        MessageAppended(message=Message.user("one").with_seq(1)),
        MessageAppended(message=Message.user("three").with_seq(3)),  # no message 2 anywhere
        UsageReported(prompt_tokens=10, through_seq=1),
    ]
    source.append("s", events, expected_seq=0)
    report = salvage(source, tmp_path / "out")
    (entry,) = report.sessions
    assert [(r.seq, r.message_seq, r.reason) for r in entry.replaced] == [(3, None, "unfoldable")]
    assert "does not follow 1" in entry.replaced[0].detail
    with LmdbEventLog.open(tmp_path / "out", readonly=True) as new:
        copied = [r.event for r in new.read("s")]
    assert copied[:2] == events[:2] and copied[3] == events[3]
    assert isinstance(copied[2], RecordLost) and copied[2].lost_type == "message_appended"
    assert verify(tmp_path / "out").ok


def test_show_checkpoints_of_a_damaged_session(pristine: Path, tmp_path: Path) -> None:
    """The compactions read on past the damage, marked as for the undamaged session (active,
    reverted); then the damage in one error line, exit 1."""
    db = Path(shutil.copytree(pristine, tmp_path / "db"))
    damage(db, "main", [5])
    whole = run("show", "main", "--db", pristine, "--checkpoints")
    shown = run("show", "main", "--db", db, "--checkpoints")
    assert whole.exit_code == 0 and len(whole.stdout.splitlines()) >= 4  # header, rule, 2 made
    assert shown.stdout == whole.stdout
    assert_one_line_error(shown, "'main' event seq 5")
