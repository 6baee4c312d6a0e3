"""How one history message is shown in a view: micro masking and oversize truncation.

Both are pure functions of the message, its position among the session's tool results and the
Config, never of the cut, so a message looks the same in every view until the masking boundary
jumps (every ``micro_batch`` results) and consecutive views share a byte-identical prefix.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import msgspec

from ctxledger.messages import Message

if TYPE_CHECKING:  # annotations only: a summary worker renders no view (no fold imported)
    from ctxledger.domain.state import SessionState

__all__ = [
    "TRUNCATION_MARKER",
    "RenderPolicy",
    "mask_text",
    "render_message",
    "render_policy",
    "render_unmasked",
    "truncate_message",
    "truncate_text",
]

#: Pattern of the marker that replaces the middle of a truncated text; it names the seq.
TRUNCATION_MARKER = re.compile(
    r"\n\[\.\.\. truncated (?P<omitted>\d+) of (?P<total>\d+) chars"
    r" of message seq (?P<seq>\d+) \.\.\.\]\n"
)


class RenderPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """What decides how a message is rendered in the views of one state.

    Attributes:
        mask_before_seq: Tool results with a smaller seq are masking candidates.
        min_chars: Only results longer than this are masked.
        preserve: Tools whose results are never masked.
        pins: Pinned seqs, shown verbatim (truncated only if oversize).
        max_result_chars: Longer tool results are truncated.
        request_chars: The kept first request is truncated above this once covered.
    """

    mask_before_seq: int
    min_chars: int
    preserve: frozenset[str]
    pins: frozenset[int]
    max_result_chars: int
    request_chars: int = 0


def render_policy(state: SessionState) -> RenderPolicy:
    """Return the rendering policy of ``state``'s views.

    The masking boundary moves in jumps of ``micro_batch`` results: once more than
    ``micro_keep_recent`` results exist, the oldest ``((n - keep) // batch) * batch`` results are
    candidates. ``micro_batch=1`` leaves exactly the last ``micro_keep_recent`` results unmasked.
    Under ``Config.min_compaction_gain_tokens`` the boundary moves only when the results it
    newly masks save at least that many tokens (:attr:`SessionState.mask_count`): a re-mask
    breaks the provider's cached prefix, so a small one costs more than it saves.
    """
    config = state.config
    sizes = config.sizes()
    # Under the gain rule the boundary moved only when a re-mask saved enough (the fold's).
    masked = state.masked_results()
    return RenderPolicy(
        mask_before_seq=state.tool_seqs[masked - 1] + 1 if masked else 0,
        min_chars=config.micro_min_chars,
        preserve=frozenset(config.micro_preserve_tools),
        pins=frozenset(state.pins),
        max_result_chars=sizes.tool_result_chars,
        request_chars=sizes.request_chars,
    )


def mask_text(tool_name: str) -> str:
    """Return the placeholder of a masked tool result."""
    return f"[Previous: used {tool_name}]"


def truncate_text(text: str, limit: int, seq: int) -> str:
    """Return ``text`` cut to at most ``limit`` characters: head, marker naming ``seq``, tail.

    Texts of at most ``limit`` characters are returned unchanged, so truncation is idempotent.
    """
    total = len(text)
    if total <= limit:
        return text
    # Size the marker for the largest possible count first: the real count has no more digits.
    keep = max(0, limit - len(_marker(total, total, seq)))
    marker = _marker(total - keep, total, seq)
    tail = keep // 2
    return text[: keep - tail] + marker + (text[total - tail :] if tail else "")


def _marker(omitted: int, total: int, seq: int) -> str:
    return f"\n[... truncated {omitted} of {total} chars of message seq {seq} ...]\n"


def render_message(state: SessionState, policy: RenderPolicy, message: Message) -> Message:
    """Return ``message`` as a view shows it: verbatim, masked or truncated.

    Only tool results change: old, long ones (not pinned, not of a preserved tool) are masked
    as ``[Previous: used <tool>]``; any other result longer than the limit is truncated.
    Rendering a rendered message again returns it unchanged.
    """
    if message.role != "tool" or message.seq is None:
        return message
    seq = message.seq
    masked = (
        seq < policy.mask_before_seq
        and len(message.content) > policy.min_chars
        and seq not in policy.pins
    )
    cached = state.render_cache.get(seq)
    if cached is not None and cached[0] is message and cached[1] == masked:
        return cached[2]
    shown = _render_tool_result(state, policy, message, masked)
    # Both forms are pure functions of the message, the Config and whether it is masked (the
    # cache is cleared when the Config changes), so a view re-renders only what changed.
    state.render_cache[seq] = (message, masked, shown)
    return shown


def render_unmasked(state: SessionState, policy: RenderPolicy, message: Message) -> Message:
    """Return tool result ``message`` as a view shows it when it is not masked (verbatim, or
    truncated when oversize)."""
    return _render_tool_result(state, policy, message, False)


def _render_tool_result(
    state: SessionState, policy: RenderPolicy, message: Message, masked: bool
) -> Message:
    if masked:
        name = state.tool_name(message)
        if name not in policy.preserve:
            text = mask_text(name)
            if text == message.content:
                return message
            return msgspec.structs.replace(message, content=text)
    return truncate_message(message, policy.max_result_chars)


def truncate_message(message: Message, limit: int) -> Message:
    """Return ``message`` with its content cut by :func:`truncate_text` to ``limit`` characters.

    A message within the limit is returned as is (the same object).
    """
    if len(message.content) <= limit:
        return message
    content = truncate_text(message.content, limit, message.seq or 0)
    return msgspec.structs.replace(message, content=content)
