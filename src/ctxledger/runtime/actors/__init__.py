"""Thin pykka actors around the pure domain: history, budget, projection and compaction.

Actors only sequence *persist → evolve → publish*; every decision is made by
:mod:`ctxledger.domain`. The shared journal that group-commits appends from all sessions lives in
the event log (:mod:`ctxledger.storage`), which owns the single LMDB write transaction.
"""

from ctxledger.runtime.actors.compaction import CompactionActor
from ctxledger.runtime.actors.history import HistoryActor
from ctxledger.runtime.actors.replica import BudgetActor, ProjectionActor, Published

__all__ = ["BudgetActor", "CompactionActor", "HistoryActor", "ProjectionActor", "Published"]
