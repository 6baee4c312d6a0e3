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
