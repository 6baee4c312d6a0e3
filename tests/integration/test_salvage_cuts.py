"""A lost message's stand-in never splits a tool exchange at a cut a checkpoint names.

Issue 25's salvage found by hypothesis (``test_salvage_loses_only_the_damaged_records``,
session 'fork-late', damaged records [3, 4]): a lost user message and the lost assistant
message after it, whose call a readable result answers, were stood in for by an assistant
making that call and a made-up one, then a result for the made-up call. A checkpoint recorded
after them retains from the second message, so the host's view showed that result without its
call. The logs here are written event by event, so the cut is where the test puts it, whatever
the compaction policy would choose.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from salvage_helpers import damage

from ctxledger import Config, Host, Message, ToolCall
from ctxledger.checkpoints import Checkpoint
from ctxledger.events import (
    CheckpointCreated,
    CompactionStarted,
    Event,
    MessageAppended,
    RecordLost,
    SessionForked,
    SessionOpened,
)
from ctxledger.replay import salvage, verify
from ctxledger.replay.standins import walk_session
from ctxledger.storage import LmdbEventLog
from ctxledger.testing import check_view_invariants

CONFIG = Config(context_window=4000, compression_threshold=0.6, prepare_threshold=0.0)


def appended(*messages: Message, first: int) -> list[Event]:
    """``MessageAppended`` events numbering ``messages`` from message seq ``first``."""
    return [MessageAppended(message=m.with_seq(first + n)) for n, m in enumerate(messages)]


def opening() -> list[Message]:
    """Four messages: a request, one tool exchange, an answer."""
    return [
        Message.user("look at setup.py"),
        Message.assistant("", [ToolCall("open-0", "read_file", "{}")]),
        Message.tool("setup(...)", "open-0", "read_file"),
        Message.assistant("it is a setuptools project"),
    ]


def compaction(cut: int) -> list[Event]:
    """A compaction retaining from message ``cut``, as the host records one."""
    checkpoint = Checkpoint(
        id="cp-1",
        summary="the user asked about setup.py",
        retain_from_seq=cut,
        covers_through_seq=cut - 1,
        reason="manual",
    )
    return [
        CompactionStarted(
            compaction_id="c-1", reason="manual", retain_from_seq=cut, covers_through_seq=cut - 1
        ),
        CheckpointCreated(compaction_id="c-1", checkpoint=checkpoint),
    ]


def write_log(db: Path, *, fork: bool, later: bool) -> tuple[str, int, int]:
    """The session ``s`` (a fork of ``p`` after its opening, or with that opening itself): a
    request, a call, its result, then the compaction retaining from the call (recorded at once,
    or two rounds later, past what the records after the loss show of the next message).

    Returns:
        The session, the event seqs of the request and of the call.
    """
    own = len(opening()) + 1
    tail: list[Event] = appended(
        Message.user("now run the tests"),
        Message.assistant("", [ToolCall("run-1", "bash", "{}")]),
        Message.tool("3 passed", "run-1", "bash"),
        first=own,
    )
    rounds = [Message.assistant("all pass"), Message.user("thanks"), Message.assistant("ok")]
    if later:
        tail += appended(*rounds, first=own + 3)
    tail += compaction(own + 1)
    if not later:
        tail += appended(*rounds, first=own + 3)
    with LmdbEventLog.open(db) as log:
        if fork:
            parent: list[Event] = [SessionOpened(session_id="p", config=CONFIG)]
            parent += appended(*opening(), first=1)
            log.append("p", parent, expected_seq=0)
            head: list[Event] = [
                SessionOpened(session_id="s", config=CONFIG),
                SessionForked(parent_id="p", at_seq=own - 1, parent_event_seq=len(parent)),
            ]
        else:
            head = [SessionOpened(session_id="s", config=CONFIG), *appended(*opening(), first=1)]
        log.append("s", [*head, *tail], expected_seq=0)
    return "s", len(head) + 1, len(head) + 2


@pytest.mark.parametrize("later", [False, True], ids=["cut-at-once", "cut-rounds-later"])
@pytest.mark.parametrize("fork", [False, True], ids=["session", "fork"])
def test_stand_ins_keep_the_tool_exchange_a_later_cut_retains_whole(
    tmp_path: Path, fork: bool, later: bool
) -> None:
    """Request and call lost: a user stand-in, then the call, so the cut starts a round."""
    db = tmp_path / "db"
    session_id, request, call = write_log(db, fork=fork, later=later)
    damage(db, session_id, [request, call])
    report = salvage(db, tmp_path / "out")
    entry = next(e for e in report.sessions if e.session == session_id)
    own = len(opening()) + 1
    assert [(r.seq, r.message_seq) for r in entry.replaced] == [(request, own), (call, own + 1)]
    assert entry.cut_at is None and entry.synthesized == 0
    with LmdbEventLog.open(tmp_path / "out", readonly=True) as new:
        stand_ins = [new.read(session_id, seq, seq)[0].event for seq in (request, call)]
        shown = walk_session(new, session_id).state
    assert all(isinstance(e, RecordLost) and e.message is not None for e in stand_ins)
    user, assistant = (e.message for e in stand_ins if isinstance(e, RecordLost))
    assert user is not None and (user.role, user.tool_calls) == ("user", ())
    assert assistant is not None and assistant.role == "assistant"
    assert [(c.id, c.name) for c in assistant.tool_calls] == [("run-1", "bash")]
    assert verify(tmp_path / "out").ok
    with Host.open(tmp_path / "out", config=CONFIG) as host:
        session = host.session(session_id)
        history = session.history()
        view = session.prepare_step()
        (checkpoint,) = session.checkpoints()
        assert checkpoint.retain_from_seq == own + 1
        check_view_invariants(history, view, session.config, checkpoint=checkpoint)
    # `ctxledger show` walks the damaged log the same way: the same stand-ins.
    with LmdbEventLog.open(db, readonly=True) as damaged:
        walked = walk_session(damaged, session_id).state
    assert walked is not None and shown is not None
    assert walked.history == shown.history == history
