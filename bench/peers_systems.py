"""The systems ctxledger's persistence is compared with, behind one small interface.

Each peer is set up the way its users would set it up, with durable settings (every append is
on disk when it returns, except ``lmdb-txn64``, which is the throughput ceiling):

================  ========================================================================
name              what it does per appended message
================  ========================================================================
langgraph-sqlite  ``graph.update_state`` on a ``StateGraph`` whose ``messages`` key (a list
                  with an ``operator.add`` reducer) holds the conversation; ``SqliteSaver``
                  with ``PRAGMA synchronous=FULL`` (WAL) writes a checkpoint of the whole
                  state, one thread_id per conversation
eventsourcing-    one ``Conversation`` aggregate per conversation, one ``MessageAppended``
sqlite            event per message, ``app.save`` to the library's SQLite recorder (WAL;
                  synchronous is FULL, checked at open)
eventsourcing-    the same application on the library's PostgreSQL recorder (psycopg 3,
postgres          ``synchronous_commit`` on, a pool of 64 connections so no thread waits
                  for one), on the benchmark's throwaway cluster
jsonl-fsync       one JSONL file per conversation: write a line, flush, ``os.fsync``
lmdb-txn1         raw ``lmdb`` (``sync=True``): one write transaction per message
lmdb-txn64        raw ``lmdb`` (``sync=True``): 64 messages per transaction; an append
                  returns before its batch commits (the group-commit limit, not durable)
lmdb-writer       a floor, not a peer: the least a single-writer log costs in Python. One
                  thread owns raw ``lmdb`` (``sync=True``); a caller queues its message and
                  waits; the writer commits everything queued in one transaction (the seq
                  and a global position, two puts, as ctxledger's layout), then wakes the
                  group's callers. No events, no checks, no actors: two thread hand-offs
                  and one commit per append, what ctxledger's design cannot go under with
                  many writers at once (a lone writer's appends skip the hand-offs)
lmdb-layout       a floor, not a peer: ``lmdb-writer``'s layout (two puts a message) with
                  each message committed on the caller's thread, as ctxledger commits a
                  lone writer's append when its journal is idle (no hand-off at all; a
                  lock serialises callers): the sequential floor of that path
================  ========================================================================

Messages are plain dicts in the ../shared/traces format, stored as JSON (LMDB, JSONL,
eventsourcing) or as the library serialises state (LangGraph). The optional libraries are
imported when a system is opened, so the module imports without them
(``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import json
import operator
import os
import queue
import sqlite3
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Protocol, TypedDict

Message = dict[str, Any]


class PersistenceSystem(Protocol):
    """What the driver needs of a system: append, close, re-open, read back, measure."""

    name: str

    def open(self, directory: Path) -> None:
        """Open (or create) the system's store in ``directory``."""

    def append(self, conv_id: str, message: Message) -> None:
        """Persist one message at the end of a conversation; safe to call from many threads."""

    def close(self) -> None:
        """Flush and close; the store stays on disk."""

    def recover(self, conv_id: str) -> list[Message]:
        """Load every message of a conversation from the (re-)opened store, in order."""

    def bytes_on_disk(self) -> int:
        """Bytes the store occupies on disk (allocated blocks of every file in its folder)."""


def directory_bytes(directory: Path) -> int:
    """Allocated bytes of every file under ``directory`` (sparse files count what they use)."""
    return sum(path.stat().st_blocks * 512 for path in directory.rglob("*") if path.is_file())


class _Folder:
    """Remembers the store's folder for :meth:`bytes_on_disk`."""

    directory: Path

    def bytes_on_disk(self) -> int:
        return directory_bytes(self.directory)


# --- LangGraph ----------------------------------------------------------------------------------


class _ConversationState(TypedDict):
    messages: Annotated[list[Message], operator.add]


