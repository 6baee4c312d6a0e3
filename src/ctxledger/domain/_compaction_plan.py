"""What a compaction plans and how it ends: :class:`CompactionPlan`, :class:`CompactionResult`.

A plan is what :func:`ctxledger.domain.policy.plan_compaction` hands the summariser (its
messages, cut into chunks, and the room the summary may take); a result is the outcome of the
request, a checkpoint made or why none was (:func:`fail_compaction` when its summary did not
arrive). Both are re-exported by :mod:`ctxledger.domain.compaction`, as are :func:`run_summarizer`
and the compaction's triggers, which live here so that a summary worker process (see
:mod:`ctxledger.actors.summary_process`), which needs the plan and the summariser alone, imports
neither the fold nor the projection.

What the summariser is given (:func:`~ctxledger.domain.digest.summary_input` of the covered
messages, and its content address) is made on first use, not when the plan is made: the host
plans on a session's history actor, which serves every step of its sessions, and the input's
facts cost milliseconds per summary (2.7 ms of a background summary's 3.0 ms of planning,
measured in ``bench/bench_host.py``'s open loop); the summariser's own thread makes it.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Literal

import msgspec

from ctxledger.domain.digest import summary_input
from ctxledger.domain.render import truncate_text
from ctxledger.domain.summary import AsyncSummarizer, Summarizer, SummaryRequest
from ctxledger.domain.tokenizer import message_chars
from ctxledger.messages import Message

if TYPE_CHECKING:
    from ctxledger.events.types import CompactionStarted

__all__ = [
    "TRIGGERS",
    "CompactionPlan",
    "CompactionResult",
    "Trigger",
    "arun_summarizer",
    "fail_compaction",
    "input_hash",
    "run_summarizer",
]

#: What a compaction is planned for: the threshold, a manual ``compact``, or a provider's
#: "prompt too long" (reactive).
Trigger = Literal["threshold_exceeded", "manual", "prompt_too_long"]
#: The triggers a compaction is planned for.
TRIGGERS: tuple[str, ...] = ("threshold_exceeded", "manual", "prompt_too_long")

_hash_encoder = msgspec.msgpack.Encoder(order="deterministic")


def input_hash(
    messages: tuple[Message, ...], previous: str | None, focus: str | None, max_chars: int
) -> str:
    """The content address of a summariser input (what a summary of it can be reused for)."""
    payload = _hash_encoder.encode((messages, previous, focus, max_chars))
    return hashlib.sha256(payload).hexdigest()


#: What a plan's input was made from (its covered messages, then the other inputs), the
#: messages the summariser is given and their address.
_Made = tuple[
    tuple[Message, ...], tuple[object, ...], tuple[Message, ...] | None, str, int, int | None
]


class _Given:
    """A plan's summariser input and its address, made once, on first use (see the module
    docstring). Not part of the plan's value: every plan's is equal to every other's.

    The inputs it was made from are kept with it: a plan copied with other inputs
    (``msgspec.structs.replace``) shares the object and makes its own. Two threads that make it
    at once make equal values; either is kept.
    """

    __slots__ = ("made",)

    def __init__(self) -> None:
        self.made: _Made | None = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Given)

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "…"


class CompactionResult(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of a compaction request.

    Attributes:
        compacted: Whether a new checkpoint was made.
        reason: ``compacted``, ``summary_unavailable`` or why none was attempted, in the
            order checked: ``messages_not_enough`` (fewer than 3 messages),
            ``checkpoint_current`` (nothing appended since the active checkpoint and the view's
            messages fit the window), ``below_threshold``,
            ``floor_above_threshold`` (what no compaction can shrink is above the threshold and
            the view still fits the window: ``Config.floor_guard``), ``rounds_not_enough``,
            ``no_progress``, ``gain_too_small`` (the cut would save fewer tokens than
            ``Config.min_compaction_gain_tokens`` and the view still fits the window).
        checkpoint_id: The new checkpoint's id, or the active one's when nothing was made.
        estimated_tokens: The estimate after the compaction (before, when nothing was made).
        threshold: The threshold in force.
        retain_from_seq: The new cut, or the active checkpoint's.
        messages_compacted: Messages newly covered by the summary.
        tokens_before: The estimate before the compaction.
        prepared: The checkpoint came from a summary prepared in the background (no summariser
            ran for it in this call).
        waited_seconds: How long the caller waited on a summariser in this call (0 when the
            summary was prepared in time, or none was needed).
        floor_tokens: The part of the view no compaction can shrink (system messages, pins,
            the summary's reserved room, the newest step), when it was measured (the floor
            guard); when even an empty summary leaves no room (the caller then raises
            :class:`~ctxledger.errors.ContextOverflowError`), that part without the summary's
            room; 0 otherwise.
        planned_tokens: The view the planned cut would give (with the summary's room), when a
            cut was planned; 0 otherwise.
    """

    compacted: bool
    reason: str
    checkpoint_id: str | None
    estimated_tokens: int
    threshold: int
    retain_from_seq: int | None
    messages_compacted: int
    tokens_before: int = 0
    prepared: bool = False
    waited_seconds: float = 0.0
    floor_tokens: int = 0
    planned_tokens: int = 0


