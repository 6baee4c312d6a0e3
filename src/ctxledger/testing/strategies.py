"""Hypothesis strategies for messages and valid, tool-paired agent conversations.

Requires the ``hypothesis`` test extra. Generated messages carry no seq; append them through a
session (or :class:`~ctxledger.testing.DomainSession`) to number them.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence

from hypothesis import strategies as st

from ctxledger.messages import Message, ToolCall

__all__ = ["conversations", "messages", "texts"]

_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;_-/\n\"'(){}éß漢🙂"
_TOOLS = ("bash", "read_file", "edit_file", "search", "python")


def texts(*, max_size: int = 200) -> st.SearchStrategy[str]:
    """Strategy for message text: ASCII with punctuation, newlines and a few non-ASCII chars."""
    return st.text(alphabet=_ALPHABET, max_size=max_size)


def _huge(min_size: int, max_size: int) -> st.SearchStrategy[str]:
    # Repeating a drawn seed keeps huge texts cheap to generate and to shrink.
    return st.builds(
        lambda seed, size: (seed * (size // max(len(seed), 1) + 1))[:size],
        st.text(alphabet=_ALPHABET, min_size=1, max_size=40),
        st.integers(min_size, max_size),
    )


def _arguments() -> st.SearchStrategy[str]:
    values = st.one_of(st.integers(-1000, 1000), texts(max_size=40), st.booleans())
    return st.dictionaries(
        st.sampled_from(("path", "command", "query", "n")), values, max_size=3
    ).map(lambda value: json.dumps(value, sort_keys=True))


def messages(
    *, roles: Sequence[str] = ("system", "user", "assistant"), max_chars: int = 200
) -> st.SearchStrategy[Message]:
    """Strategy for one standalone message (no seq).

    Tool results need a call to answer, so they come only from :func:`conversations`; assistant
    messages drawn here may carry tool calls (ids start with ``m_``).

    Args:
        roles: Roles to draw from (``system``, ``user``, ``assistant``).
        max_chars: Longest content.
    """
    allowed = [role for role in roles if role in ("system", "user", "assistant")]
    if not allowed:
        raise ValueError("messages() needs at least one of system, user, assistant")
    calls = st.lists(
        st.builds(
            ToolCall,
            st.uuids().map(lambda u: f"m_{u.hex[:12]}"),
            st.sampled_from(_TOOLS),
            _arguments(),
        ),
        max_size=3,
        unique_by=lambda call: call.id,
    )

    def build(role: str, content: str, tool_calls: list[ToolCall]) -> Message:
        if role == "assistant":
            return Message.assistant(content, tool_calls)
        return Message(role=role, content=content)

    return st.builds(build, st.sampled_from(allowed), texts(max_size=max_chars), calls)


@st.composite
def _conversation(
    draw: st.DrawFn,
    *,
    min_rounds: int,
    max_rounds: int,
    max_steps: int,
    parallel_tool_calls: bool,
    huge_outputs: bool,
    huge_chars: tuple[int, int],
    consecutive_users: bool,
    allow_no_user: bool,
    system_prompt: bool,
    pending_last_step: bool,
    max_chars: int,
) -> list[Message]:
    ids = itertools.count(1)
    text = texts(max_size=max_chars)
    out: list[Message] = []
    if system_prompt and draw(st.booleans()):
        out.append(Message.system(draw(texts(max_size=max_chars * 2))))
    no_user = allow_no_user and draw(st.integers(0, 7)) == 0
    for _ in range(draw(st.integers(min_rounds, max_rounds))):
        if not no_user:
            for _ in range(draw(st.integers(1, 3)) if consecutive_users else 1):
                out.append(Message.user(draw(text)))
        steps = draw(st.integers(1 if no_user else 0, max_steps))
        for _ in range(steps):
            width = draw(st.integers(0, 3 if parallel_tool_calls else 1))
            calls = [
                ToolCall(f"call_{next(ids)}", draw(st.sampled_from(_TOOLS)), draw(_arguments()))
                for _ in range(width)
            ]
            out.append(Message.assistant(draw(text), calls))
            order = draw(st.permutations(calls)) if len(calls) > 1 else calls
            for call in order:
                huge = huge_outputs and draw(st.integers(0, 15)) == 0
                content = draw(_huge(*huge_chars) if huge else texts(max_size=max_chars * 3))
                out.append(Message.tool(content, call.id, call.name))
        # Without consecutive users a round needs an assistant message before the next one.
        if draw(st.booleans()) or (not consecutive_users and not steps):
            out.append(Message.assistant(draw(text)))
    if pending_last_step and draw(st.booleans()):
        call = ToolCall(f"call_{next(ids)}", draw(st.sampled_from(_TOOLS)), draw(_arguments()))
        out.append(Message.assistant(draw(text), [call]))
    return out


def conversations(
    *,
    min_rounds: int = 0,
    max_rounds: int = 6,
    max_steps: int = 4,
    parallel_tool_calls: bool = True,
    huge_outputs: bool = True,
    huge_chars: tuple[int, int] = (2_000, 60_000),
    consecutive_users: bool = True,
    allow_no_user: bool = True,
    system_prompt: bool = True,
    pending_last_step: bool = False,
    max_chars: int = 300,
) -> st.SearchStrategy[list[Message]]:
    """Strategy for a valid agent conversation: every tool call answered, ids unique.

    Each round is one or more user messages (unless the conversation has no user at all), then
    steps: an assistant message with 0..n tool calls followed by their results, in any order for
    parallel calls.

    Args:
        min_rounds: Fewest rounds.
        max_rounds: Most rounds.
        max_steps: Most assistant steps per round.
        parallel_tool_calls: Allow several calls in one assistant message.
        huge_outputs: Now and then make a tool result of ``huge_chars`` characters.
        huge_chars: Size range of huge results.
        consecutive_users: Allow several user messages in a row.
        allow_no_user: Now and then make a conversation without any user message.
        system_prompt: Now and then open with a system message.
        pending_last_step: Now and then end with an unanswered call (a pending step).
        max_chars: Longest ordinary content.
    """
    if not 0 <= min_rounds <= max_rounds:
        raise ValueError("need 0 <= min_rounds <= max_rounds")
    return _conversation(
        min_rounds=min_rounds,
        max_rounds=max_rounds,
        max_steps=max_steps,
        parallel_tool_calls=parallel_tool_calls,
        huge_outputs=huge_outputs,
        huge_chars=huge_chars,
        consecutive_users=consecutive_users,
        allow_no_user=allow_no_user,
        system_prompt=system_prompt,
        pending_last_step=pending_last_step,
        max_chars=max_chars,
    )
