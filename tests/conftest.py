"""Shared fixtures: real traces, hypothesis profiles, and actor hygiene."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pykka
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from ctxledger.domain import _fact_extract
from ctxledger.messages import Message
from ctxledger.tooling.traces import read_trace
from guards import worker_name
from pg_fixtures import (  # noqa: F401  (PostgreSQL fixtures and hooks)
    pg_database,
    pg_schema,
    pg_server,
    pytest_collection_modifyitems,
    pytest_terminal_summary,
)

# Two kinds of runs (issue 25). `make test` and CI run the same examples on every machine and
# every run: derandomize seeds each test from a hash of the test itself, and no example
# database is read or written, so a red `make test` is reproducible and a green one stays
# green. The random search runs on purpose: `make fuzz` (HYPOTHESIS_PROFILE=fuzz) draws many
# examples with a fresh seed each run and keeps what it finds in .hypothesis/ to replay them
# next time; every find is then pinned in the test as an `@example(...)` (with a comment saying
# where it came from), so that `make test` checks it forever.
# No explain phase: its line tracer (sys.settrace on 3.11) ran while actor and journal threads
# were live and the interpreter crashed with a segmentation fault in CI; a shrunk failing
# example is reported all the same without it.
_PHASES = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink]
_COMMON = {
    "deadline": None,
    "phases": _PHASES,
    "suppress_health_check": [HealthCheck.too_slow],
    "print_blob": True,
}
for _name, _examples in (("ci", 25), ("dev", 60)):
    settings.register_profile(
        _name, max_examples=_examples, derandomize=True, database=None, **_COMMON
    )
# The search: a fresh seed each run, finds kept in .hypothesis/examples. The database is named
# here rather than inherited: a profile inherits from the settings in force when it is
# registered, and with CI set in the environment hypothesis's own "ci" defaults (no database)
# are in force. "long" is the name this profile had before `make fuzz`.
for _name, _examples in (("fuzz", 1000), ("long", 2000)):
    settings.register_profile(
        _name,
        max_examples=_examples,
        derandomize=False,
        database=DirectoryBasedExampleDatabase(".hypothesis/examples"),
        **_COMMON,
    )
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

TRACES_DIR = Path(
    os.environ.get("CTXLEDGER_TRACES", Path(__file__).resolve().parents[2] / "shared" / "traces")
)


def trace_files() -> list[Path]:
    """Every ``*.jsonl`` trace in ../shared/traces (empty when the folder is missing)."""
    return sorted(TRACES_DIR.glob("*.jsonl")) if TRACES_DIR.is_dir() else []


@pytest.fixture(scope="session")
def traces() -> dict[str, list[Message]]:
    """All real traces by file stem; skips the test when ../shared/traces is missing."""
    files = trace_files()
    if not files:
        pytest.skip(f"real traces not found in {TRACES_DIR} (set CTXLEDGER_TRACES to the folder)")
    return {path.stem: read_trace(path) for path in files}


@pytest.fixture(autouse=True)
def _stop_all_actors() -> Iterator[None]:
    """Stop every pykka actor a test left running, so one test cannot hang the next.

    Daemon actors (a compaction actor stuck in a summariser call a test made slow on purpose)
    are asked to stop but not waited for.
    """
    yield
    refs = pykka.ActorRegistry.get_all()
    daemons = [ref for ref in refs if ref.actor_class.use_daemon_thread]
    for ref in daemons:
        ref.stop(block=False)
    for ref in reversed([ref for ref in refs if ref not in daemons]):
        ref.stop(block=True, timeout=10)


@pytest.fixture
def fact_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Each message whose facts are read afresh from now on (the memo of
    :func:`ctxledger.domain.facts.extract_facts` starts empty): the reading thread's name and
    the message's seq (0 without one)."""
    reads: list[tuple[str, int]] = []
    real = _fact_extract._compute_adds

    def counted(message: Message, name: str | None, command: str | None) -> object:
        reads.append((worker_name(), message.seq or 0))
        return real(message, name, command)

    monkeypatch.setattr(_fact_extract, "_compute_adds", counted)
    monkeypatch.setattr(_fact_extract, "_memo", _fact_extract._Memo())
    return reads