class LangGraphSqlite(_Folder):
    """LangGraph with its SQLite checkpointer, the conversation in graph state."""

    name = "langgraph-sqlite"

    def open(self, directory: Path) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import START, StateGraph

        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        # SqliteSaver serialises access to the connection with its own lock.
        self._connection = sqlite3.connect(
            directory / "checkpoints.sqlite", check_same_thread=False
        )
        self._connection.execute("PRAGMA synchronous=FULL")
        saver = SqliteSaver(self._connection)
        saver.setup()
        builder = StateGraph(_ConversationState)
        builder.add_node("agent", lambda state: {})
        builder.add_edge(START, "agent")
        self._graph = builder.compile(checkpointer=saver)

    def append(self, conv_id: str, message: Message) -> None:
        config = {"configurable": {"thread_id": conv_id}}
        self._graph.update_state(config, {"messages": [message]}, as_node="agent")

    def recover(self, conv_id: str) -> list[Message]:
        state = self._graph.get_state({"configurable": {"thread_id": conv_id}})
        return list(state.values.get("messages", []))

    def close(self) -> None:
        self._connection.close()


# --- eventsourcing ------------------------------------------------------------------------------


def _sqlite_syncs_every_wal_commit() -> bool:
    """Whether a new SQLite connection in WAL mode defaults to ``synchronous=FULL`` (2)."""
    connection = sqlite3.connect(":memory:")
    try:
        options = {row[0] for row in connection.execute("PRAGMA compile_options")}
    finally:
        connection.close()
    wal_default = next((o for o in options if o.startswith("DEFAULT_WAL_SYNCHRONOUS=")), None)
    default = next((o for o in options if o.startswith("DEFAULT_SYNCHRONOUS=")), None)
    return (wal_default or default or "DEFAULT_SYNCHRONOUS=2").endswith("=2")


_CONVERSATION: list[type] = []


def _conversation_class() -> type:
    """The ``Conversation`` aggregate, defined once (the library refuses a second class under
    the same topic in one process)."""
    if not _CONVERSATION:
        from eventsourcing.domain import Aggregate, event

        class Conversation(Aggregate):
            def __init__(self, conv_id: str) -> None:
                self.conv_id = conv_id
                self.messages: list[Message] = []

            @staticmethod
            def create_id(conv_id: str) -> uuid.UUID:
                return uuid.uuid5(uuid.NAMESPACE_URL, f"/conversations/{conv_id}")

            @event("MessageAppended")
            def append(self, message: Message) -> None:
                self.messages.append(message)

        _CONVERSATION.append(Conversation)
    return _CONVERSATION[0]


class EventsourcingSqlite(_Folder):
    """The ``eventsourcing`` library: one aggregate per conversation, one event per message."""

    name = "eventsourcing-sqlite"

    def open(self, directory: Path) -> None:
        from eventsourcing.application import Application

        # The library opens its own connections and sets no synchronous pragma, so durability
        # rests on SQLite's compiled-in default; refuse to measure a non-durable setup.
        if not _sqlite_syncs_every_wal_commit():
            raise RuntimeError("this SQLite build does not fsync each WAL commit by default")
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._conversation_class = _conversation_class()
        self._app = Application(env={
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": str(directory / "events.sqlite"),
        })
        # Users keep a live aggregate and save its new events; loading it per append would
        # replay the whole conversation every time.
        self._live: dict[str, Any] = {}
        self._lock = threading.Lock()

    def append(self, conv_id: str, message: Message) -> None:
        conversation = self._live.get(conv_id)
        if conversation is None:
            with self._lock:
                conversation = self._live.setdefault(conv_id, self._conversation_class(conv_id))
        conversation.append(message)
        self._app.save(conversation)

    def recover(self, conv_id: str) -> list[Message]:
        aggregate_id = self._conversation_class.create_id(conv_id)
        return list(self._app.repository.get(aggregate_id).messages)

    def close(self) -> None:
        self._app.close()
        self._live.clear()


class EventsourcingPostgres(EventsourcingSqlite):
    """The same ``eventsourcing`` application on the library's PostgreSQL recorder.

    Args:
        dsn_for: Returns the DSN of the database of a folder (a fresh one on first use, the
            same one when the folder is opened again).
        pool_size: Connections in the library's pool.
    """

    name = "eventsourcing-postgres"

    def __init__(self, dsn_for: Callable[[Path], str], pool_size: int = 64) -> None:
        self._dsn_for = dsn_for
        self._pool_size = pool_size

    def open(self, directory: Path) -> None:
        from urllib.parse import parse_qs, urlsplit

        from eventsourcing.application import Application

        self.directory = directory
        self._dsn = self._dsn_for(directory)
        parts = urlsplit(self._dsn)
        query = parse_qs(parts.query)
        self._conversation_class = _conversation_class()
        self._app = Application(env={
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": parts.path.lstrip("/"),
            "POSTGRES_HOST": query["host"][0],
            "POSTGRES_PORT": query["port"][0],
            "POSTGRES_USER": parts.username or "postgres",
            "POSTGRES_PASSWORD": "",
            "POSTGRES_POOL_SIZE": str(self._pool_size),
            "POSTGRES_MAX_OVERFLOW": "0",
        })
        self._live: dict[str, Any] = {}
        self._lock = threading.Lock()

    def bytes_on_disk(self) -> int:
        from pg_support import table_bytes

        return table_bytes(self._dsn)


