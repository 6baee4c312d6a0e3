"""A view's hash made with what the last view kept equals the hash made afresh.

`Draft.view(state)` reuses the encodings of the messages a view shares with the last one
hashed for the session (`kept_hash_v1`, version 1), and with version 2 the digest of them too
(`kept_hash_v2`: a step hashes only what it adds); the digest must be `view_hash`'s of the
session's version, byte for byte, or no recorded view would verify again.
"""

from __future__ import annotations

import random
from pathlib import Path

import msgspec
import pytest

from ctxledger import Config, Host, Message, ToolCall
from ctxledger.domain import view as view_module
from ctxledger.domain import view_hashing as hashing
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


#: Each version's hash with what the last view kept, and what it keeps of a view's messages.
KEPT = {
    1: (hashing.kept_hash_v1, lambda kept: kept[0]),
    2: (hashing.kept_hash_v2, lambda kept: kept.shown),
}


@pytest.mark.parametrize("version", [1, 2])
def test_kept_encodings_give_the_fresh_hash_as_views_grow_change_and_shrink(version: int) -> None:
    hash_with, kept_shown = KEPT[version]
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
        digest, kept = hash_with(mode, checkpoint_id, shown, kept)
        assert digest == view_hash(mode, checkpoint_id, shown, version=version)
        if before is not None and tuple(shown[: len(kept_shown(before))]) == kept_shown(before):
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
        assert hashing._same_prefix(tuple(shown), kept) == first


