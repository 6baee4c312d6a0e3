"""The history actor's durable box: the journal's durable batches reach the actor in the order
published, every one exactly once, with one ``DurablesReady`` per burst instead of one message
per batch; a defect while one batch is folded fails that batch's session only."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pykka
import pytest

from ctxledger.actors.history_base import DurableBox
from ctxledger.actors.messages import Durable, DurablesReady
from ctxledger.actors.writes import Writes


class _Recorder(pykka.ThreadingActor):
    """A real actor that takes what its box holds whenever it is told ``DurablesReady``."""

    def __init__(self, box: DurableBox) -> None:
        super().__init__()
        self.box = box
        self.told = 0
        self.taken: list[Durable] = []

    def on_receive(self, message: object) -> object:
        if isinstance(message, DurablesReady):
            self.told += 1
            self.taken.extend(self.box.take())
            return None
        return self.told, list(self.taken)  # anything else: ask what it has seen


class _Tells:
    """Records what it is told (a ref whose actor never takes its box)."""

    def __init__(self) -> None:
        self.told: list[object] = []

    def tell(self, message: object) -> None:
        self.told.append(message)


def _durable(session: str, token: int) -> Durable:
    return Durable(session, token, [], None)


def test_a_burst_tells_the_actor_once_and_keeps_the_order() -> None:
    box, ref = DurableBox(), _Tells()
    told = ref.told
    for token in range(1, 6):
        box.post(_durable("s", token), ref)  # type: ignore[arg-type]
    assert told == [DurablesReady()]
    assert [d.token for d in box.take()] == [1, 2, 3, 4, 5]
    assert box.take() == []
    box.post(_durable("s", 6), ref)  # type: ignore[arg-type]
    assert told == [DurablesReady(), DurablesReady()]  # taken since: told again
    assert [d.token for d in box.take()] == [6]


def test_posts_from_many_threads_each_reach_the_actor_once_in_each_threads_order() -> None:
    box = DurableBox()
    ref = _Recorder.start(box)
    try:
        start = threading.Barrier(8)

        def post(thread: int) -> None:
            start.wait()
            for token in range(500):
                box.post(_durable(f"s{thread}", token), ref)  # type: ignore[arg-type]

        threads = [threading.Thread(target=post, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        told, taken = ref.ask("seen")
    finally:
        ref.stop()
    assert len(taken) == 8 * 500
    for thread in range(8):  # each publisher's batches in the order it posted them
        assert [d.token for d in taken if d.session_id == f"s{thread}"] == list(range(500))
    assert 1 <= told <= len(taken)


def test_a_defect_folding_one_batch_fails_its_session_and_not_the_batches_after_it() -> None:
    box, ref = DurableBox(), _Tells()
    done: list[str] = []
    contained: list[tuple[str, str]] = []
    for session in ("a", "broken", "c"):
        box.post(_durable(session, 1), ref)  # type: ignore[arg-type]

    def on_durable(message: Durable) -> None:
        if message.session_id == "broken":
            raise RuntimeError("a defect")
        done.append(message.session_id)

    actor = SimpleNamespace(
        _durables=box,
        _on_durable=on_durable,
        _contain=lambda message, exc: contained.append((message.session_id, str(exc))),
    )
    Writes._on_durables(actor)  # type: ignore[arg-type]
    assert done == ["a", "c"]
    assert contained == [("broken", "a defect")]


def test_a_dead_actor_raises_to_the_publisher() -> None:
    box = DurableBox()
    ref = _Recorder.start(box)
    ref.stop()
    with pytest.raises(pykka.ActorDeadError):
        box.post(_durable("s", 1), ref)  # type: ignore[arg-type]
