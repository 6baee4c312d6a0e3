"""Fixtures of the EventLog contract suite: each backend in turn, and an open log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from log_backends import Backend, LmdbBackend, MemoryBackend, PostgresBackend

from ctxledger.storage import EventLog


@pytest.fixture(params=["memory", "lmdb", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each backend in turn (PostgreSQL in fresh schemas of the suite's server)."""
    if request.param == "memory":
        yield MemoryBackend()
    elif request.param == "postgres":
        server = request.getfixturevalue("pg_server")
        schema = request.getfixturevalue("pg_schema")
        yield PostgresBackend(server, schema)
        server.drop_schema(f"{schema}_fresh")
    else:
        yield LmdbBackend(tmp_path)


@pytest.fixture
def log(backend: Backend) -> Iterator[EventLog]:
    """An empty log of the current backend, closed after the test."""
    opened = backend.open()
    yield opened
    opened.close()
