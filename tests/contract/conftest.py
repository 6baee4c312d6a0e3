"""Fixtures of the EventLog contract suite: each backend in turn, and an open log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from log_backends import Backend, LmdbBackend, MemoryBackend

from ctxledger.storage import EventLog


@pytest.fixture(params=["memory", "lmdb"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Each backend in turn."""
    if request.param == "memory":
        return MemoryBackend()
    return LmdbBackend(tmp_path)


@pytest.fixture
def log(backend: Backend) -> Iterator[EventLog]:
    """An empty log of the current backend, closed after the test."""
    opened = backend.open()
    yield opened
    opened.close()
