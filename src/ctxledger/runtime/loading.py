"""Compatibility re-export: the fold moved to :mod:`ctxledger.replay.loading` (issue 28).

The pure fold sits below the actors now; this module only keeps the old import path working for
code outside the project. Import from :mod:`ctxledger.replay.loading` instead.
"""

from ctxledger.replay.loading import (
    DENSE_SNAPSHOTS,
    append_event_seq,
    event_seq_before_message,
    fold_session,
    fold_view_at,
    message_before,
    read_checkpoints,
    read_messages,
    snapshot_due,
    snapshots_to_drop,
    state_at_checkpoint,
    view_span_end,
)

__all__ = [
    "DENSE_SNAPSHOTS",
    "append_event_seq",
    "event_seq_before_message",
    "fold_session",
    "fold_view_at",
    "message_before",
    "read_checkpoints",
    "read_messages",
    "snapshot_due",
    "snapshots_to_drop",
    "state_at_checkpoint",
    "view_span_end",
]