# --- a JSONL file per conversation --------------------------------------------------------------


class JsonlFsync(_Folder):
    """One JSONL file per conversation; every line is flushed and fsynced before returning."""

    name = "jsonl-fsync"

    def open(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _file(self, conv_id: str) -> Any:
        handle = self._files.get(conv_id)
        if handle is None:
            with self._lock:
                handle = self._files.get(conv_id)
                if handle is None:
                    handle = open(self.directory / f"{conv_id}.jsonl", "ab")  # noqa: SIM115
                    # A new file is durable only once its directory entry is.
                    folder = os.open(self.directory, os.O_RDONLY)
                    try:
                        os.fsync(folder)
                    finally:
                        os.close(folder)
                    self._files[conv_id] = handle
        return handle

    def append(self, conv_id: str, message: Message) -> None:
        handle = self._file(conv_id)
        handle.write(json.dumps(message, ensure_ascii=False).encode() + b"\n")
        handle.flush()
        os.fsync(handle.fileno())

    def recover(self, conv_id: str) -> list[Message]:
        with open(self.directory / f"{conv_id}.jsonl", "rb") as lines:
            return [json.loads(line) for line in lines]

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()
        self._files.clear()


# --- raw LMDB -----------------------------------------------------------------------------------


class RawLmdb(_Folder):
    """Raw ``lmdb``: key (conversation, seq), value the message as JSON; ``batch`` per txn."""

    def __init__(self, batch: int = 1) -> None:
        self.batch = batch
        self.name = f"lmdb-txn{batch}"

    def open(self, directory: Path) -> None:
        import lmdb

        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._env = lmdb.open(str(directory), map_size=16 << 30, sync=True, metasync=True)
        self._seqs: dict[str, int] = {}
        self._pending: list[tuple[bytes, bytes]] = []
        self._lock = threading.Lock()

    @staticmethod
    def _prefix(conv_id: str) -> bytes:
        return conv_id.encode() + b"\x00"

    def append(self, conv_id: str, message: Message) -> None:
        value = json.dumps(message, ensure_ascii=False).encode()
        with self._lock:  # seqs and the batch are shared by every thread
            seq = self._seqs.get(conv_id, 0) + 1
            self._seqs[conv_id] = seq
            self._pending.append((self._prefix(conv_id) + seq.to_bytes(8, "big"), value))
            if len(self._pending) >= self.batch:
                self._commit()

    def _commit(self) -> None:
        with self._env.begin(write=True) as txn:
            for key, value in self._pending:
                txn.put(key, value, append=False)
        self._pending.clear()

    def recover(self, conv_id: str) -> list[Message]:
        prefix = self._prefix(conv_id)
        messages = []
        with self._env.begin() as txn:
            cursor = txn.cursor()
            if cursor.set_range(prefix):
                for key, value in cursor:
                    if not key.startswith(prefix):
                        break
                    messages.append(json.loads(value))
        last = len(messages)
        self._seqs[conv_id] = last
        return messages

    def close(self) -> None:
        with self._lock:
            if self._pending:
                self._commit()
        self._env.close()


class LmdbWriter(_Folder):
    """A floor: one writer thread owning raw ``lmdb``, group commit, callers hand off and wait.

    The minimum of any log with a single writer thread (ctxledger's journal): per append two
    thread hand-offs (caller to writer, writer back to caller) and one durable commit shared by
    whatever was queued meanwhile; per message a put keyed by (conversation, seq) and one in a
    global position index, as ctxledger's layout. It validates nothing and encodes JSON only.
    """

    name = "lmdb-writer"

    def open(self, directory: Path) -> None:
        self._open_layout(directory)
        self._queue: queue.SimpleQueue[tuple[bytes, bytes, threading.Lock] | None] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._run, name="lmdb-writer", daemon=True)
        self._thread.start()

    def _open_layout(self, directory: Path) -> None:
        """Open raw ``lmdb`` with the two databases of ctxledger's layout."""
        import lmdb

        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._env = lmdb.open(
            str(directory), map_size=16 << 30, sync=True, metasync=True, max_dbs=2
        )
        self._events = self._env.open_db(b"events")
        self._global = self._env.open_db(b"global")
        self._seqs: dict[bytes, int] = {}
        with self._env.begin(db=self._global) as txn:
            cursor = txn.cursor()
            self._position = int.from_bytes(cursor.key(), "big") if cursor.last() else 0

    def append(self, conv_id: str, message: Message) -> None:
        done = threading.Lock()
        done.acquire()
        self._queue.put((conv_id.encode(), json.dumps(message, ensure_ascii=False).encode(), done))
        done.acquire()  # released by the writer once the group is durable

    def _run(self) -> None:
        queue_get, get_nowait = self._queue.get, self._queue.get_nowait
        while True:
            group = [queue_get()]
            while True:  # everything queued by now joins the group
                try:
                    group.append(get_nowait())
                except queue.Empty:
                    break
            stop = None in group
            items = [item for item in group if item is not None]
            if items:
                self._commit(items)
            if stop:
                return

    def _commit(self, items: Sequence[tuple[bytes, bytes, threading.Lock | None]]) -> None:
        with self._env.begin(write=True) as txn:
            for conv, value, _ in items:
                seq = self._seqs.get(conv)
                seq = self._seqs[conv] = (self._last_seq(txn, conv) if seq is None else seq) + 1
                self._position += 1
                key = conv + b"\x00" + seq.to_bytes(8, "big")
                txn.put(key, value, db=self._events)
                txn.put(self._position.to_bytes(8, "big"), key, append=True, db=self._global)
        for _, _, done in items:
            if done is not None:
                done.release()

    def _last_seq(self, txn: Any, conv: bytes) -> int:
        cursor = txn.cursor(db=self._events)
        prefix = conv + b"\x00"
        # The last key before the next conversation's first: this one's last message, if any.
        found = cursor.prev() if cursor.set_range(conv + b"\x01") else cursor.last()
        if found and cursor.key().startswith(prefix):
            return int.from_bytes(cursor.key()[len(prefix) :], "big")
        return 0

    def recover(self, conv_id: str) -> list[Message]:
        prefix = conv_id.encode() + b"\x00"
        messages = []
        with self._env.begin() as txn:
            cursor = txn.cursor(db=self._events)
            if cursor.set_range(prefix):
                for key, value in cursor:
                    if not key.startswith(prefix):
                        break
                    message = self._decode(value)
                    if message is not None:
                        messages.append(message)
        return messages

    def _decode(self, value: bytes) -> Message | None:
        """The message a stored value holds (None: a record that is not a message)."""
        message: Message = json.loads(value)
        return message

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        self._env.close()


