"""Audit, explain, revert and recall through the public API, over a real LMDB log, across restarts.

Each behaviour is checked on the live session, after the host is closed and opened again
(recovery), and offline (``ctxledger.replay``): the answers must be the same.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxledger import (
    Config,
    Host,
    InvalidCheckpointError,
    InvalidQueryError,
    InvalidToolCallError,
    Message,
    Session,
    SummaryRequest,
    ToolCall,
    replay,
)
from ctxledger.replay.recall_index import INDEX_FILE
from ctxledger.tooling.timeline import split_steps
from ctxledger.tools import recall_tool

# Summaries get 1,800 characters: room for the first line of every message of a few rounds.
CONFIG = Config(
    context_window=10_000, compression_threshold=0.6, min_retain_rounds=1, fact_index_chars=0
)


def _forget_round(n: int) -> Callable[[SummaryRequest], str]:
    """A summariser that writes out the head of every message but those of round ``n``."""

    def summarize(request: SummaryRequest) -> str:
        kept = []
        for message in request.messages:
            head = message.content.splitlines()[0][:40] if message.content else ""
            text = head + "".join(f" {c.arguments}" for c in message.tool_calls)
            if f"_{n}." not in text and f"case {n} " not in text and f"round {n}:" not in text:
                kept.append(text.replace('\\"', '"'))
        return "\n".join(kept)[: request.max_chars] or "nothing"

    return summarize


_IDS = itertools.count(1)  # ids stay unique across the hosts a test opens on one folder


def _host(path: Path, summarizer: Any = None, config: Config = CONFIG) -> Host:
    return Host.open(
        path, config=config, summarizer=summarizer, id_factory=lambda: f"id{next(_IDS)}"
    )


def _work(session: Session, rounds: range) -> None:
    """Rounds of: a request, a pytest call, its failure, a reply; a step before each reply."""
    for n in rounds:
        call = ToolCall(f"c{n}", "bash", json.dumps({"command": f"pytest tests/test_{n}.py -x"}))
        session.append(Message.user(f"round {n}: fix src/mod_{n}.py"))
        session.prepare_step()
        session.append(Message.assistant("running", [call]))
        session.append(Message.tool(f"E   KeyError: case {n} missing\n" + "o" * 300, call.id))
        session.prepare_step()
        session.append(Message.assistant("the key is never set " + "a" * 300))


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    """A log where session "s" compacted once, its summary forgetting round 1."""
    path = tmp_path / "db"
    with _host(path, _forget_round(1), CONFIG.replace(context_window=100_000)) as host:
        session = host.session("s", config=CONFIG)
        session.append(Message.system("rules"))
        _work(session, range(5))
        assert session.compact().compacted
    yield path


def test_the_audit_is_identical_live_after_recovery_and_offline(db: Path) -> None:
    """The audit reports round 1's facts as lost, the same live, after restart and offline."""
    with _host(db, _forget_round(1)) as host:
        live = host.session("s").audit()
    with _host(db) as host:
        recovered = host.session("s").audit()
    offline = replay.audit(db, "s")
    assert live == recovered == offline
    assert {(fact.kind, fact.text, fact.seq) for fact in live.lost} == {
        ("request", "round 1: fix src/mod_1.py", 6),
        ("path", "src/mod_1.py", 6),
        ("command", "pytest tests/test_1.py -x", 7),
        ("path", "tests/test_1.py", 7),
        ("error", "E KeyError: case 1 missing", 8),
    }
    assert replay.audit(db, "s", live.checkpoint_id) == live


def test_an_old_checkpoint_is_audited_at_its_own_view(db: Path) -> None:
    """Auditing an earlier checkpoint by id folds the log up to it, not to now."""
    with _host(db, _forget_round(1)) as host:
        session = host.session("s")
        first = session.checkpoints()[-1]
        _work(session, range(5, 8))
        assert session.compact().compacted
        assert session.audit(first.id) == replay.audit(host.log, "s", first.id)
        assert session.audit(first.id).lost and session.audit().checkpoint_id != first.id
        with pytest.raises(InvalidCheckpointError, match="no checkpoint 'nope'"):
            session.audit("nope")


