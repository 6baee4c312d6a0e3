"""Executable view invariants: :func:`check_view_invariants` raises naming what broke and where."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ctxledger.checkpoints import Checkpoint
from ctxledger.config import Config
from ctxledger.domain.calibration import session_tokenizer
from ctxledger.domain.render import TRUNCATION_MARKER, mask_text, truncate_message
from ctxledger.domain.state import SessionState
from ctxledger.domain.tokenizer import CharTokenizer, Tokenizer
from ctxledger.domain.view import (
    COMPACT_CHECKPOINT,
    FULL_HISTORY,
    ModelView,
    build_view,
    draft_view,
)
from ctxledger.errors import ContextOverflowError
from ctxledger.messages import Message

__all__ = ["check_floor_refusal", "check_view_invariants", "is_truncation_of"]


def _fail(invariant: str, seq: int | None, detail: str) -> AssertionError:
    where = f" at seq {seq}" if seq is not None else ""
    return AssertionError(f"view invariant '{invariant}' broken{where}: {detail}")


def is_truncation_of(shown: str, original: str, seq: int) -> bool:
    """Whether ``shown`` is ``original`` truncated: its head, a marker naming ``seq``, its tail."""
    match = TRUNCATION_MARKER.search(shown)
    if match is None or int(match["seq"]) != seq or int(match["total"]) != len(original):
        return False
    head, tail = shown[: match.start()], shown[match.end() :]
    return (
        original.startswith(head)
        and original.endswith(tail)
        and len(head) + len(tail) + int(match["omitted"]) == len(original)
    )


def check_view_invariants(
    history: Sequence[Message],
    view: ModelView,
    config: Config,
    *,
    checkpoint: Checkpoint | None = None,
    pins: Collection[int] = (),
    tokenizer: Tokenizer | None = None,
    expected_history: Sequence[Message] | None = None,
    check_window: bool = True,
    retracted: Collection[int] = (),
    cleared_through: int = 0,
    pending: str = "",
) -> None:
    """Check a model view against the history it was built from.

    Invariants, each named in the error: ``history_altered`` (history differs from
    ``expected_history`` or its seqs are not 1, 2, 3, …), ``unknown_message`` (a view message
    names no history message or changes its role, calls or metadata), ``duplicate_message``,
    ``summary_placement`` (more than one summary, or one that contradicts the view's mode),
    ``head_not_first`` (system messages before the first user message must open the view),
    ``split_tool_call`` (a tool result before or without its call, something else between a
    call and its results, or an unanswered call that is not the last, pending step),
    ``altered_message`` (shown neither verbatim, masked as ``[Previous: used <tool>]`` nor
    truncated with a marker naming its seq; only tool results and the kept first request may be
    truncated), ``pinned_not_shown`` (a pinned message, or under ``config.keep_first_request``
    the first user message once the summary covers it, is missing), ``lost_message`` (neither
    shown nor covered by the summary) and ``over_window`` (the view exceeds
    ``config.context_window`` although its retained minimum alone would fit) and
    ``withdrawn_shown`` (a retracted message, or one up to the last clear, is in the view; such
    messages are exempt from the other rules, and the first user message and the head system
    messages are those after the clear that are not retracted).

    Args:
        history: The session's history (every appended message, with seqs).
        view: The view built from it.
        config: The Config in force when the view was built.
        checkpoint: The active checkpoint; by default read from the summary message's metadata.
        pins: Pinned seqs.
        tokenizer: Counts tokens for ``over_window`` (default: chars // 3).
        expected_history: What history must equal (for example a test's model of it).
        check_window: Check ``over_window``; pass False for a view served after the summariser
            failed (the previous checkpoint stays active, so the view may not fit).
        retracted: Seqs of retracted messages (``SessionState.retracted``).
        cleared_through: The last clear's ``through_seq`` (``SessionState.cleared_through``).
        pending: Text sent with the view (``prepare_step(pending)``): ``over_window`` counts
            it in the view and in its retained minimum.

    Raises:
        AssertionError: An invariant is broken; the message names it and the seq.
    """
    _check_history(history, expected_history)
    summaries = [m for m in view.messages if m.role == "summary"]
    covered = _covered_through(view, summaries, checkpoint)
    by_seq = _check_messages(history, view)
    retracted = set(retracted)

    def withdrawn(seq: int | None) -> bool:
        return seq is not None and (seq <= cleared_through or seq in retracted)

    for seq in by_seq:
        if withdrawn(seq):
            raise _fail("withdrawn_shown", seq, "a retracted or cleared message is in the view")
    shown = [m for m in history if not withdrawn(m.seq)]
    first_user = next((m.seq for m in shown if m.role == "user"), None)
    _check_head(shown, view, first_user)
    _check_tool_pairing(view.messages)
    call_names = {call.id: call.name for m in shown for call in m.tool_calls}
    # The first user message, once covered, is kept in the pinned slot (cut to the tool-result
    # limit unless pinned explicitly).
    kept_request = (
        first_user
        if config.keep_first_request and first_user is not None and first_user <= covered
        else None
    )
    for message in shown:
        assert message.seq is not None
        seq = message.seq
        rendered = by_seq.get(seq)
        if rendered is None:
            is_head = message.role == "system" and (first_user is None or seq < first_user)
            if seq in pins and not is_head:
                raise _fail("pinned_not_shown", seq, "a pinned message is missing from the view")
            if seq == kept_request:
                raise _fail(
                    "pinned_not_shown", seq, "the kept first request is missing from the view"
                )
            if seq > covered:
                raise _fail(
                    "lost_message",
                    seq,
                    f"not in the view and not covered (covered through {covered})",
                )
            continue
        if rendered.content == message.content:
            continue
        if message.role == "tool":
            name = message.name or call_names.get(message.tool_call_id or "", "tool")
            if seq not in pins and rendered.content == mask_text(name):
                continue
            if is_truncation_of(rendered.content, message.content, seq):
                continue
        elif (
            seq == kept_request
            and seq not in pins
            and is_truncation_of(rendered.content, message.content, seq)
        ):
            continue
        raise _fail(
            "altered_message", seq, f"{message.role} content is not verbatim, masked or truncated"
        )
    if check_window:
        kept_first = first_user if config.keep_first_request else None
        _check_window(
            view,
            config.context_window,
            config.sizes().request_chars,
            tokenizer or CharTokenizer(),
            pins,
            kept_first,
            pending,
        )


def check_floor_refusal(
    state: SessionState,
    error: ContextOverflowError,
    *,
    tokenizer: Tokenizer | None = None,
    pending: str = "",
) -> None:
    """Check that a refused step (``ContextOverflowError``: the view would not fit) had to be.

    A step may be refused only when its view does not fit the window and the view's retained
    minimum (system messages, pins, the kept first request, the last step, the pending text)
    reaches the window: a compacted view adds a summary to that minimum, so no compaction
    could make it fit. ``state`` is the session after the refusal (nothing was recorded).

    Args:
        state: The session.
        error: What the step raised.
        tokenizer: The session's tokenizer (default :class:`CharTokenizer`).
        pending: The text the step was to send with the view.

    Raises:
        AssertionError: The refusal was not needed (``over_window`` names the minimum).
    """
    # The window is guarded in the session's tokens: calibrated ones once usage reports taught
    # the default tokenizer a denser ratio (a minimum under the window in raw ``chars // 3``
    # can be over it then).
    tokenizer = session_tokenizer(state, tokenizer or CharTokenizer())
    assert "does not fit the window" in str(error), f"unexpected overflow: {error}"
    window = state.config.context_window
    estimate = draft_view(state, tokenizer=tokenizer, pending=pending).estimated_tokens
    assert estimate > window, f"refused a view that fits ({estimate} tokens)"
    view = build_view(state, tokenizer=tokenizer)
    config = state.config
    check_view_invariants(
        state.history,
        view,
        config,
        checkpoint=state.active_checkpoint,
        pins=state.pins,
        tokenizer=tokenizer,
        retracted=state.retracted,
        cleared_through=state.cleared_through,
        pending=pending,
        check_window=False,
    )
    # "Reaches the window" is "over window - 1"; the kept first request is measured cut to the
    # limit of the real window.
    first_user = next(
        (m.seq for m in state.history if m.role == "user" and not state.is_withdrawn(m.seq or 0)),
        None,
    )
    _check_window(
        view,
        window - 1,
        config.sizes().request_chars,
        tokenizer,
        state.pins,
        first_user if config.keep_first_request else None,
        pending,
    )


def _check_history(history: Sequence[Message], expected: Sequence[Message] | None) -> None:
    for index, message in enumerate(history):
        if message.seq != index + 1:
            raise _fail("history_altered", index + 1, f"history[{index}] carries seq {message.seq}")
    if expected is not None:
        if len(expected) != len(history):
            raise _fail(
                "history_altered", None, f"{len(history)} messages, expected {len(expected)}"
            )
        for message, want in zip(history, expected, strict=True):
            if message != want:
                raise _fail("history_altered", message.seq, "message differs from the expected one")


def _covered_through(
    view: ModelView, summaries: list[Message], checkpoint: Checkpoint | None
) -> int:
    if len(summaries) > 1:
        raise _fail("summary_placement", None, f"{len(summaries)} summary messages")
    if view.mode not in (FULL_HISTORY, COMPACT_CHECKPOINT):
        raise _fail("summary_placement", None, f"unknown mode {view.mode!r}")
    if (view.mode == COMPACT_CHECKPOINT) != bool(summaries) or (
        (view.checkpoint_id is not None) != bool(summaries)
    ):
        raise _fail(
            "summary_placement", None, f"mode {view.mode!r} with {len(summaries)} summaries"
        )
    if checkpoint is not None:
        if checkpoint.id != view.checkpoint_id:
            raise _fail("summary_placement", None, f"view shows checkpoint {view.checkpoint_id!r}")
        return checkpoint.covers_through_seq
    if summaries:
        through = summaries[0].metadata.get("covers_through_seq")
        return through if isinstance(through, int) else 0
    return 0


def _check_messages(history: Sequence[Message], view: ModelView) -> dict[int, Message]:
    by_seq: dict[int, Message] = {}
    for shown in view.messages:
        if shown.role == "summary":
            continue
        seq = shown.seq
        if seq is None or not 1 <= seq <= len(history):
            raise _fail("unknown_message", seq, f"{shown.role} message names no history message")
        original = history[seq - 1]
        if (shown.role, shown.tool_calls, shown.tool_call_id, shown.name, shown.metadata) != (
            original.role,
            original.tool_calls,
            original.tool_call_id,
            original.name,
            original.metadata,
        ):
            raise _fail("unknown_message", seq, "role, tool calls, name or metadata changed")
        if seq in by_seq:
            raise _fail("duplicate_message", seq, "shown twice")
        by_seq[seq] = shown
    return by_seq


def _check_head(history: Sequence[Message], view: ModelView, first_user: int | None) -> None:
    head = [
        m
        for m in history
        if m.role == "system" and (first_user is None or (m.seq or 0) < first_user)
    ]
    for index, message in enumerate(head):
        if index >= len(view.messages) or view.messages[index] != message:
            raise _fail(
                "head_not_first", message.seq, "system preamble must open the view verbatim"
            )


def _check_tool_pairing(messages: Sequence[Message]) -> None:
    open_calls: dict[str, int | None] = {}
    answered: set[str] = set()
    for index, message in enumerate(messages):
        if message.role == "tool":
            call_id = message.tool_call_id or ""
            if call_id not in open_calls:
                state = (
                    "answered twice" if call_id in answered else "shown before or without its call"
                )
                raise _fail("split_tool_call", message.seq, f"result for {call_id!r} {state}")
            del open_calls[call_id]
            answered.add(call_id)
            continue
        if open_calls:
            call_id, seq = next(iter(open_calls.items()))
            raise _fail(
                "split_tool_call",
                seq,
                f"call {call_id!r} is followed by a {message.role} message (index {index}) "
                "before its result",
            )
        for call in message.tool_calls:
            open_calls[call.id] = message.seq
    # Calls still open here belong to the last step, which may be pending.


def _check_window(
    view: ModelView,
    window: int,
    request_chars: int,
    tokenizer: Tokenizer,
    pins: Collection[int],
    kept_first: int | None,
    pending: str,
) -> None:
    extra = [Message(role="user", content=pending)] if pending else []
    tokens = tokenizer.count_messages([*view.messages, *extra])
    if tokens <= window:
        return
    # The retained minimum: system messages, the pinned slot (pinned exchanges and the kept
    # first request: everything before the summary), the summary and the last step. The first
    # user message (``kept_first``) belongs to it even while it is still in the tail: a deeper
    # cut moves it into the slot, cut to the size of a tool result unless pinned.
    messages = view.messages
    slot_end = next((i for i, m in enumerate(messages) if m.role == "summary"), 0)
    last_boundary = max(
        (i for i, m in enumerate(messages) if m.role in ("user", "assistant")), default=0
    )
    # A pinned exchange is shown whole: every call of its assistant message and every result.
    pinned_results = {m.tool_call_id for m in messages if m.role == "tool" and m.seq in pins}
    pinned_calls: set[str | None] = set()
    for message in messages:
        ids = {call.id for call in message.tool_calls}
        if ids and (message.seq in pins or ids & pinned_results):
            pinned_calls |= ids
    kept = [
        m
        if i < slot_end or m.seq != kept_first or m.seq in pins
        else truncate_message(m, request_chars)
        for i, m in enumerate(messages[:last_boundary])
        if i < slot_end
        or m.role in ("system", "summary")
        or m.seq in pins
        or m.seq == kept_first
        or m.tool_call_id in pinned_calls
        or any(call.id in pinned_calls for call in m.tool_calls)
    ]
    minimum = tokenizer.count_messages([*kept, *messages[last_boundary:], *extra])
    if minimum <= window:
        raise _fail(
            "over_window",
            view.through_seq,
            f"{tokens} tokens > window {window} (retained minimum {minimum})",
        )