class LmdbLayout(LmdbWriter):
    """A floor, not a peer: ``lmdb-writer``'s layout with no thread hand-off.

    Each message is committed on the caller's thread in a write transaction of its own (two
    puts, ``sync=True``), callers serialised by a lock: what ctxledger's append costs a lone
    writer at least, since it commits on the caller's thread when its journal is idle
    (:mod:`ctxledger.actors.inline`). ``lmdb-txn1`` differs from it only by the layout (one put
    into one database), ``lmdb-writer`` by the two hand-offs.
    """

    name = "lmdb-layout"

    def open(self, directory: Path) -> None:
        self._open_layout(directory)
        self._lock = threading.Lock()

    def append(self, conv_id: str, message: Message) -> None:
        value = json.dumps(message, ensure_ascii=False).encode()
        with self._lock:
            self._commit([(conv_id.encode(), value, None)])

    def close(self) -> None:
        self._env.close()


PEER_SYSTEMS: dict[str, Callable[[], PersistenceSystem]] = {
    "langgraph-sqlite": LangGraphSqlite,
    "eventsourcing-sqlite": EventsourcingSqlite,
    "jsonl-fsync": JsonlFsync,
    "lmdb-txn1": lambda: RawLmdb(batch=1),
    "lmdb-txn64": lambda: RawLmdb(batch=64),
    "lmdb-writer": LmdbWriter,
    "lmdb-layout": LmdbLayout,
}
