"""The ``a``-prefixed twins of the :class:`~ctxledger.actors.Session` commands, for a caller on
an event loop: each awaits its answer on the caller's loop, without a worker thread (a coroutine
summariser runs on that loop too).
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxledger.actors._session_base import (
    SessionBase,
    check_reactive_error,
    defer_flag,
    loop_reply,
    manual_request,
    pending_text,
    step_command,
    with_appended_seqs,
)
from ctxledger.actors.arguments import append_command, check_limit, message_batch
from ctxledger.actors.messages import Query, Read, Settle
from ctxledger.domain import Compact, CompactionResult, ModelView, Serve
from ctxledger.domain.commands import AppendMessages, ClearHistory, RetractLast, usage_of
from ctxledger.messages import Message

__all__ = ["AsyncSession"]


class AsyncSession(SessionBase):
    """The async twins of :class:`~ctxledger.actors.Session`'s commands."""

    async def aappend(self, message: Message) -> int:
        """Async twin of :meth:`append`: awaits durability on the caller's loop."""
        batch = message_batch((message,))
        seqs: list[int] = await self._aexecute(AppendMessages(messages=batch))
        return seqs[0]

    async def aappend_many(self, messages: Sequence[Message], *, usage: object = None) -> list[int]:
        """Async twin of :meth:`append_many`."""
        batch = message_batch(messages)
        if not batch and usage is None:
            return []
        seqs: list[int] = await self._aexecute(append_command(batch, usage))
        return seqs

    async def arecord_usage(
        self,
        prompt_tokens: int | object,
        completion_tokens: int = 0,
        *,
        cached_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> None:
        """Async twin of :meth:`record_usage`."""
        command = usage_of(prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens)
        await self._aexecute(command)

    async def aprepare_step(self, pending: str = "", *, defer_record: bool = False) -> ModelView:
        """Async twin of :meth:`prepare_step` (a coroutine summariser runs on this loop)."""
        request = Serve(pending=pending_text(pending))
        view: ModelView = await self._adecide(request, defer_record=defer_flag(defer_record))
        return view

    async def astep(
        self, messages: Sequence[Message] = (), pending: str = "", *, usage: object = None
    ) -> ModelView:
        """Async twin of :meth:`step` (a coroutine summariser runs on this loop)."""
        batch = message_batch(messages)
        command = step_command(self.id, loop_reply(), batch, pending, usage)
        view: ModelView = await self._acall(command)
        return with_appended_seqs(view, len(batch))

    async def abuild_model_view(self, pending: str = "") -> ModelView:
        """Async twin of :meth:`build_model_view`."""
        view: ModelView = await self._adecide(Serve(pending=pending_text(pending), compact=False))
        return view

    async def acompact_if_needed(self, pending: str = "") -> CompactionResult:
        """Async twin of :meth:`compact_if_needed`."""
        request = Serve(pending=pending_text(pending), view=False)
        result: CompactionResult = await self._adecide(request)
        return result

    async def acompact(self, focus: str | None = None) -> CompactionResult:
        """Async twin of :meth:`compact`."""
        result: CompactionResult = await self._adecide(manual_request(focus))
        return result

    async def await_background(self) -> None:
        """Async twin of :meth:`wait_background`."""
        await self._acall(Settle(self.id, loop_reply()))

    async def areactive_compact(self, error: object = None) -> CompactionResult:
        """Async twin of :meth:`reactive_compact`."""
        check_reactive_error(error)
        request = Compact(trigger="prompt_too_long")
        result: CompactionResult = await self._adecide(request, reactive=True)
        return result

    async def aretract_last(self, replacement: Sequence[Message] = ()) -> Message:
        """Async twin of :meth:`retract_last`."""
        command = RetractLast(replacement=message_batch(replacement))
        retracted: Message = await self._aexecute(command)
        return retracted

    async def aclear(self) -> int:
        """Async twin of :meth:`clear`."""
        through: int = await self._aexecute(ClearHistory())
        return through

    async def acurrent_messages(self, limit: int | None = None) -> list[Message]:
        """Async twin of :meth:`current_messages`."""
        check_limit(limit)
        command = Read(self.id, loop_reply(), Query(what="shown", limit=limit))
        shown: list[Message] = await self._acall(command)
        return shown
