"""Replay: rebuild any past view, verify a log, and try another policy on an old log.

Pure folds over events, without actors: :func:`rebuild` and :func:`view_at` (time travel),
:func:`verify` (re-derive every served view and checkpoint and compare), :func:`what_if`
(re-project a session under another Config without touching the log), and the inspection of
compactions: :func:`audit` (what a compaction lost), :func:`explain` (where a message is in the
view) and :func:`recall` (full-text search of what the view no longer shows raw).
"""

from ctxledger.replay.audit import audit, explain, recall, state_at_checkpoint
from ctxledger.replay.loader import fold_session, load_state
from ctxledger.replay.rebuild import LogSource, SessionState, rebuild, view_at
from ctxledger.replay.verify import Mismatch, VerifyReport, verify
from ctxledger.replay.whatif import WhatIfReport, WhatIfStep, what_if

__all__ = [
    "LogSource",
    "Mismatch",
    "SessionState",
    "VerifyReport",
    "WhatIfReport",
    "WhatIfStep",
    "audit",
    "explain",
    "fold_session",
    "load_state",
    "rebuild",
    "recall",
    "state_at_checkpoint",
    "verify",
    "view_at",
    "what_if",
]
