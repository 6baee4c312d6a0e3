"""Replay: rebuild any past view, verify a log, and try another policy on an old log.

Pure folds over events, without actors: :func:`rebuild` and :func:`view_at` (time travel),
:func:`verify` (re-derive every served view and checkpoint and compare), :func:`what_if`
(re-project a session under another Config without touching the log).
"""

from ctxledger.replay.rebuild import LogSource, SessionState, rebuild, view_at
from ctxledger.replay.verify import Mismatch, VerifyReport, verify
from ctxledger.replay.whatif import WhatIfReport, WhatIfStep, what_if
from ctxledger.runtime.loading import fold_session

__all__ = [
    "LogSource",
    "Mismatch",
    "SessionState",
    "VerifyReport",
    "WhatIfReport",
    "WhatIfStep",
    "fold_session",
    "rebuild",
    "verify",
    "view_at",
    "what_if",
]
