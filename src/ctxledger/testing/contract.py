"""The EventLog contract as a pytest base class: every case, against your backend.

Subclass :class:`EventLogContract` in a test module, name the subclass ``Test...`` and define
``make_log``; pytest then runs every case of the contract against that backend::

    from ctxledger.testing import EventLogContract

    class TestMyEventLog(EventLogContract):
        def make_log(self, tmp_path):
            return MyEventLog.open(tmp_path / "log")

        def reopen_log(self, log, tmp_path):  # optional: the restart cases
            log.close()
            return MyEventLog.open(tmp_path / "log")

The memory, LMDB and PostgreSQL backends of ctxledger are tested by exactly these cases
(``tests/contract/test_event_log_contract.py``). This module imports pytest; it needs the
``test`` extra.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxledger.storage import EventLog
from ctxledger.testing._contract_reads import ReadCases
from ctxledger.testing._contract_writes import WriteCases

__all__ = ["EventLogContract"]


class EventLogContract(WriteCases, ReadCases):
    """Every case of the :class:`~ctxledger.storage.EventLog` contract, for a backend to inherit.

    A subclass defines :meth:`make_log` (a new, empty, open log per case) and may define
    :meth:`reopen_log` (close a log and open the same one again: the restart cases) and
    :meth:`damage_snapshot` (flip a byte of a stored snapshot: the checksum case); the cases
    that need an undefined hook are skipped, saying which hook would run them. Each case gets
    the log as the ``log`` fixture, closed after the case (``close`` must be idempotent).

    The cases: dense seqs and global positions, atomic batches, version conflicts (one winner
    among concurrent writers, losers write nothing), argument checks before anything is
    queued, an unencodable event failing its append alone, ``submit`` callbacks (once, in
    order, with conflicts), ``aappend`` from many tasks and loops, reads by range, limit and
    position, streaming (``iter_events``, ``iter_bodies``), a tailing reader seeing every
    position once, snapshots (bounds, per session, replacement, deletion, a damaged one
    skipped), a closed log refusing work, and what survives a restart.
    """

    @pytest.fixture
    def log(self, tmp_path: Path) -> Iterator[EventLog]:
        """The backend's empty log for one case, closed after it."""
        opened = self.make_log(tmp_path)
        try:
            yield opened
        finally:
            opened.close()
