"""Measuring cuts: the tokens of the view a candidate cut would make, step-level cut search,
and the small values the policy's steps pass each other (:mod:`ctxledger.domain.policy`)."""

from __future__ import annotations

from typing import NamedTuple, cast

import msgspec

from ctxledger.checkpoints import Checkpoint, CheckpointReason
from ctxledger.domain._compaction_plan import TRIGGERS, Trigger
from ctxledger.domain.calibration import tokens_of_chars, view_chars
from ctxledger.domain.projection import (
    FACTS_SEPARATOR,
    assemble,
    shown_between,
    slot_seqs,
    view_head,
)
from ctxledger.domain.render import RenderPolicy, render_message, render_policy
from ctxledger.domain.state import SessionState
from ctxledger.domain.tokenizer import Tokenizer
from ctxledger.domain.view import Draft
from ctxledger.messages import Message

__all__ = [
    "STEP_CUT_FILL",
    "TRIGGERS",
    "Cut",
    "CutMeasure",
    "CutRequest",
    "Marks",
    "Rooms",
    "ShownChars",
    "Skip",
    "Trigger",
    "newest_cut",
    "shown_chars",
]


#: A step-level cut keeps the raw tail within this share of the room left after the system
#: messages, the pinned slot and summary, so that the next compaction is not due on the very
#: next step.
STEP_CUT_FILL = 0.5


class ShownChars:
    """The characters each message of history shows in a view's tail, with their running sums,
    from the lowest seq a cut was measured at up to the newest.

    A cut's view is its head (system messages, the pinned slot, the summary) and its tail, and
    the built-in tokenizers count a view's characters (:func:`tokens_of_chars`): a plan measures
    its candidate cuts from these sums instead of assembling a view for each
    (:meth:`CutMeasure.exact`). Kept on the state (``SessionState.cut_memo``) while no event
    folded changes how its messages are shown (``SessionState.shown_epoch``): the messages
    appended since are added, and the tool results the masking boundary passed are measured
    again, so the next plan measures only what changed.
    """

    __slots__ = ("chars", "key", "low", "mask", "policy", "state", "sums")

    def __init__(self, state: SessionState, key: tuple[object, ...], policy: RenderPolicy) -> None:
        self.state = state
        self.key = key
        self.policy = policy
        self.mask = policy.mask_before_seq
        self.low = state.last_seq + 1  # the lowest seq measured
        self.chars: list[int] = []  # chars[i]: seq low + i shows so many (-1: not shown)
        self.sums: list[int] = [0]  # sums[i]: the characters of seqs low .. low + i - 1

    def _sum_from(self, index: int) -> None:
        """Make ``sums`` hold again from ``chars[index]`` on."""
        sums, chars = self.sums, self.chars
        del sums[index + 1 :]
        total = sums[index]
        for value in chars[index:]:
            if value > 0:
                total += value
            sums.append(total)

    def update(self, policy: RenderPolicy) -> None:
        """Bring the sums up to date with the state (same key): the tool results between the
        masking boundary measured and ``policy``'s, and the messages appended since."""
        state, low, chars = self.state, self.low, self.chars
        high = low + len(chars) - 1
        self.policy = policy
        mask, was = policy.mask_before_seq, self.mask
        changed = len(chars)
        if mask != was:
            first, last = max(low, min(mask, was)), min(high, max(mask, was) - 1)
            if first <= last:
                chars[first - low : last - low + 1] = shown_between(state, first, last, policy)
                changed = first - low
            self.mask = mask
        last_seq = state.last_seq
        if high < last_seq:
            chars.extend(shown_between(state, high + 1, last_seq, policy))
        if changed < len(chars):
            self._sum_from(changed)

    def _reach(self, seq: int) -> None:
        """Measure the messages from ``seq`` on (below the lowest measured)."""
        if seq < self.low:
            self.chars[:0] = shown_between(self.state, seq, self.low - 1, self.policy)
            self.low = seq
            self.sums = [0]
            self._sum_from(0)

    def view(self, checkpoint: Checkpoint) -> int:
        """The characters of the view under ``checkpoint`` (as it is): its head, rendered, and
        its tail (:func:`~ctxledger.domain.calibration.view_chars` of the assembled view)."""
        head = view_chars(view_head(self.state, checkpoint, self.policy))
        return head + self.tail(checkpoint.retain_from_seq)

    def tail(self, cut: int) -> int:
        """The characters of the tail a view retaining from ``cut`` shows."""
        state = self.state
        start = max(cut, state.cleared_through + 1, 1)
        if start > state.last_seq:
            return 0
        self._reach(start)
        return self.sums[-1] - self.sums[start - self.low]

    def shown(self, first: int) -> list[int]:
        """What messages ``first`` .. newest show in a tail (``first`` after the last clear),
        from the newest down; -1 where none shows it (a head system message, or retracted)."""
        self._reach(first)
        return self.chars[: first - self.low - 1 : -1] if first > self.low else self.chars[::-1]


