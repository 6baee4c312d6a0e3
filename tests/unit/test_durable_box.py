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


def test_a_holder_taking_an_empty_box_without_its_lock_strands_no_batch() -> None:
    """``hold`` and ``take`` leave an empty box without its lock (stop 58). Whatever the
    interleaving with a publisher on another thread, every batch is taken exactly once, and one
    left in the box when the publisher is done has had the actor told since it was last taken
    (else it would wait for a fold that never comes)."""
    box, ref = DurableBox(), _Tells()
    posted = 20_000
    done = threading.Event()

    def publish() -> None:
        for token in range(posted):
            box.post(_durable("s", token), ref)  # type: ignore[arg-type]
        done.set()

    publisher = threading.Thread(target=publish)
    taken: list[Durable] = []
    told_before = 0  # tells made before the holder's last take
    publisher.start()
    while not done.is_set():  # the holder: a command carried out inline, again and again
        taken.extend(box.hold())
        told_before = len(ref.told)
        taken.extend(box.take())
    publisher.join()
    left = box.take() if box.waiting() else []
    if left:  # posted after the holder's last take: the actor must have been told of them
        assert len(ref.told) > told_before, "a batch was left in the box, the actor not told"
    assert [d.token for d in taken + left] == list(range(posted))


def test_the_mailbox_view_follows_the_inbox() -> None:
    """A ThreadingActor's inbox (a ``queue.Queue``) is read through its deque; any other inbox
    through pykka's ``empty()``."""
    import queue

    from ctxledger.actors.history_base import mailbox_view

    inbox: queue.Queue[object] = queue.Queue()
    view = mailbox_view(inbox)
    assert not view
    inbox.put("message")
    assert view
    inbox.get()
    assert not view

    class _Inbox:
        def __init__(self) -> None:
            self.items: list[object] = []

        def empty(self) -> bool:
            return not self.items

    other = _Inbox()
    asked = mailbox_view(other)
    assert not asked
    other.items.append("message")
    assert asked