def test_a_view_changed_near_its_end_encodes_only_from_the_change_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A masking boundary that moved changes a result near the end of a long view: the
    messages before it keep their encodings (and the digest is view_hash's)."""
    shown = _messages(400, seed=6)
    _, kept = hashing.kept_hash_v1("full_history", None, shown, None)
    encoded: list[object] = []
    encoder = hashing._hash_encoder

    class Counting:
        def encode(self, value: object) -> bytes:
            encoded.append(value)
            return encoder.encode(value)

    monkeypatch.setattr(hashing, "_hash_encoder", Counting())
    changed = [*shown[:390], msgspec.structs.replace(shown[390], content="[masked]"), *shown[391:]]
    digest, _ = hashing.kept_hash_v1("full_history", None, [*changed, shown[0]], kept)
    assert digest == view_hash("full_history", None, [*changed, shown[0]], version=1)
    messages = [value for value in encoded if isinstance(value, Message)]
    assert len(messages) == 11  # the changed one, the nine after it, the new one


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("count", [0, 1, 15, 16, 17, 32, 65_535, 65_536])
def test_every_length_of_view_hashes_alike(count: int, version: int) -> None:
    hash_with, _ = KEPT[version]
    messages = [Message(role="user", content="a", seq=1)] * count
    digest, kept = hash_with("full_history", None, messages, None)
    assert digest == view_hash("full_history", None, messages, version=version)
    longer = [*messages, messages[0]] if count else []
    again, _ = hash_with("full_history", None, longer, kept)
    assert again == view_hash("full_history", None, longer, version=version)


class _Fed:
    """A SHA-256 that counts the bytes fed to it and to its copies (``fed``, shared)."""

    def __init__(self, fed: list[int], data: bytes = b"", inner: object = None) -> None:
        import hashlib

        self.fed = fed
        self.inner = hashlib.sha256() if inner is None else inner
        self.update(data)

    def update(self, data: bytes | memoryview) -> None:
        self.fed.append(len(data))
        self.inner.update(data)  # type: ignore[attr-defined]

    def copy(self) -> _Fed:
        return _Fed(self.fed, inner=self.inner.copy())  # type: ignore[attr-defined]

    def hexdigest(self) -> str:
        return self.inner.hexdigest()  # type: ignore[attr-defined, no-any-return]


def test_version_2_hashes_only_what_a_step_adds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step that extends the last view encodes and feeds the digest only the new messages and
    the count; one that changes a message near the end does so from the mark before the change
    (nothing of the view's encoding is kept)."""
    shown = _messages(400, seed=6)
    fed: list[int] = []

    class Hashlib:
        @staticmethod
        def sha256(data: bytes = b"") -> _Fed:
            return _Fed(fed, data)

    encoder = hashing._hash_encoder
    encoded: list[object] = []

    class Counting:
        def encode(self, value: object) -> bytes:
            encoded.append(value)
            return encoder.encode(value)

    monkeypatch.setattr(hashing, "hashlib", Hashlib)
    monkeypatch.setattr(hashing, "_hash_encoder", Counting())
    _, kept = hashing.kept_hash_v2("full_history", None, shown, None)
    fed.clear()
    encoded.clear()
    encode = encoder.encode
    extended = [*shown, shown[5]]
    digest, kept_more = hashing.kept_hash_v2("full_history", None, extended, kept)
    assert sum(fed) == len(encode(shown[5])) + len(encode(401))
    assert [m for m in encoded if isinstance(m, Message)] == [shown[5]]  # the new one only
    assert digest == view_hash("full_history", None, extended, version=2)
    fed.clear()
    encoded.clear()
    changed = [*shown[:390], msgspec.structs.replace(shown[390], content="[masked]"), *shown[391:]]
    digest, _ = hashing.kept_hash_v2("full_history", None, changed, kept_more)
    mark = 390 // hashing.MARK_EVERY * hashing.MARK_EVERY  # 384
    assert sum(fed) == sum(len(encode(m)) for m in changed[mark:]) + len(encode(400))
    assert [m for m in encoded if isinstance(m, Message)] == changed[mark:]
    assert digest == view_hash("full_history", None, changed, version=2)


def test_a_new_head_hashes_the_view_afresh() -> None:
    """Another mode or checkpoint id is hashed first: nothing kept is resumed under it."""
    shown = _messages(300, seed=8)
    _, kept = hashing.kept_hash_v2("full_history", None, shown, None)
    digest, again = hashing.kept_hash_v2("compact_checkpoint", "c1", shown, kept)
    assert digest == view_hash("compact_checkpoint", "c1", shown, version=2)
    assert again.head == ("compact_checkpoint", "c1")
    assert digest != view_hash("compact_checkpoint", "c1", shown, version=1)


def test_a_version_other_than_1_or_2_is_refused() -> None:
    with pytest.raises(ValueError, match="version must be 1 or 2, got 3"):
        view_hash("full_history", None, [], version=3)


def test_a_schema_5_config_keeps_version_1_and_a_config_built_now_has_2(tmp_path: Path) -> None:
    """A session whose Config was recorded before schema 6 hashes its views as then (its
    recorded views verify); a Config changed to schema 6 hashes the next views with version 2,
    and the log still verifies."""
    from ctxledger.replay import verify

    assert Config().view_hash_version == 2 == hashing.VIEW_HASH_VERSION
    old = Config(context_window=400_000, schema_version=5)
    assert old.view_hash_version == 1
    steps = list(iter_agent_steps(4, steps=150))
    with Host.open(tmp_path / "db") as host:
        session = host.session("s", config=old)
        for step in steps[:140]:
            view = session.step(step)
            assert view.view_hash == view_hash(view.mode, view.checkpoint_id, view.messages,
                                               version=1)  # fmt: skip
        assert len(view.messages) >= view_module.KEEP_ENCODINGS_FROM  # the kept path too
        host.session("s", config=old.replace(schema_version=6))
        for step in steps[140:]:
            view = session.step(step)
            assert view.view_hash == view_hash(view.mode, view.checkpoint_id, view.messages)
    assert verify(tmp_path / "db").ok


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
    """Short views are hashed whole (cheaper), long ones with the digests kept: a host's
    hashes are view_hash's on both sides of KEEP_DIGESTS_FROM (version 2, a Config built
    now)."""
    config = Config(context_window=400_000, compression_threshold=0.8)
    sizes = []
    with Host.open(tmp_path / "db", config=config) as host:
        session = host.session("s")
        for step in iter_agent_steps(4, steps=140):
            view = session.step(step)
            assert view.view_hash == view_hash(view.mode, view.checkpoint_id, view.messages)
            sizes.append(len(view.messages))
    assert min(sizes) < hashing.KEEP_DIGESTS_FROM <= max(sizes)  # both paths were taken


def test_draft_view_keeps_encodings_from_the_threshold_on() -> None:
    from ctxledger.domain.state import SessionState
    from ctxledger.domain.view import Draft

    state = SessionState.new("s", Config())
    short = [Message(role="user", content="a", seq=n) for n in range(1, hashing.KEEP_DIGESTS_FROM)]
    long = [Message(role="user", content="a", seq=n) for n in range(1, 300)]
    for messages, kept in ((long, True), (short, False), (long, True)):
        view = Draft(None, messages, 1, 1, len(messages)).view(state)
        assert view.view_hash == view_hash(view.mode, None, messages)
        assert (state.view_encodings is not None) == kept
        assert not kept or isinstance(state.view_encodings, hashing.Hashed)
