"""Undoing a compaction: :func:`revert_checkpoint` decides the ``CheckpointReverted`` to record.

History is never altered, so a bad summary is undone by making the checkpoint before it active
again: the view becomes the one that checkpoint gives for the current history (the full history
when the reverted checkpoint was the first), and the next compaction (which may take a
``focus``) extends it. One revert undoes the newest compaction; the restored checkpoint cannot
be reverted in turn (compact again instead).
"""

from __future__ import annotations

from ctxledger.domain.state import SessionState
from ctxledger.errors import InvalidCheckpointError
from ctxledger.events.types import CheckpointReverted

__all__ = ["revert_checkpoint"]


def revert_checkpoint(
    state: SessionState, checkpoint_id: str | None = None, *, reason: str = ""
) -> CheckpointReverted:
    """Return the event that reverts the active checkpoint of ``state`` (pure; nothing recorded).

    Args:
        state: The session.
        checkpoint_id: The checkpoint to revert; it must be the active one. ``None`` reverts
            whichever is active.
        reason: Why, for the record (free text).

    Returns:
        The ``CheckpointReverted`` event to record.

    Raises:
        InvalidCheckpointError: No checkpoint is active; ``checkpoint_id`` is not the active one;
            or the active one was itself restored by a revert (reverting twice).
    """
    sid = state.session_id
    active = state.active_checkpoint
    if active is None:
        raise InvalidCheckpointError(f"session {sid!r} has no checkpoint to revert")
    if checkpoint_id is not None and checkpoint_id != active.id:
        known = any(checkpoint.id == checkpoint_id for checkpoint in state.checkpoints)
        what = "is not the active one" if known else "is not a checkpoint of this session"
        raise InvalidCheckpointError(
            f"session {sid!r}: checkpoint {checkpoint_id!r} {what} (active: {active.id!r}); "
            "only the active checkpoint can be reverted"
        )
    if state.active_restored:
        raise InvalidCheckpointError(
            f"session {sid!r}: checkpoint {active.id!r} was made active again by a revert and "
            "cannot be reverted in turn; compact again (optionally with a focus) instead"
        )
    if active.previous_checkpoint_id is None:
        # The first checkpoint (of the session, or since a clear): the full history returns.
        return CheckpointReverted(checkpoint_id=active.id, restored=None, reason=reason)
    checkpoints = state.checkpoints
    restored = checkpoints[-2] if len(checkpoints) >= 2 else None
    if restored is None or restored.id != active.previous_checkpoint_id:
        raise InvalidCheckpointError(
            f"session {sid!r}: checkpoint {active.previous_checkpoint_id!r}, which "
            f"{active.id!r} extended, is not the one before it"
        )
    return CheckpointReverted(checkpoint_id=active.id, restored=restored, reason=reason)
