"""Replay: rebuild any past view, verify a log, and try another policy on an old log.

Pure folds over events, without actors: :func:`rebuild` and :func:`view_at` (time travel),
:func:`verify` (re-derive every served view and checkpoint and compare), :func:`what_if`
(re-project a session under another Config without touching the log), :func:`find_damage`
(which sessions hold a damaged record, and where), :func:`salvage` (copy a damaged log into a
new one, replacing only the damaged records by ``RecordLost`` events) and the inspection of
compactions: :func:`audit` (what a compaction lost), :func:`explain` (where a message is in the
view) and :func:`recall` (full-text search of what the view no longer shows raw).
"""

from ctxledger.replay.audit import audit, explain, recall, state_at_checkpoint
from ctxledger.replay.damage import Damage, find_damage
from ctxledger.replay.loading import fold_session
from ctxledger.replay.rebuild import LogSource, SessionState, rebuild, view_at
from ctxledger.replay.salvage import Replaced, SalvageReport, SessionSalvage, salvage
from ctxledger.replay.verify import Mismatch, VerifyReport, verify
from ctxledger.replay.whatif import WhatIfReport, WhatIfStep, what_if

__all__ = [
    "Damage",
    "LogSource",
    "Mismatch",
    "Replaced",
    "SalvageReport",
    "SessionSalvage",
    "SessionState",
    "VerifyReport",
    "WhatIfReport",
    "WhatIfStep",
    "audit",
    "explain",
    "find_damage",
    "fold_session",
    "rebuild",
    "recall",
    "salvage",
    "state_at_checkpoint",
    "verify",
    "view_at",
    "what_if",
]