class CompactionPlan(msgspec.Struct, frozen=True, kw_only=True):
    """A planned compaction, ready for the summariser.

    Attributes:
        reason: The trigger (``threshold_exceeded``, ``manual`` or ``prompt_too_long``).
        retain_from_seq: The cut: the first seq kept raw.
        covers_through_seq: The last seq the summary will cover (``retain_from_seq - 1``).
        covered: The newly covered messages: after the active checkpoint's coverage (or the
            last clear) and before the cut, head system messages and retracted ones excluded,
            as history holds them. Pinned messages and the kept first request
            (``Config.keep_first_request``) are included although the view still shows them: a
            summary must stand alone once the Config that keeps the request changes, and the
            kept request may be shown truncated. The summariser is given :attr:`messages`.
        previous_summary: The active checkpoint's summary, merged incrementally.
        previous_checkpoint_id: The active checkpoint's id.
        focus: What to keep, for a manual compaction.
        max_chars: Room reserved for the summary (``SummaryRequest.max_chars``).
        chunk_chars: Largest summariser input per call.
        estimated_tokens: The estimate before the compaction.
        threshold: The threshold in force.
        target_tokens: The view must end up below this (the threshold, or less on reactive
            retries) unless the retained minimum alone is larger.
        planned_tokens: Upper bound of the view's tokens after the compaction, with a summary of
            ``max_chars`` characters.
        attempt: Reactive retry number.
        step_level: Whether the cut lies inside the retained rounds (at a step boundary).
        fact_chars: Room reserved for the checkpoint's fact block after the summary
            (``Config.fact_index_chars``; 0: no block).
        result_chars: ``Config.summary_result_chars`` of the plan: the summariser sees a long
            tool result as its head, tail and facts (0: every message whole).
        given: Cache of :attr:`messages` and :attr:`input_hash` (made on first use; not part
            of the plan's value).
    """

    reason: Trigger
    retain_from_seq: int
    covers_through_seq: int
    covered: tuple[Message, ...]
    previous_summary: str | None
    previous_checkpoint_id: str | None
    focus: str | None
    max_chars: int
    chunk_chars: int
    estimated_tokens: int
    threshold: int
    target_tokens: int
    planned_tokens: int
    attempt: int = 0
    step_level: bool = False
    fact_chars: int = 0
    result_chars: int = 0
    given: _Given = msgspec.field(default_factory=_Given)

    @property
    def messages(self) -> tuple[Message, ...]:
        """The covered messages as the summariser is to see them
        (:func:`~ctxledger.domain.digest.summary_input` with :attr:`result_chars`)."""
        messages = self._given()[2]
        if messages is None:  # made elsewhere (see made_elsewhere): made again here
            messages = self._make()[2]
            assert messages is not None
        return messages

    @property
    def input_hash(self) -> str:
        """Content address of the summariser's input (:attr:`messages`, the previous summary,
        the focus and the room): a summary of the same input can be reused."""
        return self._given()[3]

    @property
    def made_chars(self) -> int:
        """Characters of :attr:`messages` (as the budget counts them)."""
        return self._given()[4]

    @property
    def input_chars(self) -> int:
        """Characters the summariser is given: the messages, the previous summary, the focus."""
        return self.made_chars + len(self.previous_summary or "") + len(self.focus or "")

    @property
    def summarizer_calls(self) -> int:
        """Calls the summariser is asked for: one per chunk (see :meth:`chunks`)."""
        calls = self._given()[5]
        return len(self.chunks()) if calls is None else calls

    def to_msgpack(self) -> bytes:
        """The plan in msgpack, for another process (:meth:`from_msgpack`); :attr:`given` is
        not sent (the receiver makes the input)."""
        return msgspec.msgpack.encode(self, enc_hook=self.encode_hook)

    @classmethod
    def from_msgpack(cls, data: bytes) -> CompactionPlan:
        """The plan :meth:`to_msgpack` encoded, with an empty :attr:`given`."""
        return msgspec.msgpack.decode(data, type=cls, dec_hook=cls.decode_hook)

    @staticmethod
    def encode_hook(value: object) -> None:
        """msgspec's ``enc_hook`` for a value that holds plans: :attr:`given` is sent as nil."""
        if isinstance(value, _Given):
            return None
        raise NotImplementedError(f"cannot encode {type(value).__name__}")

    @staticmethod
    def decode_hook(_kind: type, _value: object) -> _Given:
        """msgspec's ``dec_hook`` for a value that holds plans: :attr:`given` comes back empty."""
        return _Given()

    def made_elsewhere(self, address: str, chars: int, calls: int) -> None:
        """Keep :attr:`input_hash`, :attr:`made_chars` and :attr:`summarizer_calls` as another
        process made them from this plan's inputs (the same functions of the same values);
        :attr:`messages` is made again only if it is asked for."""
        self.given.made = (self.covered, self._key(), None, address, chars, calls)

    def _key(self) -> tuple[object, ...]:
        return (self.result_chars, self.previous_summary, self.focus, self.max_chars)

    def _given(self) -> _Made:
        made = self.given.made
        if made is None or made[0] is not self.covered or made[1] != self._key():
            made = self._make()
        return made

    def _make(self) -> _Made:
        messages = summary_input(self.covered, self.result_chars)
        address = input_hash(messages, self.previous_summary, self.focus, self.max_chars)
        chars = sum(message_chars(message) for message in messages)
        made = (self.covered, self._key(), messages, address, chars, None)
        self.given.made = made
        return made

    def started(self, compaction_id: str, *, background: bool = False) -> CompactionStarted:
        """Return the ``CompactionStarted`` event that records this plan."""
        # Imported here: a summary worker process, which never records one, loads no event
        # types (their package loads the codec).
        from ctxledger.events.types import CompactionStarted

        return CompactionStarted(
            compaction_id=compaction_id,
            reason=self.reason,
            retain_from_seq=self.retain_from_seq,
            covers_through_seq=self.covers_through_seq,
            estimated_tokens=self.estimated_tokens,
            focus=self.focus,
            attempt=self.attempt,
            background=background,
        )

    def chunks(self) -> list[tuple[Message, ...]]:
        """Split :attr:`messages` into summariser inputs of at most :attr:`chunk_chars`.

        Room for the running summary and the focus is kept in every chunk; a single message
        larger than a chunk is truncated (head, tail and a marker naming its seq).
        """
        capacity = max(
            self.chunk_chars - self.max_chars - len(self.focus or ""), self.chunk_chars // 2, 1
        )
        chunks: list[tuple[Message, ...]] = []
        current: list[Message] = []
        size = 0
        for message in self.messages:
            chars = message_chars(message)
            if chars > capacity:
                limit = max(capacity - (chars - len(message.content)), 1)
                message = msgspec.structs.replace(
                    message, content=truncate_text(message.content, limit, message.seq or 0)
                )
                chars = message_chars(message)
            if current and size + chars > capacity:
                chunks.append(tuple(current))
                current, size = [], 0
            current.append(message)
            size += chars
        if current:
            chunks.append(tuple(current))
        return chunks