def shown_chars(state: SessionState, tokenizer: Tokenizer) -> ShownChars | None:
    """The state's :class:`ShownChars`, up to date, or None when ``tokenizer`` is not one of
    the built-in estimators, which count characters."""
    if tokens_of_chars(tokenizer, 0) is None:
        return None
    policy = render_policy(state)
    key = (
        state.shown_epoch,
        state.cleared_through,
        id(state.config),
        state.first_user_seq,
        msgspec.structs.replace(policy, mask_before_seq=0),
    )
    memo = state.cut_memo
    if (
        isinstance(memo, ShownChars)
        and memo.key == key
        and memo.low + len(memo.chars) - 1 <= state.last_seq
    ):
        memo.update(policy)
        return memo
    memo = state.cut_memo = ShownChars(state, key, policy)
    return memo


class CutMeasure:
    """Measures the view a cut would make, with a summary of the full reserved size."""

    def __init__(
        self,
        state: SessionState,
        tokenizer: Tokenizer,
        reason: CheckpointReason,
        max_chars: int,
        pending: str,
    ) -> None:
        self.state = state
        self.tokenizer = tokenizer
        self.reason = reason
        self.placeholder = "x" * max_chars
        self.pending = pending
        self.chars = shown_chars(state, tokenizer)
        self._exact: dict[int, int] = {}

    def exact(self, cut: int) -> int:
        """Tokens of the view retaining from ``cut`` (pending text included)."""
        known = self._exact.get(cut)
        if known is not None:
            return known
        checkpoint = Checkpoint(
            id="",
            summary=self.placeholder,
            retain_from_seq=cut,
            covers_through_seq=cut - 1,
            reason=self.reason,
        )
        chars = self.chars
        counted = None
        if chars is not None:
            counted = tokens_of_chars(self.tokenizer, chars.view(checkpoint) + len(self.pending))
        if counted is None:
            messages = assemble(self.state, checkpoint)
            if self.pending:  # sent as a user message after the view
                messages.append(Message(role="user", content=self.pending))
            counted = self.tokenizer.count_messages(messages)
        self._exact[cut] = counted
        return counted

    def step_cut(self, lower: int, room: int, fill: float) -> int | None:
        """Return the earliest boundary from ``lower`` on whose view fits, else the last one.

        The tail aims at ``fill`` of the room left by the fixed part (system messages, the pinned
        slot with the kept first request, summary). Per-message costs are summed with one token
        of slack each, so the sum bounds the default tokenizer's total; each pick is then checked
        exactly.
        """
        state = self.state
        candidates = state.boundaries_between(lower, state.last_seq)
        if not candidates:
            return None
        # Nothing raw but the slot (pins, the kept first request): the part no cut removes.
        fixed = self.exact(state.last_seq + 1)
        budget = fixed + int(max(0, room - fixed) * fill)
        always = set(slot_seqs(state, state.last_seq + 1))
        wanted = set(candidates)
        if self.chars is not None and candidates[0] > state.cleared_through:
            suffix = self._step_sums(candidates[0], always, wanted)
        else:
            suffix = self._step_sums_counted(candidates[0], always, wanted)
        for seq in candidates:
            if fixed + suffix[seq] <= budget and self.exact(seq) <= budget:
                return seq
        return candidates[-1]

    def _step_sums(self, low: int, always: set[int], wanted: set[int]) -> dict[int, int]:
        """:meth:`_step_sums_counted` from the characters each message shows (a built-in
        tokenizer counts a message as ``tokens_of_chars`` of them)."""
        chars = self.chars
        assert chars is not None
        tokenizer = self.tokenizer
        suffix: dict[int, int] = {}
        total = 0
        seq = self.state.last_seq
        for shown in chars.shown(low):
            if shown >= 0 and seq not in always:
                total += cast(int, tokens_of_chars(tokenizer, shown)) + 1
            if seq in wanted:
                suffix[seq] = total
            seq -= 1
        return suffix

    def _step_sums_counted(self, low: int, always: set[int], wanted: set[int]) -> dict[int, int]:
        """The tokens of the raw messages from each of ``wanted`` on (one of slack each),
        counted message by message, the slot's (``always``) and the head's aside."""
        state = self.state
        policy: RenderPolicy = render_policy(state)
        count = self.tokenizer.count_message
        suffix: dict[int, int] = {}
        total = 0
        retracted = state.retracted
        for seq in range(state.last_seq, low - 1, -1):
            message = state.history[seq - 1]
            if seq not in always and seq not in retracted and not state.is_head(message):
                total += count(render_message(state, policy, message)) + 1
            if seq in wanted:
                suffix[seq] = total
        return suffix


