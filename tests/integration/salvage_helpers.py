"""Damaging an LMDB log on purpose, for the salvage tests."""

from __future__ import annotations

from pathlib import Path

import lmdb

from ctxledger.storage._layout import pack_pair, unpack_stamp


def damage(db: Path, session_id: str, seqs: list[int]) -> None:
    """Flip one byte in the middle of each of the session's records ``seqs`` (log closed)."""
    with lmdb.open(str(db), max_dbs=16) as env:
        sessions, events = env.open_db(b"sessions"), env.open_db(b"events")
        with env.begin(write=True) as txn:
            number, _ = unpack_stamp(txn.get(session_id.encode(), db=sessions))
            for seq in seqs:
                key = pack_pair(number, seq)
                value = bytearray(txn.get(key, db=events))
                value[len(value) // 2] ^= 0x20
                txn.put(key, bytes(value), db=events)
