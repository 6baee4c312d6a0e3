"""``ctxledger policy``: the sizes of a policy, one per line; and reverting the only compaction."""

from __future__ import annotations

from pathlib import Path

from cli_helpers import SMALL, assert_one_line_error, build_log, run

from ctxledger import Config, Host, Message, replay
from ctxledger.config import SIZE_MEANINGS


def _values(output: str) -> dict[str, str]:
    return {line.split()[0]: line.split()[1] for line in output.splitlines()}


def test_policy_prints_every_size_with_its_meaning() -> None:
    """--window N: one line per size, its value and what it means, as Config.sizes() says."""
    result = run("policy", "--window", "16000")
    assert result.exit_code == 0, result.output
    sizes = Config(context_window=16_000).sizes()
    values = _values(result.stdout)
    assert set(values) == {"schema_version", *SIZE_MEANINGS}
    for name, meaning in SIZE_MEANINGS.items():
        assert values[name] == f"{getattr(sizes, name):,}"
        assert meaning in result.stdout
    assert values["target_tokens"] == "7,200" and values["threshold_tokens"] == "12,800"


def test_policy_takes_the_marks_and_any_setting() -> None:
    """--threshold, --target and --set apply; an invalid combination is one line naming it."""
    result = run("policy", "--window", "10000", "--threshold", "0.9", "--target", "0.3")
    assert result.exit_code == 0, result.output
    assert _values(result.stdout)["target_tokens"] == "3,000"
    refused = run("policy", "--window", "10000", "--target", "0.85")
    assert_one_line_error(refused, "compaction_target")
    unknown = run("policy", "--set", "floor=1")
    assert_one_line_error(unknown, "floor")


def test_policy_reads_a_sessions_recorded_config(tmp_path: Path) -> None:
    """--db D SESSION: the Config in force at the end of the session's log (a one-mark Config
    here: its target is its threshold)."""
    db = build_log(tmp_path / "db", sessions=("a",), steps=4)
    result = run("policy", "--db", db, "a")
    assert result.exit_code == 0, result.output
    values = _values(result.stdout)
    assert values["schema_version"] == str(SMALL.schema_version)
    assert values["window_tokens"] == "4,000"
    assert values["target_tokens"] == values["threshold_tokens"]
    missing = run("policy", "--db", db, "nope")
    assert_one_line_error(missing, "unknown session 'nope'")
    half = run("policy", "a")
    assert_one_line_error(half, "give both --db and SESSION")


def test_reverting_the_only_compaction_restores_the_view_before_it(tmp_path: Path) -> None:
    """Through a host: the first checkpoint is undone, the view is the full history again,
    view_at and verify reproduce it, and the command says so."""
    db = tmp_path / "db"
    config = Config(context_window=4_000, min_retain_rounds=1, prepare_threshold=0.0)
    with Host.open(db, config=config) as host:
        session = host.session("s")
        for n in range(3):
            session.append(Message.user(f"question {n} " + "q" * 500))
            session.append(Message.assistant(f"answer {n} " + "a" * 500))
        before = session.prepare_step()
        assert session.compact().compacted
        assert session.revert_compaction() is None
        after = session.prepare_step()
        assert after.view_hash == before.view_hash and after.checkpoint_id is None
        seq = session.history()[-1].seq
        assert seq is not None
        assert replay.view_at(host.log, "s", seq).view_hash == before.view_hash
        assert session.compact().compacted  # may compact again at once
        made = session.checkpoints()[-1]
        assert made.previous_checkpoint_id is None
    assert replay.verify(db).ok
    result = run("revert", "s", "--db", db)
    assert result.exit_code == 0, result.output
    assert "the full history is shown again" in result.stdout
