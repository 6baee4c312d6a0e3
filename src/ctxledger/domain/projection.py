"""The projection fold: which messages a view holds, in DESIGN §2 order.

``[head system messages] + [pinned messages] + [summary, if a checkpoint is active] +
[messages with seq >= retain_from_seq, rendered]``. The work is proportional to the view: head
and pins are kept as small lists by the state, and the tail is a slice of history. Under
``Config.keep_first_request`` the pinned slot also holds the session's first user message once
the cut has passed it (see :func:`kept_request_seq`). Withdrawn messages (retracted, or up to the
last clear) are in no view.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from ctxledger.checkpoints import Checkpoint
from ctxledger.domain.calibration import view_chars
from ctxledger.domain.render import (
    RenderPolicy,
    render_message,
    render_policy,
    truncate_message,
)
from ctxledger.domain.state import SessionState
from ctxledger.domain.tokenizer import message_chars
from ctxledger.messages import Message

__all__ = [
    "FACTS_SEPARATOR",
    "assemble",
    "assemble_counted",
    "kept_request_seq",
    "kept_tail",
    "shown_between",
    "slot_seqs",
    "summary_message",
    "tail_messages",
    "view_head",
]


#: Between a checkpoint's summary and its fact block, in the summary message.
FACTS_SEPARATOR = "\n\n"


def summary_message(checkpoint: Checkpoint) -> Message:
    """Return the view message that stands for the messages ``checkpoint`` covers.

    Its content is the summary, followed by the checkpoint's fact block when it has one (a
    checkpoint without one, as every checkpoint recorded before the block existed, renders as
    its summary alone).
    """
    content = checkpoint.summary
    if checkpoint.facts:
        content += FACTS_SEPARATOR + checkpoint.facts
    return Message(
        role="summary",
        content=content,
        metadata={
            "checkpoint_id": checkpoint.id,
            "covers_through_seq": checkpoint.covers_through_seq,
            "retain_from_seq": checkpoint.retain_from_seq,
        },
    )


def kept_request_seq(state: SessionState, cut: int) -> int | None:
    """Return the first user message's seq if a view retaining from ``cut`` keeps it in the slot.

    That is when ``Config.keep_first_request`` is on and the cut lies after the message (while it
    is in the tail it is shown there, as any other message).
    """
    seq = state.first_user_seq
    if seq is None or seq >= cut or not state.config.keep_first_request:
        return None
    return seq


def slot_seqs(state: SessionState, cut: int) -> list[int]:
    """Return the seqs shown in the pinned slot of a view that retains from ``cut``.

    Pinned messages at or after the cut are shown in the tail instead (never twice); a pinned
    tool exchange brings its whole group (see :meth:`SessionState.pin_group`). The kept first
    request (:func:`kept_request_seq`) joins them.
    """
    kept = kept_request_seq(state, cut)
    seqs: set[int] = {kept} if kept is not None else set()
    history = state.history
    for pin in state.pins:
        if pin < cut and pin <= state.last_seq:
            seqs.update(
                seq
                for seq in state.pin_group(pin)
                if seq < cut and not state.is_head(history[seq - 1])
            )
    return sorted(seqs)


def tail_messages(
    state: SessionState, cut: int, policy: RenderPolicy | None = None
) -> Iterator[Message]:
    """Yield the rendered messages with ``seq >= cut`` that are neither head system messages nor
    withdrawn (retracted, or up to the last clear)."""
    yield from _tail(state, cut, policy or render_policy(state))


def _tail(
    state: SessionState, cut: int, policy: RenderPolicy, through: int | None = None
) -> list[Message]:
    # The hot loop of every view: only tool results are rendered (masked or truncated); the
    # head system messages can only come before the first user message. ``through``: the last
    # seq looked at (by default the newest).
    history = state.history
    first_user = state.first_user_seq
    head_end = (first_user or state.last_seq + 1) - 1  # head messages lie at index < head_end
    retracted = state.retracted
    start = max(cut, state.cleared_through + 1, 1) - 1
    shown: list[Message] = []
    append = shown.append
    for index, message in enumerate(history[start:through], start):  # whole chunks at a time
        role = message.role
        if role == "tool":
            if not retracted or index + 1 not in retracted:
                append(render_message(state, policy, message))
            continue
        if (role == "system" and index < head_end) or (retracted and index + 1 in retracted):
            continue
        append(message)
    return shown


def shown_between(state: SessionState, first: int, last: int, policy: RenderPolicy) -> list[int]:
    """The characters messages ``first..last`` show in a view's tail (rendered under
    ``policy``, the state's :func:`~ctxledger.domain.render.render_policy`), one per seq;
    -1 where no tail shows the message (a head system message, retracted or cleared)."""
    shown = [-1] * (last - first + 1)
    for message in _tail(state, first, policy, last):
        shown[_seq_of(message) - first] = message_chars(message)
    return shown


def assemble(state: SessionState, checkpoint: Checkpoint | None) -> list[Message]:
    """Return the messages of the view of ``state`` under ``checkpoint`` (or none).

    The kept first request is cut to ``PolicySizes.request_chars`` unless it is pinned
    explicitly (an explicit pin is shown as every pin is).
    """
    return assemble_counted(state, checkpoint)[0]


def assemble_counted(
    state: SessionState, checkpoint: Checkpoint | None
) -> tuple[list[Message], int]:
    """:func:`assemble`, and the characters of its messages the default tokenizer counts
    (:func:`~ctxledger.domain.calibration.view_chars`).

    The tail of the active checkpoint's view is kept for the next call
    (``SessionState.tail_memo``): while no event folded since may change how a message is shown
    (``SessionState.shown_epoch``) and the masking boundary stays, the next view's tail is that
    one with the messages appended since, rendered, and only they are counted.
    """
    policy = render_policy(state)
    cut = checkpoint.retain_from_seq if checkpoint is not None else 1
    if checkpoint is not state.active_checkpoint:
        head, head_chars, tail, tail_chars = _cut_parts(state, cut, policy)
        messages = list(head)
        if checkpoint is not None:
            summary = summary_message(checkpoint)
            messages.append(summary)
            head_chars += message_chars(summary)
        messages.extend(tail)
        return messages, head_chars + tail_chars
    messages = view_head(state, checkpoint, policy)
    chars = view_chars(messages)
    kept, tail_chars = kept_tail(state, cut, policy)
    messages.extend(kept)
    return messages, chars + tail_chars


def _cut_parts(
    state: SessionState, cut: int, policy: RenderPolicy
) -> tuple[list[Message], int, list[Message], int]:
    """What a view retaining from ``cut`` shows before its summary (:func:`view_head` without
    it) and after (its tail), each with its characters, kept for the state's next call until
    it folds an event (``SessionState.cut_parts_memo``): the checkpoint a step activates is
    drafted several times (its fact block's view, the block's, the one served), with one cut.
    Read the lists, never keep or change them."""
    key = (state.events_applied, cut, policy)
    memo = state.cut_parts_memo
    if memo is not None and memo[0] == key:
        kept: tuple[list[Message], int, list[Message], int] = memo[1]
        return kept
    head = view_head(state, None, policy, cut)
    tail = _tail(state, cut, policy)
    parts = (head, view_chars(head), tail, view_chars(tail))
    state.cut_parts_memo = (key, parts)
    return parts


def kept_tail(state: SessionState, cut: int, policy: RenderPolicy) -> tuple[list[Message], int]:
    """The rendered messages of the tail retained from ``cut`` (``policy`` being the state's
    :func:`~ctxledger.domain.render.render_policy`) and their characters, from
    ``state.tail_memo`` where it holds (see :func:`assemble_counted`); kept for the next call.

    Meant for the active view's tail (the drafts of a step and budget's estimate share it):
    another cut replaces what is kept. The list is the memo's own, brought up to date in place
    (a session never served has a tail as long as its history: copying it at every estimate
    was most of a background measure's time): read it before the state's next draft, never
    keep or change it."""
    start = max(cut, state.cleared_through + 1, 1) - 1
    last = len(state.history)
    boundary = policy.mask_before_seq
    memo = state.tail_memo
    if (
        memo is not None
        and memo[0] == (state.shown_epoch, start)
        and memo[1] <= boundary
        and memo[2] <= last
    ):
        _, was, upto, shown, chars = memo
        if boundary > was:  # the tool results between the boundaries are masked now
            chars = _remask(state, policy, shown, chars, was, min(boundary - 1, upto))
        if upto < last:
            added = _tail(state, upto + 1, policy)
            shown.extend(added)
            chars += view_chars(added)
    else:
        shown = _tail(state, cut, policy)
        chars = view_chars(shown)
    state.tail_memo = ((state.shown_epoch, start), boundary, last, shown, chars)
    return shown, chars


def _remask(
    state: SessionState,
    policy: RenderPolicy,
    shown: list[Message],
    chars: int,
    first: int,
    last: int,
) -> int:
    """Render the tool results of seqs ``first..last`` in ``shown`` (a tail in seq order, of
    ``chars`` characters) anew under ``policy``, in place; return its characters then."""
    low = bisect.bisect_left(shown, first, key=_seq_of)
    high = bisect.bisect_right(shown, last, key=_seq_of)
    for index in range(low, high):
        message = shown[index]
        if message.role == "tool":
            seq = message.seq
            assert seq is not None
            now = render_message(state, policy, state.history[seq - 1])
            chars += message_chars(now) - message_chars(message)
            shown[index] = now
    return chars


def _seq_of(message: Message) -> int:
    seq = message.seq
    assert seq is not None  # a tail holds messages of history
    return seq


def view_head(
    state: SessionState,
    checkpoint: Checkpoint | None,
    policy: RenderPolicy,
    cut: int | None = None,
) -> list[Message]:
    """Return what the view of ``state`` under ``checkpoint`` shows before its tail: the head
    system messages, the pinned slot and the summary (see :func:`assemble`); without
    ``checkpoint``, those of a view retaining from ``cut`` (by default 1), without a summary."""
    if checkpoint is not None:
        cut = checkpoint.retain_from_seq
    elif cut is None:
        cut = 1
    messages = list(state.head)
    history = state.history
    kept = kept_request_seq(state, cut)
    for seq in slot_seqs(state, cut):
        message = render_message(state, policy, history[seq - 1])
        if seq == kept and seq not in policy.pins:
            # A user message, so render_message shows it whole; it stays in every later view,
            # so it is held to the size of a tool result.
            message = truncate_message(message, policy.request_chars)
        messages.append(message)
    if checkpoint is not None:
        messages.append(summary_message(checkpoint))
    return messages
