"""Replay: rebuild any past view, verify a log, and try another policy on an old log.

Pure folds over events, without actors: :func:`rebuild` and :func:`view_at` (time travel),
:func:`verify` (re-derive every served view and checkpoint and compare), :func:`what_if`
(re-project a session under another Config without touching the log), :func:`find_damage`
(which sessions hold a damaged record, and where) and :func:`salvage` (copy what still verifies
into a new log).
"""

from ctxledger.replay.damage import Damage, find_damage
from ctxledger.replay.rebuild import LogSource, SessionState, rebuild, view_at
from ctxledger.replay.salvage import SalvageReport, SessionSalvage, salvage
from ctxledger.replay.verify import Mismatch, VerifyReport, verify
from ctxledger.replay.whatif import WhatIfReport, WhatIfStep, what_if
from ctxledger.runtime.loading import fold_session

__all__ = [
    "Damage",
    "LogSource",
    "Mismatch",
    "SalvageReport",
    "SessionSalvage",
    "SessionState",
    "VerifyReport",
    "WhatIfReport",
    "WhatIfStep",
    "find_damage",
    "fold_session",
    "rebuild",
    "salvage",
    "verify",
    "view_at",
    "what_if",
]
