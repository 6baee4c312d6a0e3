"""The middleware's conversion of views: each view converts only what is new, and gives
exactly what converting it afresh gives, across compactions (where a view stops beginning with
the last one) and system messages late in a view."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from view_series import counting, new_part, views

from ctxledger.integrations import langchain as lc


def _dumped(messages: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(type(m).__name__, m.model_dump()) for m in messages]


def test_consecutive_views_convert_what_is_new_and_equal_a_fresh_conversion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    converted = counting(monkeypatch, lc, "from_message")
    ledger: lc._Ledger | None = None
    checkpoints: set[str | None] = set()
    late_system = False
    extended = 0
    previous = None
    for session, view in views(tmp_path, seed=3):
        ledger = ledger or lc._Ledger(session)
        checkpoints.add(view.checkpoint_id)
        before = len(converted)
        got = ledger.convert(session, view.messages)
        new = new_part(view, previous)
        if new is not None:
            # Only the messages the last view did not have were converted (a late system
            # message is sent as a user message, without from_message).
            assert len(converted) - before == sum(m.role != "system" for m in new)
            extended += 1
        fresh = lc._Ledger(session).convert(session, view.messages)
        assert _dumped(got) == _dumped(fresh)
        late_system = late_system or any(
            m.role == "system" and type(c).__name__ == "HumanMessage"
            for m, c in zip(view.messages, got, strict=True)
        )
        previous = view
    assert len(checkpoints) >= 3  # the views were compacted more than once
    assert extended >= 20  # most views began with the whole of the last one
    assert late_system  # a system message after the conversation began was sent as a user one
