"""What-if under a session's own Config reproduces its recorded views, pins included."""

from __future__ import annotations

from pathlib import Path

from ctxledger import Config, Host, Message, ToolCall
from ctxledger.replay import what_if

# Masking on from the second-newest result, so a pinned old result is the only one shown whole.
CONFIG = Config(context_window=20_000, micro_keep_recent=1, micro_batch=1, micro_min_chars=100)


def test_what_if_under_the_same_config_reproduces_every_view_of_a_pinned_session(
    tmp_path: Path,
) -> None:
    """A pinned tool result stays whole in every later view; what-if must show it the same."""
    with Host.open(tmp_path / "db", config=CONFIG) as host:
        session = host.session("s")
        session.append(Message.user("inspect the repository"))
        pinned = None
        for index in range(6):
            call = ToolCall(f"c{index}", "bash", f'{{"command": "cat file_{index}.py"}}')
            session.append(Message.assistant("", [call]))
            seq = session.append(Message.tool(f"file_{index}.py: " + "x" * 600, call.id, "bash"))
            if index == 1:
                pinned = seq
                session.pin(seq)
            session.prepare_step()
        config = session.config
        views = [session.view_at(seq) for seq in range(1, session.history()[-1].seq + 1)]
    assert pinned is not None
    shown = [m for m in views[-1].messages if m.seq == pinned]
    assert shown and "x" * 600 in shown[0].content  # the pin matters: it is shown whole
    report = what_if(tmp_path / "db", "s", config)
    assert len(report.steps) == 6
    assert [step.view_tokens for step in report.steps] == [
        step.original_tokens for step in report.steps
    ]


#: Rounds of one user message and one tool call each, one kept raw by a compaction.
REVERTING = CONFIG.replace(min_retain_rounds=1)


def _reverting_session(path: Path, config: Config) -> Config:
    """A session compacted by hand and reverted, then served on: its Config."""
    with Host.open(path, config=config) as host:
        session = host.session("s")
        for index in range(8):
            session.append(Message.user(f"inspect file {index}"))
            call = ToolCall(f"c{index}", "bash", f'{{"command": "cat file_{index}.py"}}')
            session.append(Message.assistant("", [call]))
            session.append(Message.tool(f"file_{index}.py: " + "y" * 400, call.id, "bash"))
            if index == 4:
                session.prepare_step()
                session.compact(focus="the files read")
                session.prepare_step()
                session.revert_compaction(reason="it lost what I needed")
            session.prepare_step()
        return session.config


def test_what_if_under_the_same_config_replays_a_revert(tmp_path: Path) -> None:
    """A revert is the agent's act, replayed where the log made it: under the session's own
    Config the re-run undoes the same checkpoint, and every view is the recorded one."""
    config = _reverting_session(tmp_path / "db", REVERTING)
    report = what_if(tmp_path / "db", "s", config)
    assert report.original_compactions == 1
    tokens = [step.view_tokens for step in report.steps]
    assert tokens == [step.original_tokens for step in report.steps]
    # The views the compaction and the revert gave: the revert brought the history back.
    assert (tokens[5], tokens[6]) == (_compacted_then_reverted(tokens))


def _compacted_then_reverted(tokens: list[int]) -> tuple[int, int]:
    """The view served after the compaction (the session's 6th) and the one after the revert
    (its 7th), checked: the compaction changed the view, the revert gave back the one before
    it (nothing was appended in between)."""
    before, compacted, reverted = tokens[4], tokens[5], tokens[6]
    assert compacted != before and reverted == before, tokens
    return compacted, reverted


def test_what_if_under_another_config_undoes_its_own_checkpoint_where_the_log_reverted(
    tmp_path: Path,
) -> None:
    """Under another Config the re-run's active checkpoint is its own: the revert undoes it
    (the agent's act, where the agent made it), and a re-run with no checkpoint to undo
    records nothing for it."""
    config = _reverting_session(tmp_path / "db", REVERTING)
    other = config.replace(micro_min_chars=200)
    report = what_if(tmp_path / "db", "s", other)
    _compacted_then_reverted([step.view_tokens for step in report.steps])
