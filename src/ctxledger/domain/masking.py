"""Masking old tool results: how many are candidates, and the re-masking boundary's moves.

Micro masking replaces the oldest tool results of a view by a short placeholder, in batches (see
:func:`ctxledger.domain.render_policy`). Under the gain rule of a one-mark Config
(``min_compaction_gain_tokens``, schema 3 only) the boundary moves only when the results it
would newly mask save at least that many tokens; the fold moves it (:func:`advance_mask`) and a
retraction may move it back (:func:`mask_after_retraction`).
"""

from __future__ import annotations

from ctxledger.domain.limits import min_gain_tokens
from ctxledger.domain.record import StateRecord

__all__ = ["advance_mask", "mask_after_retraction", "mask_target", "masked_results"]

#: Characters of the mask placeholder besides the tool's name (``[Previous: used <name>]``).
_MASK_OVERHEAD = len("[Previous: used ]")


def mask_target(state: StateRecord) -> int:
    """How many of the oldest tool results micro masking makes candidates, by batch.

    Once more than ``micro_keep_recent`` results exist, the oldest
    ``((n - keep) // batch) * batch`` (see :func:`ctxledger.domain.render_policy`).
    """
    config = state.config
    aged = len(state.tool_seqs) - config.micro_keep_recent
    return (aged // config.micro_batch) * config.micro_batch if aged > 0 else 0


def masked_results(state: StateRecord) -> int:
    """How many of the oldest tool results are masking candidates in a view served now.

    :func:`mask_target`, held back under the gain rule to the state's ``mask_count`` (see
    :func:`ctxledger.domain.render_policy`).
    """
    masked = mask_target(state)
    if min_gain_tokens(state.config) > 0:
        masked = min(masked, state.mask_count)
    return masked


def mask_after_retraction(state: StateRecord) -> int | None:
    """Under the gain rule: the state's ``mask_count`` once the newest shown message is retracted,
    when that moves it back (the message is a tool result whose append moved the boundary);
    None otherwise. Recorded on ``MessageRetracted.mask_count``, so that an append retracted at
    once leaves the view as it was.

    Raises:
        InvalidSeqError: Nothing can be retracted (see :meth:`~StateRecord.retraction_target`).
    """
    seq = state.retraction_target()
    if state.history[seq - 1].role != "tool":
        return None
    remaining = len(state.tool_seqs) - 1
    restored = state.mask_count
    for count, before in reversed(state.mask_undo):
        if count <= remaining:
            break
        restored = before
    return None if restored == state.mask_count else restored


def advance_mask(state: StateRecord) -> None:
    """Move the re-masking boundary under the gain rule (``min_compaction_gain_tokens``).

    A re-mask rewrites the view from the first newly masked result on (the provider's
    cached prefix ends there), so it waits until the results it would mask save at least
    the gain: their characters beyond the placeholder, // 3.
    """
    target = mask_target(state)
    current = min(state.mask_count, target)
    gain = min_gain_tokens(state.config)
    if target <= current or gain <= 0:
        state.mask_count = target
        return
    config = state.config
    saved = 0
    for seq in state.tool_seqs[current:target]:
        message = state.history[seq - 1]
        if len(message.content) <= config.micro_min_chars or seq in state.pins:
            continue
        name = state.tool_name(message)
        if name not in config.micro_preserve_tools:
            saved += max(0, len(message.content) - len(name) - _MASK_OVERHEAD)
    if saved // 3 >= gain:
        # Retracting these results can move the boundary back (mask_after_retraction).
        state.mask_undo.append((len(state.tool_seqs), state.mask_count))
        state.mask_count = target
    else:
        state.mask_count = current
