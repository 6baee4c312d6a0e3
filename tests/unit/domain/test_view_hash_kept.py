"""A view's hash made with the encodings kept from the last view equals the hash made afresh.

`Draft.view(state)` reuses the encodings of the messages a view shares with the last one
hashed for the session (`_hash_with`); the digest must be `view_hash`'s, byte for byte, or no
recorded view would verify again.
"""

from __future__ import annotations

import random
from pathlib import Path

import msgspec
import pytest

from ctxledger import Config, Host, Message, ToolCall
from ctxledger.domain import view as view_module
from ctxledger.domain.view import view_hash
from ctxledger.tooling.workload import iter_agent_steps


def _messages(count: int, seed: int) -> list[Message]:
    rng = random.Random(seed)
    out: list[Message] = []
    for seq in range(1, count + 1):
        kind = rng.choice(["user", "assistant", "tool", "summary"])
        meta = {"b": {"z": seq, "a": [1, 2]}, "a": "x"} if rng.random() < 0.3 else {}
        if kind == "assistant":
            calls = (ToolCall(f"c{seq}", "bash", '{"command": "ls"}'),)
            out.append(Message(role="assistant", content=f"run {seq}", tool_calls=calls, seq=seq,
                               metadata=meta))  # fmt: skip
        elif kind == "tool":
            out.append(Message(role="tool", content="é" * rng.randint(0, 300), tool_call_id="c",
                               name="bash", seq=seq))  # fmt: skip
        else:
            out.append(Message(role=kind, content=f"text {seq}", seq=seq, metadata=meta))
    return out


def test_kept_encodings_give_the_fresh_hash_as_views_grow_change_and_shrink() -> None:
    rng = random.Random(11)
    pool = _messages(400, seed=3)
    kept = None
    reused = 0
    shown: list[Message] = []
    for _ in range(300):
        move = rng.random()
        if move < 0.6 or not shown:
            shown = shown + pool[len(shown) : len(shown) + rng.randint(1, 3)]  # a step
        elif move < 0.75:
            # An equal message made anew (a re-render): still the same encoding.
            i = rng.randrange(len(shown))
            shown = [*shown[:i], msgspec.structs.replace(shown[i]), *shown[i + 1 :]]
        elif move < 0.9:
            i = rng.randrange(len(shown))  # masked: a different message in the middle
            shown = [*shown[:i], msgspec.structs.replace(shown[i], content="[masked]"),
                     *shown[i + 1 :]]  # fmt: skip
        else:
            shown = shown[rng.randrange(len(shown)) :]  # a new checkpoint's shorter view
        mode = rng.choice(["full_history", "compact_checkpoint"])
        checkpoint_id = None if mode == "full_history" else rng.choice(["c1", "c2"])
        before = kept
        digest, kept = view_module._hash_with(mode, checkpoint_id, shown, kept)
        assert digest == view_hash(mode, checkpoint_id, shown)
        if before is not None and tuple(shown[: len(before[0])]) == before[0]:
            reused += 1
    assert reused > 100  # the kept encodings were used, not only made


def test_the_same_prefix_ends_at_the_first_difference() -> None:
    rng = random.Random(5)
    pool = _messages(60, seed=4)
    for _ in range(500):
        kept = tuple(pool[: rng.randint(0, 60)])
        shown = list(pool[: rng.randint(0, 60)])
        for _ in range(rng.randint(0, 3)):
            if shown:
                i = rng.randrange(len(shown))
                shown[i] = msgspec.structs.replace(shown[i], content=f"changed {i}")
        first = next(
            (i for i, (a, b) in enumerate(zip(shown, kept, strict=False)) if a != b),
            min(len(shown), len(kept)),
        )
        assert view_module._same_prefix(tuple(shown), kept) == first


def test_a_view_changed_near_its_end_encodes_only_from_the_change_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A masking boundary that moved changes a result near the end of a long view: the
    messages before it keep their encodings (and the digest is view_hash's)."""
    shown = _messages(400, seed=6)
    _, kept = view_module._hash_with("full_history", None, shown, None)
    encoded: list[object] = []
    encoder = view_module._hash_encoder

    class Counting:
        def encode(self, value: object) -> bytes:
            encoded.append(value)
            return encoder.encode(value)

    monkeypatch.setattr(view_module, "_hash_encoder", Counting())
    changed = [*shown[:390], msgspec.structs.replace(shown[390], content="[masked]"), *shown[391:]]
    digest, _ = view_module._hash_with("full_history", None, [*changed, shown[0]], kept)
    assert digest == view_hash("full_history", None, [*changed, shown[0]])
    messages = [value for value in encoded if isinstance(value, Message)]
    assert len(messages) == 11  # the changed one, the nine after it, the new one


@pytest.mark.parametrize("count", [0, 1, 15, 16, 65_535, 65_536])
def test_every_length_of_view_hashes_alike(count: int) -> None:
    messages = [Message(role="user", content="a", seq=1)] * count
    digest, kept = view_module._hash_with("full_history", None, messages, None)
    assert digest == view_hash("full_history", None, messages)
    again, _ = view_module._hash_with("full_history", None, [*messages, messages[0]] if count
                                      else [], kept)  # fmt: skip
    assert again == view_hash("full_history", None, [*messages, messages[0]] if count else [])


def test_a_host_records_the_hash_of_every_view_it_serves(tmp_path: Path) -> None:
    config = Config(context_window=6000, compression_threshold=0.8, min_retain_rounds=2)
    checkpoints = set()
    with Host.open(tmp_path / "db", config=config) as host:
        session = host.session("s")
        for step in iter_agent_steps(9, steps=60):
            view = session.step(step)
            checkpoints.add(view.checkpoint_id)
            assert view.view_hash == view_hash(view.mode, view.checkpoint_id, view.messages)
    assert len(checkpoints) >= 3


def test_a_host_keeps_the_encodings_of_long_views_only(tmp_path: Path) -> None:
    """Short views are hashed whole (cheaper), long ones with the encodings kept: a host's
    hashes are view_hash's on both sides of KEEP_ENCODINGS_FROM."""
    config = Config(context_window=400_000, compression_threshold=0.8)
    sizes = []
    with Host.open(tmp_path / "db", config=config) as host:
        session = host.session("s")
        for step in iter_agent_steps(4, steps=140):
            view = session.step(step)
            assert view.view_hash == view_hash(view.mode, view.checkpoint_id, view.messages)
            sizes.append(len(view.messages))
    assert min(sizes) < view_module.KEEP_ENCODINGS_FROM <= max(sizes)  # both paths were taken


def test_draft_view_keeps_encodings_from_the_threshold_on() -> None:
    from ctxledger.domain.state import SessionState
    from ctxledger.domain.view import Draft

    state = SessionState.new("s", Config())
    short = [Message(role="user", content="a", seq=n) for n in range(1, 10)]
    long = [Message(role="user", content="a", seq=n) for n in range(1, 300)]
    for messages, kept in ((long, True), (short, False), (long, True)):
        view = Draft(None, messages, 1, 1, len(messages)).view(state)
        assert view.view_hash == view_hash(view.mode, None, messages)
        assert (state.view_encodings is not None) == kept
