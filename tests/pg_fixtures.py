"""The PostgreSQL server of the test suite: ``CTXLEDGER_PG_DSN``, or a throwaway cluster.

With ``CTXLEDGER_PG_DSN`` set (a ``postgresql://`` URI), the tests use that server (they create
and drop their own schemas and databases in it). Otherwise one cluster is started for the whole run
(:class:`ctxledger.testing.postgres.TemporaryCluster`: initdb in a folder under /tmp, a private
unix socket, as the ``postgres`` user when running as root) and removed at the end. Without
server binaries the PostgreSQL tests are skipped with one line, except under ``CI=true``, where
they fail. Tests that need the server carry the ``postgres`` marker.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from ctxledger.testing.postgres import TemporaryCluster, find_server_binaries

_names = itertools.count(1)


class PgServer:
    """The server the tests use, and fresh schemas and databases in it."""

    def __init__(self, dsn: str, cluster: TemporaryCluster | None) -> None:
        self.dsn = dsn
        #: The cluster the tests started (None when CTXLEDGER_PG_DSN names the server).
        self.cluster = cluster

    def new_schema(self) -> str:
        """A schema name no test has used in this run (the log creates the schema)."""
        return f"t{os.getpid()}_{next(_names)}"

    def drop_schema(self, schema: str) -> None:
        """Drop ``schema`` and everything in it."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            # A log a test left open must not hold a lock: fail loudly rather than hang.
            conn.execute("SET lock_timeout = '60s'")
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    def empty_log(self, schema: str) -> None:
        """Delete every row of the log in ``schema``, as if it had just been created."""
        import psycopg

        with psycopg.connect(self.dsn) as conn:
            for table in ("events", "sessions", "snapshots", "dicts", "leases"):
                conn.execute(f'DELETE FROM "{schema}".{table}')
            conn.execute(f"DELETE FROM \"{schema}\".meta WHERE name <> 'format'")
            conn.execute(
                f'UPDATE "{schema}".head SET position = 0, sessions = 0, '
                "raw_bytes = 0, stored_bytes = 0"
            )

    def create_database(self) -> str:
        """Create an empty database; return its DSN."""
        import psycopg

        name = f"t{os.getpid()}_{next(_names)}"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return urlunsplit(urlsplit(self.dsn)._replace(path=f"/{name}"))

    def drop_database(self, dsn: str) -> None:
        """Drop the database of ``dsn``, closing whatever connections are left in it."""
        import psycopg
        from psycopg.conninfo import conninfo_to_dict

        name = conninfo_to_dict(dsn)["dbname"]
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def unavailable_reason() -> str | None:
    """Why this run has no PostgreSQL server to test against, or None if it has one."""
    try:
        import psycopg  # noqa: F401  (the `postgres` extra, part of the `test` extra)
    except ImportError:
        return "psycopg is not installed (pip install -e '.[test]')"
    if os.environ.get("CTXLEDGER_PG_DSN"):
        return None
    if find_server_binaries() is None:
        return "no server binaries (initdb, pg_ctl) and CTXLEDGER_PG_DSN is not set"
    return None


def _on_ci() -> bool:
    return os.environ.get("CI") == "true"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without a server, leave the ``postgres`` tests out and say so once (not under CI)."""
    reason = unavailable_reason()
    if reason is None or _on_ci():
        return  # under CI the pg_server fixture fails them instead
    left_out = [item for item in items if item.get_closest_marker("postgres") is not None]
    if left_out:
        items[:] = [item for item in items if item.get_closest_marker("postgres") is None]
        config.hook.pytest_deselected(items=left_out)
        config.stash[_LEFT_OUT] = f"{len(left_out)} PostgreSQL tests not run: {reason}"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The one line that says the PostgreSQL tests were left out, and why."""
    line = terminalreporter.config.stash.get(_LEFT_OUT, None)
    if line is not None:
        terminalreporter.write_line(f"SKIPPED {line}", yellow=True, bold=True)


_LEFT_OUT = pytest.StashKey[str]()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """The PostgreSQL server of this run (see the module docstring)."""
    reason = unavailable_reason()
    if reason is not None:
        message = f"PostgreSQL tests need a server: {reason}"
        if _on_ci():
            pytest.fail(f"{message} (CI=true: failing instead of skipping)", pytrace=False)
        pytest.skip(message)
    dsn = os.environ.get("CTXLEDGER_PG_DSN")
    if dsn:
        yield PgServer(dsn, None)
        return
    with TemporaryCluster() as cluster:
        yield PgServer(cluster.dsn(), cluster)


@pytest.fixture
def pg_schema(pg_server: PgServer) -> Iterator[str]:
    """A fresh schema name for one test, dropped afterwards."""
    schema = pg_server.new_schema()
    yield schema
    pg_server.drop_schema(schema)


@pytest.fixture
def pg_database(pg_server: PgServer) -> Iterator[str]:
    """The DSN of a fresh, empty database for one test (for code that uses the default
    schema, such as ``Host.open`` and the CLI), dropped afterwards."""
    dsn = pg_server.create_database()
    yield dsn
    pg_server.drop_database(dsn)
