"""The structured prompt the HTTP summarisers send, and the compact transcript inside it.

Both clients send the same two texts: :data:`SYSTEM_PROMPT` (what a good summary holds) and a
user prompt with the previous summary, the focus and the transcript. The transcript is fitted to
a character budget by clipping the longest texts first (tool results before anything else), each
to its head and tail, so that a megabyte of ``cat`` output never crowds out the user's request.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxledger.domain.extract import clip_middle
from ctxledger.messages import Message
from ctxledger.summarizers.base import SummaryRequest

__all__ = ["SECTION_TITLES", "SYSTEM_PROMPT", "build_prompt", "fit", "render_transcript"]

#: The headings the model is asked to write, in order (the last only when a focus is given).
SECTION_TITLES: tuple[str, ...] = (
    "Completed work",
    "Current state and in-progress task",
    "Files and identifiers",
    "Open problems",
    "Decisions",
    "Focus",
)

SYSTEM_PROMPT = """\
You compact the history of a long-running coding agent. Your summary replaces the messages \
below in the agent's context, so the agent must be able to continue its work from the summary \
alone.

Write Markdown with these sections, in this order:
## Completed work
What was done and verified, with the outcome of each step.
## Current state and in-progress task
Where the work stands now, and the task being worked on when the history ends.
## Files and identifiers
Every file path, shell command, function, class, variable, issue number and version that \
matters, spelled exactly.
## Open problems
Errors still unresolved (quote the error line), failing tests, open TODOs, unanswered questions.
## Decisions
Choices made and why, including approaches that were rejected.
## Focus
Only when a focus is given: everything the history says about it.

Rules:
- Quote every user request verbatim (shorten only a very long one, keeping its beginning and end).
- Keep exact paths, commands, error messages, names and numbers; never paraphrase them.
- A previous summary is given: merge it with the new messages. Keep what still holds, update \
what changed, and never repeat an item.
- No preamble and no closing remarks: answer with the summary only.
"""

# Clipping never goes below these: a head and a tail of a tool result still name its outcome.
_MIN_TOOL_CHARS = 160
_MIN_TEXT_CHARS = 400
_MAX_ARGUMENT_CHARS = 600


def fit(text: str, max_chars: int) -> str:
    """Cut a model's answer to ``max_chars``, at a line break when one is near the limit.

    Args:
        text: The answer.
        max_chars: The room the planner reserved for the summary.

    Returns:
        ``text`` stripped, and at most ``max_chars`` characters long.
    """
    text = text.strip()
    if len(text) <= max_chars:
        return text
    cut = text.rfind("\n", 0, max_chars + 1)
    if cut < max_chars * 0.8:
        cut = max_chars
    return text[:cut].rstrip()


def _cap(lengths: Sequence[int], room: int) -> int:
    """The largest per-item cap ``c`` with ``sum(min(n, c) for n in lengths) <= room``."""
    remaining = room
    ordered = sorted(lengths)
    for index, length in enumerate(ordered):
        share = remaining // (len(ordered) - index)
        if length > share:
            return max(share, 0)
        remaining -= length
    return max(ordered, default=0)


def _label(message: Message) -> str:
    seq = f"#{message.seq} " if message.seq is not None else ""
    if message.role == "tool":
        return f"[{seq}tool {message.name or ''}]".replace(" ]", "]")
    return f"[{seq}{message.role}]"


def _calls(message: Message) -> str:
    return "".join(
        f"\n→ {call.name}({clip_middle(call.arguments, _MAX_ARGUMENT_CHARS)})"
        for call in message.tool_calls
    )


def render_transcript(messages: Sequence[Message], max_chars: int) -> str:
    """Render messages compactly, one block each, within ``max_chars`` characters.

    Tool results are clipped first, all to the same cap and never below a head and a tail; then,
    only if that is not enough, the other texts; a last resort cuts the middle of the whole.

    Args:
        messages: The messages to summarise, oldest first.
        max_chars: The room for the transcript.

    Returns:
        Blocks like ``[#12 user] text`` and ``[#14 tool bash] output``, separated by blank lines.
    """
    fixed = sum(len(_label(m)) + len(_calls(m)) + 3 for m in messages)
    tools = [len(m.content) for m in messages if m.role == "tool"]
    texts = [len(m.content) for m in messages if m.role != "tool"]
    tool_cap = max(_cap(tools, max_chars - fixed - sum(texts)), _MIN_TOOL_CHARS)
    clipped_tools = sum(min(n, tool_cap) for n in tools)
    text_cap = max(_cap(texts, max_chars - fixed - clipped_tools), _MIN_TEXT_CHARS)
    blocks = []
    for message in messages:
        cap = tool_cap if message.role == "tool" else text_cap
        blocks.append(f"{_label(message)} {clip_middle(message.content, cap)}{_calls(message)}")
    return clip_middle("\n\n".join(blocks), max_chars)


def build_prompt(request: SummaryRequest, max_input_chars: int) -> tuple[str, str]:
    """Build the system prompt and the user prompt for one summary request.

    Args:
        request: The messages, previous summary, focus and size limit.
        max_input_chars: The most characters the two prompts may take together.

    Returns:
        ``(system, user)``: the instructions, and the material with the task.
    """
    parts = []
    if request.previous_summary:
        parts.append(
            "<previous_summary>\n" + request.previous_summary.strip() + "\n</previous_summary>"
        )
    if request.focus:
        parts.append(
            "<focus>\n" + request.focus.strip() + "\n</focus>\n"
            "The user asked the summary to focus on this: write the ## Focus section and keep "
            "every detail about it."
        )
    seqs = [m.seq for m in request.messages if m.seq is not None]
    span = f' seqs="{min(seqs)}-{max(seqs)}"' if seqs else ""
    task = (
        f"Write the updated summary now, in at most {request.max_chars} characters"
        + (", merging the previous summary" if request.previous_summary else "")
        + "."
    )
    used = len(SYSTEM_PROMPT) + sum(len(p) + 2 for p in parts) + len(task) + len(span) + 40
    transcript = render_transcript(request.messages, max(max_input_chars - used, 1000))
    parts.append(f"<transcript{span}>\n{transcript}\n</transcript>")
    parts.append(task)
    return SYSTEM_PROMPT, "\n\n".join(parts)
