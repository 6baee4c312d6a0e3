"""The current view's estimate without assembling the view: what a background measure needs.

Budget asks the history actor, every quarter of the room between the prepare point and the
threshold, how large the session's view is now (:mod:`ctxledger.actors.background`). Drafting
the view for it is O(view), and a session that appends without being served (an import, a log
of a conversation) has a view as long as its history: at 20,000 messages one draft held the
history actor ~20 ms, and every append of every session it owns waited behind it.

:func:`current_estimate` gives the same number, ``draft_view(state, ...).estimated_tokens``, for
the built-in estimators, which count characters: the view's head (system messages, pinned slot,
summary) is rendered as :func:`~ctxledger.domain.projection.assemble` renders it, and the
characters of its tail come from :func:`tail_chars`: the tail the last view or estimate kept
(:func:`~ctxledger.domain.projection.kept_tail`). Between two calls the tail changes only by the
messages appended since and, when the masking boundary moved, by the tool results it now masks;
any other event that may change how a message is shown moves
:attr:`~ctxledger.domain.state.SessionState.shown_epoch`, and the tail is rendered afresh.
"""

from __future__ import annotations

from ctxledger.checkpoints import Checkpoint
from ctxledger.domain.budget import estimate_tokens
from ctxledger.domain.calibration import session_tokenizer, tokens_of_chars, view_chars
from ctxledger.domain.cuts import shown_chars
from ctxledger.domain.projection import kept_tail, view_head
from ctxledger.domain.render import RenderPolicy, render_policy
from ctxledger.domain.state import SessionState
from ctxledger.domain.tokenizer import Tokenizer
from ctxledger.domain.view import draft_view, kept_draft

__all__ = ["current_estimate", "tail_chars", "view_estimate"]


def current_estimate(state: SessionState, *, tokenizer: Tokenizer) -> int:
    """Return ``draft_view(state, tokenizer=tokenizer).estimated_tokens`` (the current view's
    estimate, the provider's usage figure included while it is current) without assembling
    the view where the tokenizer is a built-in estimator (see the module docstring); another
    tokenizer counts the messages, so the view is drafted."""
    counting = session_tokenizer(state, tokenizer)
    kept = kept_draft(state, counting)
    if kept is not None:
        return kept.estimated_tokens
    if tokens_of_chars(counting, 0) is None:
        return draft_view(state, tokenizer=tokenizer).estimated_tokens
    active = state.active_checkpoint
    policy = render_policy(state)
    cut = active.retain_from_seq if active is not None else 1
    chars = view_chars(view_head(state, active, policy)) + tail_chars(state, cut, policy)
    view_tokens = tokens_of_chars(counting, chars)
    return estimate_tokens(state, tokenizer=counting, view_messages=(), view_tokens=view_tokens)


def tail_chars(state: SessionState, cut: int, policy: RenderPolicy) -> int:
    """Return ``view_chars(tail_messages(state, cut, policy))`` (``policy`` being the state's
    :func:`~ctxledger.domain.render.render_policy`), from the tail the last view or estimate
    kept where that still holds (:func:`~ctxledger.domain.projection.kept_tail`)."""
    return kept_tail(state, cut, policy)[1]


def view_estimate(
    state: SessionState, checkpoint: Checkpoint, *, tokenizer: Tokenizer
) -> int | None:
    """``draft_view(state, tokenizer=tokenizer, checkpoint=checkpoint).estimated_tokens`` (the
    view ``checkpoint`` would give, as it is) without assembling it, where the tokenizer is a
    built-in estimator (None for another): its head rendered, the characters of its tail from
    what each message shows (:func:`~ctxledger.domain.cuts.shown_chars`)."""
    counting = session_tokenizer(state, tokenizer)
    chars = shown_chars(state, counting)
    if chars is None:
        return None
    return tokens_of_chars(counting, chars.view(checkpoint))
