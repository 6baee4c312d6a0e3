"""PostgreSQL for the benchmarks: the same throwaway cluster the tests start, and its ceilings.

:class:`PgDatabases` starts one :class:`ctxledger.testing.postgres.TemporaryCluster` (initdb in
a folder under /tmp, a private unix socket, ``fsync`` on, as the ``postgres`` user when run as
root) and hands out one fresh database per key. :func:`single_row_commits` and
:func:`pgbench_tps` measure what the same server does with one commit per event, the ceiling
that group commit must beat.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import psycopg

from ctxledger.testing.postgres import TemporaryCluster, find_server_binaries

__all__ = ["PgDatabases", "available", "pgbench_tps", "single_row_commits", "table_bytes"]


def available() -> bool:
    """Whether this machine has PostgreSQL server binaries to start a cluster with."""
    return find_server_binaries() is not None


class PgDatabases:
    """One throwaway cluster for a benchmark run; a fresh database per key (e.g. a folder)."""

    def __init__(self) -> None:
        self.cluster = TemporaryCluster()
        self._dsns: dict[Any, str] = {}
        self._lock = threading.Lock()

    def dsn_for(self, key: Any) -> str:
        """The DSN of the database of ``key``, created on first use."""
        with self._lock:
            dsn = self._dsns.get(key)
            if dsn is None:
                dsn = self._dsns[key] = self.cluster.create_database()
            return dsn

    def fresh(self) -> str:
        """The DSN of a new, empty database."""
        return self.cluster.create_database()

    def close(self) -> None:
        """Stop the cluster and delete its folder."""
        self.cluster.close()


def table_bytes(dsn: str) -> int:
    """Bytes of every user table of a database, with its indexes and TOAST (no WAL)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema')"
        ).fetchone()
    return int(row[0]) if row else 0


def single_row_commits(dsn: str, records: list[bytes], clients: int) -> float:
    """Insert ``records`` one row and one commit each from ``clients`` connections; events/s.

    The fsync-bound ceiling of one commit per event on this server: each client inserts its
    share into a table keyed like the log's events (session, seq, position, record) and commits
    after every row, with ``synchronous_commit`` on.
    """
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS one_commit_per_event (session bigint, seq bigint, "
            "position bigserial UNIQUE, record bytea, PRIMARY KEY (session, seq))"
        )
    shares = [records[index::clients] for index in range(clients)]
    barrier = threading.Barrier(clients + 1)

    def client(index: int) -> None:
        with psycopg.connect(dsn) as conn:
            conn.execute("SET synchronous_commit = on")
            conn.commit()
            barrier.wait()
            for seq, record in enumerate(shares[index], start=1):
                conn.execute(
                    "INSERT INTO one_commit_per_event (session, seq, record) VALUES (%s, %s, %s)",
                    [index, seq, record],
                )
                conn.commit()

    threads = [threading.Thread(target=client, args=(index,)) for index in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    return len(records) / (time.perf_counter() - start)


def pgbench_tps(cluster: TemporaryCluster, dsn: str, clients: int, seconds: float) -> float | None:
    """``pgbench -N`` (simple update, one commit per transaction) with ``clients``; its tps.

    Returns None where pgbench is not installed next to the server binaries.
    """
    pgbench = cluster.bindir / "pgbench"
    if not pgbench.is_file():
        return None
    dbname = urlsplit(dsn).path.lstrip("/")
    common = ["-h", cluster.host, "-p", str(cluster.port), "-U", "postgres"]
    subprocess.run(
        [str(pgbench), *common, "-i", "-q", "-s", "1", dbname],
        check=True,
        capture_output=True,
        timeout=300,
    )
    out = subprocess.run(
        [
            str(pgbench),
            *common,
            "-N",
            "-n",
            "-c",
            str(clients),
            "-j",
            str(min(clients, 2)),
            "-T",
            str(max(1, round(seconds))),
            dbname,
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=seconds + 300,
    ).stdout
    found = re.search(r"tps = ([0-9.]+)", out)
    return float(found.group(1)) if found else None
