"""The ``a``-prefixed twins of :class:`~ctxledger.testing.DomainSession`'s commands.

A ``DomainSession`` is synchronous and does no I/O: each twin runs the synchronous command of
the same name (the same domain function, events, answer and errors) and returns, so an async
test drives it with the names ``Session`` has on an event loop. The summariser is called as the
synchronous commands call it (a plain function, never awaited).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ctxledger.domain.compaction import CompactionResult
from ctxledger.domain.view import ModelView
from ctxledger.messages import Message

__all__ = ["AsyncCommands"]


class _Commands(Protocol):
    """The synchronous commands the twins run (a ``DomainSession``'s)."""

    def append(self, message: Message) -> int: ...

    def append_many(self, messages: Sequence[Message], *, usage: object = None) -> list[int]: ...

    def record_usage(
        self,
        prompt_tokens: int | object,
        completion_tokens: int = 0,
        *,
        cached_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> None: ...

    def prepare_step(self, pending: str = "", *, defer_record: bool = False) -> ModelView: ...

    def step(
        self, messages: Sequence[Message] = (), pending: str = "", *, usage: object = None
    ) -> ModelView: ...

    def build_model_view(self, pending: str = "") -> ModelView: ...

    def compact_if_needed(self, pending: str = "") -> CompactionResult: ...

    def compact(self, focus: str | None = None) -> CompactionResult: ...

    def wait_background(self) -> None: ...

    def reactive_compact(self, error: object = None) -> CompactionResult: ...

    def retract_last(self, replacement: Sequence[Message] = ()) -> Message: ...

    def clear(self) -> int: ...

    def current_messages(self, limit: int | None = None) -> list[Message]: ...


class AsyncCommands:
    """The async twins of :class:`~ctxledger.testing.DomainSession`'s commands (see the module
    docstring); each is ``Session``'s twin of the same name."""

    async def aappend(self: _Commands, message: Message) -> int:
        """Async twin of :meth:`append`."""
        return self.append(message)

    async def aappend_many(
        self: _Commands, messages: Sequence[Message], *, usage: object = None
    ) -> list[int]:
        """Async twin of :meth:`append_many`."""
        return self.append_many(messages, usage=usage)

    async def arecord_usage(
        self: _Commands,
        prompt_tokens: int | object,
        completion_tokens: int = 0,
        *,
        cached_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> None:
        """Async twin of :meth:`record_usage`."""
        self.record_usage(
            prompt_tokens,
            completion_tokens,
            cached_tokens=cached_tokens,
            cache_write_tokens=cache_write_tokens,
        )

    async def aprepare_step(
        self: _Commands, pending: str = "", *, defer_record: bool = False
    ) -> ModelView:
        """Async twin of :meth:`prepare_step`."""
        return self.prepare_step(pending, defer_record=defer_record)

    async def astep(
        self: _Commands,
        messages: Sequence[Message] = (),
        pending: str = "",
        *,
        usage: object = None,
    ) -> ModelView:
        """Async twin of :meth:`step`."""
        return self.step(messages, pending, usage=usage)

    async def abuild_model_view(self: _Commands, pending: str = "") -> ModelView:
        """Async twin of :meth:`build_model_view`."""
        return self.build_model_view(pending)

    async def acompact_if_needed(self: _Commands, pending: str = "") -> CompactionResult:
        """Async twin of :meth:`compact_if_needed`."""
        return self.compact_if_needed(pending)

    async def acompact(self: _Commands, focus: str | None = None) -> CompactionResult:
        """Async twin of :meth:`compact`."""
        return self.compact(focus)

    async def await_background(self: _Commands) -> None:
        """Async twin of :meth:`wait_background`."""
        self.wait_background()

    async def areactive_compact(self: _Commands, error: object = None) -> CompactionResult:
        """Async twin of :meth:`reactive_compact`."""
        return self.reactive_compact(error)

    async def aretract_last(self: _Commands, replacement: Sequence[Message] = ()) -> Message:
        """Async twin of :meth:`retract_last`."""
        return self.retract_last(replacement)

    async def aclear(self: _Commands) -> int:
        """Async twin of :meth:`clear`."""
        return self.clear()

    async def acurrent_messages(self: _Commands, limit: int | None = None) -> list[Message]:
        """Async twin of :meth:`current_messages`."""
        return self.current_messages(limit)
