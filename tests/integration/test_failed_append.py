"""A failed append changes nothing a session shows: state changes only after the log commits."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxledger import Host, Message, VersionConflictError
from ctxledger.events import UsageReported


def test_an_append_refused_by_the_log_leaves_history_and_state_as_they_were(
    tmp_path: Path,
) -> None:
    """Another writer appends through host.log; the session's next append conflicts and its
    history, checkpoints and config are exactly as before."""
    with Host.open(tmp_path / "db") as host:
        session = host.session("s")
        session.append_many([Message.user("one"), Message.assistant("two")])
        history, checkpoints, config = session.history(), session.checkpoints(), session.config
        host.log.append(
            "s", [UsageReported(prompt_tokens=7)], expected_seq=host.log.last_seq("s")
        )
        with pytest.raises(VersionConflictError):
            session.append_many([Message.user("three"), Message.assistant("four")])
        assert session.history() == history
        assert session.checkpoints() == checkpoints
        assert session.config == config
        assert [m.content for m in session.history()] == ["one", "two"]