def test_a_fork_audits_a_checkpoint_it_inherited(db: Path) -> None:
    """A fork finds the parent's checkpoint in the parent's log."""
    with _host(db) as host:
        parent = host.session("s")
        fork = parent.fork("f")
        assert fork.audit() == parent.audit()


def test_explain_is_the_same_live_after_recovery_and_offline(db: Path) -> None:
    """Where each message is, identical across a restart and offline."""
    with _host(db) as host:
        session = host.session("s")
        live = [session.explain(seq) for seq in range(1, len(session.history()) + 1)]
    with _host(db) as host:
        session = host.session("s")
        recovered = [session.explain(seq) for seq in range(1, len(live) + 1)]
    assert live == recovered == [replay.explain(db, "s", seq) for seq in range(1, len(live) + 1)]
    kinds = {placement.kind for placement in live}
    assert {"raw", "summarized", "pinned"} <= kinds
    summarised = next(p for p in live if p.kind == "summarized")
    assert summarised.checkpoint_reason == "manual" and summarised.checkpoint_id


def test_revert_across_a_restart(db: Path) -> None:
    """A revert is recorded: after a restart the restored checkpoint is still active."""
    with _host(db, _forget_round(1)) as host:
        session = host.session("s")
        _work(session, range(5, 8))
        assert session.compact().compacted
        first, second = session.checkpoints()[-2:]
        restored = session.revert_compaction(reason="it forgot round 1")
        assert restored == first
        assert session.build_model_view().checkpoint_id == first.id
        with pytest.raises(InvalidCheckpointError, match="cannot be reverted in turn"):
            session.revert_compaction()
    with _host(db, _forget_round(99)) as host:
        session = host.session("s")
        assert session.build_model_view().checkpoint_id == first.id
        with pytest.raises(InvalidCheckpointError, match="cannot be reverted in turn"):
            session.revert_compaction()
        with pytest.raises(InvalidCheckpointError, match=f"{second.id}' is not the active one"):
            session.revert_compaction(second.id)
        result = session.compact("keep round 1")
        assert result.compacted
        redone = session.checkpoints()[-1]
        assert redone.previous_checkpoint_id == first.id and redone.focus == "keep round 1"
    assert replay.verify(db).ok
    assert replay.rebuild(db, "s").view.checkpoint_id == redone.id


def test_recall_finds_summarised_messages_and_survives_a_restart(db: Path) -> None:
    """Recall searches only what the view does not show raw; the index is rebuilt if lost."""
    with _host(db) as host:
        session = host.session("s")
        hits = session.recall("KeyError case 1")
        assert hits and hits[0].placement == "summarized"
        assert "KeyError" in hits[0].snippet and hits[0].role == "tool"
        assert hits[0].tool_name == "bash"
        seqs = range(1, len(session.history()) + 1)
        raw = {p.seq for p in map(session.explain, seqs) if p.kind == "raw"}
        assert not raw & {hit.seq for hit in session.recall("round rules running", limit=50)}
        assert session.recall("zzzz-no-such-word") == []
    assert (db / INDEX_FILE).is_file()
    with _host(db) as host:
        assert host.session("s").recall("KeyError case 1") == hits
    (db / INDEX_FILE).unlink()
    assert replay.recall(db, "s", "KeyError case 1") == hits
    assert (db / INDEX_FILE).is_file()


def test_a_stale_index_is_rebuilt_from_the_log(db: Path, tmp_path: Path) -> None:
    """An index that describes another log (same session id) is dropped and rebuilt."""
    with _host(db) as host:
        host.session("s").recall("KeyError")  # the index now knows db's session "s"
    other = tmp_path / "other"
    with _host(other, _forget_round(2)) as host:
        session = host.session("s")
        session.append(Message.system("other rules"))
        _work(session, range(10, 15))
        assert session.compact().compacted
    shutil.copy(db / INDEX_FILE, other / INDEX_FILE)
    with _host(other) as host:
        hits = host.session("s").recall("KeyError case 11")
    assert hits and all(hit.seq <= 40 for hit in hits)
    texts = [h.snippet for h in hits]
    assert any("11" in text for text in texts) and not any("case 1 " in text for text in texts)


