"""Where a message is in the current view: :func:`place_message` (``Session.explain``).

A message is shown *raw* (verbatim), *masked* (``[Previous: used <tool>]``), *truncated* (head,
tail and a marker naming its seq), *pinned* (in the pinned slot before the summary: an explicit
pin, or the session's first request under ``Config.keep_first_request``), or *summarized*: it
lies before the active checkpoint's cut, and the summary of the checkpoint that first covered it
stands for it (with the active checkpoint's fact block, which may still name it).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from ctxledger.checkpoints import Checkpoint
from ctxledger.domain.projection import kept_request_seq, slot_seqs
from ctxledger.domain.render import (
    TRUNCATION_MARKER,
    mask_text,
    render_message,
    render_policy,
    truncate_message,
)
from ctxledger.domain.state import SessionState
from ctxledger.errors import InvalidSeqError

__all__ = ["PLACEMENT_KINDS", "Placement", "PlacementKind", "place_message"]

#: Where a message is in the current view (:func:`place_message`).
PlacementKind = Literal["raw", "masked", "truncated", "pinned", "summarized"]
#: Every placement kind.
PLACEMENT_KINDS: tuple[PlacementKind, ...] = ("raw", "masked", "truncated", "pinned", "summarized")


class Placement(msgspec.Struct, frozen=True, kw_only=True):
    """Where message ``seq`` is in the current view.

    Attributes:
        seq: The message.
        role: Its role.
        kind: ``raw``, ``masked``, ``truncated``, ``pinned`` or ``summarized``.
        detail: One sentence saying so, for people.
        shown_chars: Characters of it the view shows (0 when summarised or masked).
        total_chars: Its length in history.
        pinned_by: For ``pinned``: ``"pin"`` (an explicit pin) or ``"first_request"``
            (``Config.keep_first_request``); ``None`` otherwise.
        checkpoint_id: For ``summarized``: the checkpoint whose summary first covered it.
        checkpoint_reason: That checkpoint's reason.
        checkpoint_created_at: That checkpoint's time (unix).
        active_checkpoint_id: The checkpoint active now, if any.
        in_fact_block: For ``summarized``: the active checkpoint's fact block names a fact of it.
    """

    seq: int
    role: str
    kind: PlacementKind
    detail: str
    shown_chars: int
    total_chars: int
    pinned_by: str | None = None
    checkpoint_id: str | None = None
    checkpoint_reason: str | None = None
    checkpoint_created_at: float | None = None
    active_checkpoint_id: str | None = None
    in_fact_block: bool = False


def place_message(state: SessionState, seq: int) -> Placement:
    """Say where message ``seq`` is in the view ``state`` serves now.

    Args:
        state: The session.
        seq: A message seq.

    Raises:
        InvalidSeqError: No message has that seq.
    """
    if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= state.last_seq:
        raise InvalidSeqError(f"session {state.session_id!r} has no message with seq {seq!r}")
    message = state.history[seq - 1]
    active = state.active_checkpoint
    cut = active.retain_from_seq if active is not None else 1
    total = len(message.content)
    common = {
        "seq": seq,
        "role": message.role,
        "total_chars": total,
        "active_checkpoint_id": active.id if active is not None else None,
    }
    if state.is_head(message):
        return Placement(
            kind="raw",
            detail=f"#{seq} is a system message before the first user message: it heads every view",
            shown_chars=total,
            **common,  # type: ignore[arg-type]
        )
    policy = render_policy(state)
    if seq in slot_seqs(state, cut):
        kept = kept_request_seq(state, cut)
        pinned_by = "first_request" if seq == kept and seq not in policy.pins else "pin"
        shown = render_message(state, policy, message)
        if pinned_by == "first_request":
            shown = truncate_message(shown, policy.request_chars)  # as assemble shows it
        shown_chars = _shown(shown.content, total)
        why = "it is pinned" if pinned_by == "pin" else "it is the session's first request"
        cut_note = f" (cut to {shown_chars:,} of {total:,} chars)" if shown_chars < total else ""
        return Placement(
            kind="pinned",
            detail=f"#{seq} is shown in the pinned slot before the summary: {why}{cut_note}",
            shown_chars=shown_chars,
            pinned_by=pinned_by,
            **common,  # type: ignore[arg-type]
        )
    if seq >= cut:
        shown = render_message(state, policy, message)
        if shown.content == message.content:
            return Placement(
                kind="raw",
                detail=f"#{seq} is shown verbatim in the retained tail (from #{cut})",
                shown_chars=total,
                **common,  # type: ignore[arg-type]
            )
        if shown.content == mask_text(state.tool_name(message)):
            return Placement(
                kind="masked",
                detail=f"#{seq} is masked as {shown.content!r}: an old tool result (micro masking)",
                shown_chars=0,
                **common,  # type: ignore[arg-type]
            )
        shown_chars = _shown(shown.content, total)
        return Placement(
            kind="truncated",
            detail=(
                f"#{seq} is shown truncated: head and tail, {shown_chars:,} of {total:,} chars "
                "(longer than max_tool_result_chars)"
            ),
            shown_chars=shown_chars,
            **common,  # type: ignore[arg-type]
        )
    assert active is not None  # seq < cut, and cut is 1 without a checkpoint
    first = _first_covering(state, active, seq)
    named = any(line.startswith(f"#{seq} ") for line in active.facts.split("\n"))
    when = f"reason {first.reason}"
    block = "; the fact block names a fact of it" if named else ""
    return Placement(
        kind="summarized",
        detail=(
            f"#{seq} is summarised: checkpoint {first.id} ({when}) first covered it; the view "
            f"shows checkpoint {active.id}'s summary instead{block}"
        ),
        shown_chars=0,
        checkpoint_id=first.id,
        checkpoint_reason=first.reason,
        checkpoint_created_at=first.created_at,
        in_fact_block=named,
        **common,  # type: ignore[arg-type]
    )


def _shown(content: str, total: int) -> int:
    """Characters of the original a rendered content shows (all but a truncation's gap)."""
    match = TRUNCATION_MARKER.search(content)
    return total - int(match.group("omitted")) if match else min(len(content), total)


def _first_covering(state: SessionState, active: Checkpoint, seq: int) -> Checkpoint:
    """The checkpoint of the active chain that first covered ``seq`` (earliest cut after it)."""
    by_id = {checkpoint.id: checkpoint for checkpoint in state.checkpoints}
    found = active
    previous = by_id.get(active.previous_checkpoint_id or "")
    while previous is not None and previous.retain_from_seq > seq:
        found = previous
        previous = by_id.get(previous.previous_checkpoint_id or "")
    return found
