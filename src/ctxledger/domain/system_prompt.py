"""A session's system prompt, stated once: ``Host.session(id, system=...)``.

Set-up code runs again on every start of an agent (after a crash, a deploy, a second run of
the same script). Appending the system prompt there would put a second system message in the
middle of the conversation each time, which providers either reject or obey as a new
instruction. Stating it instead appends it only while the conversation is empty and otherwise
checks it against the one recorded, so set-up is idempotent.
"""

from __future__ import annotations

from ctxledger.domain.state import SessionState
from ctxledger.domain.withdrawal import shown_messages
from ctxledger.errors import SystemPromptMismatchError
from ctxledger.messages import Message

__all__ = ["recorded_system_prompt", "system_prompt_messages"]


def recorded_system_prompt(state: SessionState) -> str | None:
    """The session's system prompt: the first system message heading the conversation (before
    its first user message), or None."""
    return state.head[0].content if state.head else None


def system_prompt_messages(state: SessionState, text: str) -> list[Message]:
    """Return what to append so that ``text`` is the session's system prompt.

    ``[Message.system(text)]`` while the conversation is empty (a new session, or one whose
    messages were all cleared or retracted); nothing when ``text`` is the recorded one.

    Raises:
        SystemPromptMismatchError: The conversation has begun with another system prompt, or
            with none; nothing is written.
    """
    if not shown_messages(state, 1):
        return [Message.system(text)]
    recorded = recorded_system_prompt(state)
    if recorded != text:
        raise SystemPromptMismatchError(state.session_id, recorded, text)
    return []
