"""LedgerSession's rendering of views for the OpenAI Agents SDK: each view renders only what is
new, hands out fresh item dicts, and gives exactly what rendering it afresh gives, across
compactions and a system message late in the conversation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from view_series import CONFIG, LATE_SYSTEM, counting, new_part, views

from ctxledger import Host
from ctxledger.integrations import _agents_items as agents_items
from ctxledger.integrations import openai_agents as oa


def test_consecutive_views_render_what_is_new_and_equal_a_fresh_rendering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rendered = counting(monkeypatch, agents_items, "message_to_items")
    ledger: oa.LedgerSession | None = None
    checkpoints: set[str | None] = set()
    previous = None
    previous_items: list[dict[str, Any]] = []
    extended = 0
    late_system = False
    for session, view in views(tmp_path, seed=5):
        ledger = ledger or oa.LedgerSession(session)
        checkpoints.add(view.checkpoint_id)
        before = len(rendered)
        items, kept = ledger._render(view.messages)
        new = new_part(view, previous)
        if new is not None:
            assert len(rendered) - before == sum(m.role != "system" for m in new)
            extended += 1
        assert (items, 0) == oa.LedgerSession(session)._render(view.messages)
        if kept:  # the items of the last view come first, equal to what they were
            assert items[:kept] == [
                {k: v for k, v in item.items() if k != "mutated"} for item in previous_items
            ]
        # Fresh dicts each time: the SDK may change the items it is given.
        assert not any(a is b for a, b in zip(items, previous_items, strict=False))
        for item in items:
            item["mutated"] = True
        late_system = late_system or any(
            item.get("content") == LATE_SYSTEM and item["role"] == "user" for item in items
        )
        previous, previous_items = view, items
    assert len(checkpoints) >= 3
    assert extended >= 20
    assert late_system


@pytest.mark.parametrize("length", [0, 1, 15, 16, 65_535, 65_536])
def test_the_array_header_is_msgpacks(length: int) -> None:
    import msgspec

    encoded = msgspec.msgpack.encode([None] * length)
    assert agents_items.array_header(length) + b"\xc0" * length == encoded


def test_the_recent_fingerprints_keep_the_newest_distinct_ones() -> None:
    recent = oa.RecentFingerprints(3)
    recent.add_all(["a", "b", "c", "a", "d"])  # "a" again is recent again: "b" goes first
    assert len(recent) == 3
    assert "b" not in recent
    assert all(f in recent for f in ("a", "c", "d"))
    nothing = oa.RecentFingerprints(0)
    nothing.add_all(["a"])
    assert "a" not in nothing


@pytest.mark.parametrize("remember", [-1, 1.5, "10", True])
def test_a_bad_remember_is_refused(tmp_path: Path, remember: Any) -> None:
    from ctxledger.errors import InvalidArgumentError

    with (
        Host.open(tmp_path / "db", config=CONFIG) as host,
        pytest.raises(InvalidArgumentError, match="remember"),
    ):
        oa.LedgerSession(host.session("s"), remember=remember)
