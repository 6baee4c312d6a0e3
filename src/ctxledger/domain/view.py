"""The model view: the bounded, provider-neutral prompt built for one LLM call."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import msgspec

from ctxledger.checkpoints import Checkpoint
from ctxledger.domain.budget import estimate_tokens
from ctxledger.domain.projection import assemble
from ctxledger.domain.state import SessionState
from ctxledger.domain.tokenizer import Tokenizer
from ctxledger.messages import Message

__all__ = [
    "COMPACT_CHECKPOINT",
    "FULL_HISTORY",
    "ModelView",
    "build_view",
    "preview_view",
    "view_hash",
]

#: Mode of a view without an active checkpoint.
FULL_HISTORY = "full_history"
#: Mode of a view that starts with a checkpoint's summary.
COMPACT_CHECKPOINT = "compact_checkpoint"

_hash_encoder = msgspec.msgpack.Encoder(order="deterministic")


class ModelView(msgspec.Struct, frozen=True, kw_only=True):
    """A bounded projection of history made for one LLM call (DESIGN §2).

    Attributes:
        messages: System messages, pinned messages (with the kept first request, see
            ``Config.keep_first_request``), the summary (``role="summary"``, at most once) and
            the retained tail, rendered; history messages keep their ``seq``.
        mode: ``"full_history"`` or ``"compact_checkpoint"``.
        checkpoint_id: The active checkpoint's id, if any.
        estimated_tokens: The budget estimate (DESIGN §2 formula, provider usage included).
        view_hash: SHA-256 (hex) of the deterministic msgpack encoding of mode, checkpoint id and
            messages; replay must rebuild the same hash.
        through_seq: The newest message seq when the view was built.
        view_tokens: The tokenizer's count of ``messages`` alone.
        retain_from_seq: The first seq of the retained tail.
    """

    messages: tuple[Message, ...]
    mode: str
    checkpoint_id: str | None
    estimated_tokens: int
    view_hash: str
    through_seq: int
    view_tokens: int = 0
    retain_from_seq: int = 1

    def to_openai(self) -> list[dict[str, Any]]:
        """Render for OpenAI-compatible chat APIs (the summary becomes a system message)."""
        from ctxledger.domain.adapters import to_openai

        return to_openai(self.messages)

    def to_anthropic(self) -> dict[str, Any]:
        """Render for the Anthropic messages API: ``{"system": str, "messages": [...]}``."""
        from ctxledger.domain.adapters import to_anthropic

        return to_anthropic(self.messages)


def view_hash(mode: str, checkpoint_id: str | None, messages: Sequence[Message]) -> str:
    """Return the stable hash of a view's content."""
    payload = _hash_encoder.encode((mode, checkpoint_id, tuple(messages)))
    return hashlib.sha256(payload).hexdigest()


def build_view(state: SessionState, *, tokenizer: Tokenizer, pending: str = "") -> ModelView:
    """Project ``state`` into the model view; pure, and proportional to the view's size.

    Args:
        state: The session.
        tokenizer: Counts tokens for the estimate.
        pending: Text about to be sent with the view, counted in ``estimated_tokens``.
    """
    return _make_view(state, state.active_checkpoint, tokenizer, pending, usage_current=True)


def preview_view(
    state: SessionState, checkpoint: Checkpoint, *, tokenizer: Tokenizer, pending: str = ""
) -> ModelView:
    """Return the view ``state`` will serve once ``checkpoint`` is recorded.

    The provider's usage figure is ignored: the checkpoint makes it stale.
    """
    return _make_view(state, checkpoint, tokenizer, pending, usage_current=False)


def _make_view(
    state: SessionState,
    active: Checkpoint | None,
    tokenizer: Tokenizer,
    pending: str,
    *,
    usage_current: bool,
) -> ModelView:
    messages = assemble(state, active)
    mode = COMPACT_CHECKPOINT if active is not None else FULL_HISTORY
    checkpoint_id = active.id if active is not None else None
    view_tokens = tokenizer.count_messages(messages)
    if usage_current:
        estimated = estimate_tokens(
            state, tokenizer=tokenizer, pending=pending, view_messages=messages
        )
    elif pending:
        estimated = tokenizer.count_messages([*messages, Message(role="user", content=pending)])
    else:
        estimated = view_tokens
    return ModelView(
        messages=tuple(messages),
        mode=mode,
        checkpoint_id=checkpoint_id,
        estimated_tokens=estimated,
        view_hash=view_hash(mode, checkpoint_id, messages),
        through_seq=state.last_seq,
        view_tokens=view_tokens,
        retain_from_seq=active.retain_from_seq if active is not None else 1,
    )