def test_call_tool_answers_the_recall_tool(db: Path) -> None:
    """The tool's schemas name it; call_tool answers a model's call with text to append."""
    schemas = recall_tool()
    assert schemas.openai["function"]["name"] == schemas.anthropic["name"] == "recall"
    assert schemas.anthropic["input_schema"]["required"] == ["query"]
    with _host(db) as host:
        session = host.session("s")
        answer = session.call_tool("recall", json.dumps({"query": "KeyError case 1", "limit": 2}))
        seq = session.recall("KeyError case 1", limit=2)[0].seq
        assert answer.splitlines()[1].startswith(f"#{seq} tool (bash), summarized:")
        session.append(Message.assistant("", [ToolCall("r1", "recall", '{"query": "x"}')]))
        session.append(Message.tool(session.call_tool("recall", '{"query": "x"}'), "r1"))
        with pytest.raises(InvalidToolCallError, match="no ctxledger tool is named 'search'"):
            session.call_tool("search", "{}")
        with pytest.raises(InvalidToolCallError, match="needs a non-empty string 'query'"):
            session.call_tool("recall", '{"limit": 3}')
        with pytest.raises(InvalidToolCallError, match="not JSON"):
            session.call_tool("recall", "{query")
        with pytest.raises(InvalidQueryError, match="limit"):
            session.recall("x", limit=0)


def test_checkpoints_record_the_compaction_metadata(db: Path) -> None:
    """Each checkpoint names its summariser and records its input size and wall time."""
    with _host(db) as host:
        checkpoint = host.session("s").checkpoints()[-1]
    assert checkpoint.summarizer == "summarize"  # the function's name (no model)
    assert checkpoint.input_chars > checkpoint.output_chars > 0
    assert checkpoint.summary_seconds > 0 and checkpoint.summarizer_calls == 1


@pytest.mark.traces
def test_recall_finds_a_command_of_a_summarised_message_in_a_real_trace(
    traces: dict[str, list[Message]], tmp_path: Path
) -> None:
    """Ingest a real trace; a command that a compaction summarised is found by one of its words."""
    name = "miniswe-gemini3pro-django-django-16560"
    if name not in traces:
        pytest.skip(f"{name} is not among the traces")
    with Host.open(tmp_path / "db", config=Config(context_window=32_000)) as host:
        session = host.session("t")
        for index, step in enumerate(split_steps(traces[name])):
            if index:
                session.prepare_step()
            session.append_many(step)
        state_cut = session.checkpoints()[-1].retain_from_seq
        history = session.history()
        commands = [
            (message.seq, json.loads(call.arguments).get("command", ""))
            for message in history[: state_cut - 1]
            for call in message.tool_calls
        ]
        # A word of one command that no other message holds, so that it ranks first whichever
        # messages the (timing-dependent) background compactions left summarised: a word common
        # in tool output ("against") could rank the command below ten other messages.
        holders: dict[str, set[int]] = {}
        for message in history:
            text = message.content + " ".join(call.arguments for call in message.tool_calls)
            for token in re.findall(r"\w+", text.lower()):
                holders.setdefault(token, set()).add(message.seq)
        words = sorted(
            (word, seq)
            for seq, command in commands
            for word in command.replace("/", " ").split()
            if word.isidentifier() and len(word) > 6 and holders.get(word.lower()) == {seq}
        )
        assert words, "no command word is unique to its message"
        word, seq = words[0]
        assert session.explain(seq).kind == "summarized"
        hits = session.recall(word, limit=10)
        assert seq in [hit.seq for hit in hits], (word, hits)


def test_a_reverted_session_exports_and_imports_with_its_revert(db: Path, tmp_path: Path) -> None:
    """A transcript lists the restored checkpoint again; import records it as a revert."""
    from ctxledger.tooling.transcripts import export_transcript, import_transcript

    with _host(db, _forget_round(1)) as host:
        session = host.session("s")
        _work(session, range(5, 8))
        assert session.compact().compacted
        session.revert_compaction()
        served = session.build_model_view()
        exported = export_transcript(host.log, "s", tmp_path / "s.jsonl.zst", record=False)
        copy = import_transcript(host.log, exported.path, "s-copy")
        view = host.session(copy).build_model_view()
    assert view.view_hash == served.view_hash and view.checkpoint_id == served.checkpoint_id
    assert replay.verify(db).ok