class Marks(NamedTuple):
    """The marks in force for a state, in tokens.

    Attributes:
        threshold: The high mark (fixed, or the dynamic policy's value now).
        target: The low mark (the threshold itself for a one-mark Config).
        prepare: Where a summary starts in the background (0: never).
        one_mark: A Config recorded before the marks (schema 3): the target is the threshold.
        overshoot: How far the step that reaches the threshold may pass it, for judging
            whether a summary prepared ahead absorbs the growth
            (:func:`ctxledger.domain.policy.extend_due`); None: a quarter of the room between
            the prepare point and the threshold (schema 4).
    """

    threshold: int
    target: int
    prepare: int
    one_mark: bool = False
    overshoot: int | None = None


class Rooms(NamedTuple):
    """Characters reserved for a checkpoint's summary and for its fact block (0: none)."""

    summary: int
    facts: int

    @property
    def reserve(self) -> int:
        """Characters the summary message takes with both texts at full size."""
        return self.summary + (len(FACTS_SEPARATOR) + self.facts if self.facts else 0)


class CutRequest(NamedTuple):
    """What a cut is planned for.

    Attributes:
        state: The session.
        tokenizer: Counts tokens (the session's).
        trigger: ``threshold_exceeded``, ``manual`` or ``prompt_too_long``.
        pending: Text about to be sent with the view.
        attempt: The reactive retry number.
        draft: The view as it is (under the prepared summary, when planning from one).
        marks: The marks in force.
        base: The first seq the summary does not cover yet.
        ahead: Planned ahead of need (a background summary below the threshold).
    """

    state: SessionState
    tokenizer: Tokenizer
    trigger: Trigger
    pending: str
    attempt: int
    draft: Draft
    marks: Marks
    base: int
    ahead: bool


class Cut(NamedTuple):
    """A planned cut: where, its rooms and what the view will be."""

    seq: int
    step_level: bool
    rooms: Rooms
    aim: int
    planned: int
    floor: int


class Skip(NamedTuple):
    """No cut: why (a ``CompactionResult.reason``), with what was measured."""

    reason: str
    floor: int = 0
    planned: int = 0


def newest_cut(state: SessionState, base: int) -> int:
    """The deepest cut: everything before the newest step summarised."""
    newest = state.boundary_at_or_before(state.last_seq + 1)
    return max(newest, base) if newest is not None else base