def fail_compaction(plan: CompactionPlan, reason: str = "summary_unavailable") -> CompactionResult:
    """Return the not-compacted result of a plan whose summary did not arrive."""
    return CompactionResult(
        compacted=False,
        reason=reason,
        checkpoint_id=plan.previous_checkpoint_id,
        estimated_tokens=plan.estimated_tokens,
        threshold=plan.threshold,
        retain_from_seq=plan.retain_from_seq,
        messages_compacted=0,
        tokens_before=plan.estimated_tokens,
    )


def run_summarizer(plan: CompactionPlan, summarizer: Summarizer) -> str | None:
    """Summarise ``plan``'s messages incrementally, in chunks when they exceed the budget.

    Chunk 1 is summarised with the previous summary, chunk 2 with that result as the previous
    summary, and so on. Exceptions from the summariser propagate (the caller records
    ``summary_unavailable``).

    Returns:
        The summary cut to ``plan.max_chars``, or ``None`` when any call returned None or "".

    Raises:
        TypeError: The summariser returned something other than a string or None.
    """
    steps = _SummarySteps(plan)
    request = steps.first()
    while request is not None:
        request = steps.answer(summarizer(request))
    return steps.summary


async def arun_summarizer(plan: CompactionPlan, summarizer: AsyncSummarizer) -> str | None:
    """:func:`run_summarizer` for a summariser that is a coroutine function (awaited per chunk)."""
    steps = _SummarySteps(plan)
    request = steps.first()
    while request is not None:
        request = steps.answer(await summarizer(request))
    return steps.summary


class _SummarySteps:
    """The chunk-by-chunk protocol of :func:`run_summarizer`, apart from how a chunk is asked."""

    def __init__(self, plan: CompactionPlan) -> None:
        self._plan = plan
        self._chunks = iter(plan.chunks())
        self.summary: str | None = plan.previous_summary

    def first(self) -> SummaryRequest | None:
        return self._next()

    def answer(self, answer: object) -> SummaryRequest | None:
        """Take the summariser's answer to the last request; return the next request, if any."""
        if answer is None or answer == "":
            self.summary = None
            return None
        if not isinstance(answer, str):
            raise TypeError(f"a summariser must return str or None, not {type(answer).__name__}")
        self.summary = answer[: self._plan.max_chars]
        return self._next()

    def _next(self) -> SummaryRequest | None:
        chunk = next(self._chunks, None)
        if chunk is None:
            return None
        plan = self._plan
        return SummaryRequest(
            messages=chunk,
            previous_summary=self.summary,
            focus=plan.focus,
            max_chars=plan.max_chars,
        )
