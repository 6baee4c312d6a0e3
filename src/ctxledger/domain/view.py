"""The model view: the bounded, provider-neutral prompt built for one LLM call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import msgspec

from ctxledger.checkpoints import Checkpoint, Remask
from ctxledger.domain.budget import estimate_tokens
from ctxledger.domain.calibration import session_tokenizer, tokens_of_chars, view_chars
from ctxledger.domain.projection import assemble_counted
from ctxledger.domain.render import render_policy, render_unmasked
from ctxledger.domain.state import SessionState
from ctxledger.domain.tokenizer import Tokenizer, message_chars
from ctxledger.domain.view_hashing import (
    KEEP_DIGESTS_FROM,
    KEEP_ENCODINGS_FROM,
    VIEW_HASH_VERSION,
    Hashed,
    kept_hash_v1,
    kept_hash_v2,
    view_hash,
)
from ctxledger.messages import Message

__all__ = [
    "COMPACT_CHECKPOINT",
    "FULL_HISTORY",
    "VIEW_HASH_VERSION",
    "Draft",
    "ModelView",
    "build_view",
    "draft_view",
    "kept_draft",
    "preview_view",
    "remask_of",
    "view_hash",
]

#: Mode of a view without an active checkpoint.
FULL_HISTORY = "full_history"
#: Mode of a view that starts with a checkpoint's summary.
COMPACT_CHECKPOINT = "compact_checkpoint"


class ModelView(msgspec.Struct, frozen=True, kw_only=True):
    """A bounded projection of history made for one LLM call (DESIGN §2).

    Attributes:
        messages: System messages, pinned messages (with the kept first request, see
            ``Config.keep_first_request``), the summary (``role="summary"``, at most once) and
            the retained tail, rendered; history messages keep their ``seq``.
        mode: ``"full_history"`` or ``"compact_checkpoint"``.
        checkpoint_id: The active checkpoint's id, if any.
        estimated_tokens: The budget estimate (DESIGN §2 formula, provider usage included).
        view_hash: SHA-256 (hex) of the view's mode, checkpoint id and messages in deterministic
            msgpack (:func:`view_hash`, of the version the session's Config names:
            :attr:`ctxledger.Config.view_hash_version`); replay must rebuild the same hash.
        through_seq: The newest message seq when the view was built.
        view_tokens: The tokenizer's count of ``messages`` alone.
        retain_from_seq: The first seq of the retained tail.
        appended_seqs: The seqs of the messages appended by the ``Session.step`` that served
            this view, oldest first; empty for a view served by ``prepare_step`` or
            ``build_model_view``. It tells about the call, not the view's content:
            ``view_hash`` leaves it out (compare views by ``view_hash``).
    """

    messages: tuple[Message, ...]
    mode: str
    checkpoint_id: str | None
    estimated_tokens: int
    view_hash: str
    through_seq: int
    view_tokens: int = 0
    retain_from_seq: int = 1
    appended_seqs: tuple[int, ...] = ()

    def to_openai(self) -> list[dict[str, Any]]:
        """Render for OpenAI-compatible chat APIs (the summary becomes a system message)."""
        from ctxledger.domain.adapters import to_openai

        return to_openai(self.messages)

    def to_anthropic(self) -> dict[str, Any]:
        """Render for the Anthropic messages API: ``{"system": str, "messages": [...]}``."""
        from ctxledger.domain.adapters import to_anthropic

        return to_anthropic(self.messages)


class Draft(NamedTuple):
    """The view a state would serve under a checkpoint, assembled and measured but not hashed.

    Planning a compaction and serving the view both start from it, so a step assembles and
    counts its view once.

    Attributes:
        checkpoint: The checkpoint the view starts from (None: full history).
        messages: The view's messages (see :func:`~ctxledger.domain.assemble`).
        view_tokens: The tokenizer's count of ``messages`` alone.
        estimated_tokens: The budget estimate with the pending text (DESIGN §2).
        through_seq: The newest message seq.
        prompt_tokens: The tokenizer's count of ``messages`` with the pending text: what the
            view sends (the estimate may add the provider's usage figure).
        chars: The characters of ``messages`` the default tokenizer counts
            (:func:`~ctxledger.domain.calibration.view_chars`); ``None`` when not counted.
    """

    checkpoint: Checkpoint | None
    messages: list[Message]
    view_tokens: int
    estimated_tokens: int
    through_seq: int
    prompt_tokens: int = 0
    chars: int | None = None

    def view(self, state: SessionState | None = None, *, version: int | None = None) -> ModelView:
        """Return the finished view (hashing its messages with :func:`view_hash` of ``version``;
        by default the one ``state``'s Config names, else :data:`VIEW_HASH_VERSION`).

        With ``state`` (the session it is served for) and at least :data:`KEEP_DIGESTS_FROM`
        messages (version 1: :data:`KEEP_ENCODINGS_FROM`), what hashing the last view of that
        session kept is reused (a cache the state keeps): with version 2 the digest of the
        messages this view shares with it (:class:`Hashed`), so a step encodes and hashes only
        what it added; with version 1 their encodings, so a step encodes what it added and
        hashes the whole view again (:func:`~ctxledger.domain.view_hashing.kept_hash_v1`). The
        hash is the same.
        """
        if version is None:
            version = state.config.view_hash_version if state is not None else VIEW_HASH_VERSION
        active = self.checkpoint
        mode = COMPACT_CHECKPOINT if active is not None else FULL_HISTORY
        checkpoint_id = active.id if active is not None else None
        messages = tuple(self.messages)  # one copy: the hash and the view take it as it is
        keep_from = KEEP_DIGESTS_FROM if version == 2 else KEEP_ENCODINGS_FROM
        if state is None or len(messages) < keep_from:
            digest = view_hash(mode, checkpoint_id, messages, version=version)
            if state is not None:
                state.view_encodings = None
        elif version == 1:
            kept = state.view_encodings
            digest, state.view_encodings = kept_hash_v1(
                mode, checkpoint_id, messages, None if isinstance(kept, Hashed) else kept
            )
        else:
            kept = state.view_encodings
            digest, state.view_encodings = kept_hash_v2(
                mode, checkpoint_id, messages, kept if isinstance(kept, Hashed) else None
            )
        return ModelView(
            messages=messages,
            mode=mode,
            checkpoint_id=checkpoint_id,
            estimated_tokens=self.estimated_tokens,
            view_hash=digest,
            through_seq=self.through_seq,
            view_tokens=self.view_tokens,
            retain_from_seq=active.retain_from_seq if active is not None else 1,
        )


def draft_view(
    state: SessionState,
    *,
    tokenizer: Tokenizer,
    pending: str = "",
    checkpoint: Checkpoint | None = None,
) -> Draft:
    """Assemble and measure the view of ``state`` (under ``checkpoint`` if given).

    Without ``checkpoint`` it is the current view (the active checkpoint's), whose estimate
    counts the provider's usage figure while it is current. With one, it is the view the state
    will serve once that checkpoint is recorded, which makes the figure stale. The default
    tokenizer counts with the session's calibrated ratio where it has one
    (:func:`~ctxledger.domain.calibration.session_tokenizer`).
    """
    tokenizer = session_tokenizer(state, tokenizer)
    if checkpoint is None:
        # Planning and serving a step, and checking the budget after an append, all look at
        # the same state: the draft is kept until the state folds its next event.
        kept = kept_draft(state, tokenizer, pending)
        if kept is not None:
            return kept
        draft = _draft(state, tokenizer, pending, state.active_checkpoint, usage_current=True)
        state.draft_memo = (_draft_key(state, tokenizer, pending), draft)
        return draft
    return _draft(state, tokenizer, pending, checkpoint, usage_current=False)


def kept_draft(state: SessionState, counting: Tokenizer, pending: str = "") -> Draft | None:
    """The current view's draft :func:`draft_view` kept, if the state has folded no event
    since; ``counting`` is the session's tokenizer
    (:func:`~ctxledger.domain.calibration.session_tokenizer`)."""
    memo = state.draft_memo
    if memo is not None and memo[0] == _draft_key(state, counting, pending):
        kept: Draft = memo[1]
        return kept
    return None


def _draft_key(state: SessionState, counting: Tokenizer, pending: str) -> tuple[int, int, str]:
    return (state.events_applied, id(counting), pending)


def _draft(
    state: SessionState,
    tokenizer: Tokenizer,
    pending: str,
    active: Checkpoint | None,
    *,
    usage_current: bool,
) -> Draft:
    # The built-in estimators count the view's characters, which the event that records
    # serving it carries as well (ViewServed.view_chars).
    messages, chars = assemble_counted(state, active)
    counted = tokens_of_chars(tokenizer, chars)
    view_tokens = tokenizer.count_messages(messages) if counted is None else counted
    if pending:
        counted = tokens_of_chars(tokenizer, chars + len(pending))  # a user message of it
        with_pending = (
            tokenizer.count_messages([*messages, Message(role="user", content=pending)])
            if counted is None
            else counted
        )
    else:
        with_pending = view_tokens
    if usage_current:
        estimated = estimate_tokens(
            state,
            tokenizer=tokenizer,
            pending=pending,
            view_messages=messages,
            view_tokens=with_pending,
        )
    else:
        estimated = with_pending
    return Draft(active, messages, view_tokens, estimated, state.last_seq, with_pending, chars)


def build_view(state: SessionState, *, tokenizer: Tokenizer, pending: str = "") -> ModelView:
    """Project ``state`` into the model view; pure, and proportional to the view's size.

    Args:
        state: The session.
        tokenizer: Counts tokens for the estimate.
        pending: Text about to be sent with the view, counted in ``estimated_tokens``.
    """
    return draft_view(state, tokenizer=tokenizer, pending=pending).view(
        version=state.config.view_hash_version
    )


def preview_view(
    state: SessionState, checkpoint: Checkpoint, *, tokenizer: Tokenizer, pending: str = ""
) -> ModelView:
    """Return the view ``state`` will serve once ``checkpoint`` is recorded.

    The provider's usage figure is ignored: the checkpoint makes it stale.
    """
    draft = draft_view(state, tokenizer=tokenizer, pending=pending, checkpoint=checkpoint)
    return draft.view(version=state.config.view_hash_version)


def remask_of(
    state: SessionState, view: ModelView, *, tokenizer: Tokenizer, chars: int | None = None
) -> Remask | None:
    """Return what ``view`` masks anew against the last view ``state`` served, if anything.

    ``view`` is the view ``state`` serves now, before its ``ViewServed`` is folded. A re-mask is
    counted only against a served view of the same checkpoint (a new checkpoint rewrites the
    view after its head anyway, and carries its own effect): the tool results the masking
    boundary passed since then (:attr:`SessionState.served_masked`) that ``view`` shows masked.
    Cheap when the boundary did not move (the common case). ``chars``: the characters of the
    view's messages (:func:`~ctxledger.domain.calibration.view_chars`), when known; a built-in
    estimator then counts the tokens from them and the changed results alone.
    """
    start, stop = state.served_masked, state.masked_results()
    if (
        stop <= start
        or state.last_view_hash is None
        or view.checkpoint_id != state.served_checkpoint_id
    ):
        return None
    # Results before the index's in-memory part precede the active checkpoint's tail: not shown.
    candidates = set(state.tool_seqs[max(start, state.tool_seqs.before) : stop])
    if not candidates:
        return None
    policy = render_policy(state)
    messages = view.messages
    changed: list[tuple[int, Message]] = []  # (index in the view, the result shown whole)
    summarised = view.checkpoint_id is not None
    for index in _result_indices(messages, candidates, summarised=summarised):
        message = messages[index]
        seq = message.seq
        assert seq is not None
        unmasked = render_unmasked(state, policy, state.history[seq - 1])
        if unmasked.content != message.content:  # else shown whole after all (short, pinned...)
            changed.append((index, unmasked))
    if not changed:
        return None
    first = changed[0][0]
    tokenizer = session_tokenizer(state, tokenizer)
    if chars is not None and tokens_of_chars(tokenizer, 0) is not None:
        # Only the results masked anew differ, and the prefix is the view less its end.
        grown = sum(message_chars(was) - message_chars(messages[i]) for i, was in changed)
        before = tokens_of_chars(tokenizer, chars + grown)
        prefix = tokens_of_chars(tokenizer, chars - view_chars(messages[first:]))
    else:
        shown_before = list(messages)
        for index, was in changed:
            shown_before[index] = was
        before = tokenizer.count_messages(shown_before)
        prefix = tokenizer.count_messages(messages[:first])
    assert before is not None and prefix is not None
    return Remask(
        results=len(changed),
        first_seq=messages[first].seq or 0,
        tokens_before=before,
        tokens_after=view.view_tokens,
        prefix_kept_tokens=prefix,
    )


def _result_indices(messages: Sequence[Message], seqs: set[int], *, summarised: bool) -> list[int]:
    """The indices, in order, of the tool results of ``seqs`` in a view (``messages``).

    A view is its head and then its tail in seq order. With a summary (``summarised``) the head
    ends with it, the one message without a seq, after the pinned slot, whose tool exchanges
    may hold results that are not pinned themselves: the head is looked at whole (it is
    short). The tail is walked back from its end to the oldest of ``seqs``. Without a summary
    the head is the system messages alone.
    """
    head: list[int] = []
    if summarised:
        for index, message in enumerate(messages):
            if message.seq is None:
                break
            if message.seq in seqs and message.role == "tool":
                head.append(index)
    low = min(seqs)
    tail: list[int] = []
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        seq = message.seq
        if seq is None or seq < low:
            break
        if seq in seqs and message.role == "tool":
            tail.append(index)
    tail.reverse()
    return head + tail
